"""Masked attention probabilities: softmax(masked_fill(q @ k^T * scale, pad_mask, -inf)) with a key padding mask."""
import torch
import torch.nn as nn

batch_size = 8
num_heads = 16
seq_len = 2048
head_dim = 64


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        return torch.softmax(scores.masked_fill(pad_mask, float("-inf")), dim=-1)


def get_inputs():
    # True marks a padded key; one key in ten is padding, so no row is fully masked
    return [torch.randn(batch_size, num_heads, seq_len, head_dim),
            torch.randn(batch_size, num_heads, seq_len, head_dim),
            torch.rand(batch_size, 1, 1, seq_len) < 0.1]


def get_init_inputs():
    return [head_dim ** -0.5]


def get_flops():
    # GEMM, then scale, mask select and softmax (max, subtract, exp, sum, divide) per score
    scores = batch_size * num_heads * seq_len * seq_len
    return 2 * scores * head_dim + 7 * scores


def get_bytes():
    qk = 2 * batch_size * num_heads * seq_len * head_dim
    return (qk + batch_size * num_heads * seq_len * seq_len) * 4 + batch_size * seq_len
