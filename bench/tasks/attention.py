"""Non-causal scaled dot-product attention, fp16, head_dim 64."""
import torch
import torch.nn as nn

batch_size = 16
num_heads = 16
seq_len = 4096
head_dim = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, head_dim, dtype=torch.float16), torch.randn(batch_size, num_heads, seq_len, head_dim, dtype=torch.float16), torch.randn(batch_size, num_heads, seq_len, head_dim, dtype=torch.float16)]


def get_init_inputs():
    return []


def get_flops():
    return 4 * batch_size * num_heads * seq_len * seq_len * head_dim


def get_bytes():
    return 4 * batch_size * num_heads * seq_len * head_dim * 2
