"""Rotary position embedding on q and k (half-split layout): cos and sin broadcast over batch and heads."""
import torch
import torch.nn as nn

batch_size = 2
num_heads = 8
seq_len = 256
head_dim = 64


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(seq_len, head_dim), torch.randn(seq_len, head_dim)]


def get_init_inputs():
    return []


def get_flops():
    return 2 * 3 * batch_size * num_heads * seq_len * head_dim


def get_bytes():
    return (4 * batch_size * num_heads * seq_len * head_dim + 2 * seq_len * head_dim) * 4
