"""Rotary position embedding applied to q and k: x * cos + rotate_half(x) * sin (half-split layout)."""
import torch
import torch.nn as nn

batch_size = 16
num_heads = 32
seq_len = 2048
head_dim = 128


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
    # two multiplies and an add per element of q and of k (the negation is a sign flip on half of them)
    return 2 * 3 * batch_size * num_heads * seq_len * head_dim


def get_bytes():
    return (4 * batch_size * num_heads * seq_len * head_dim + 2 * seq_len * head_dim) * 4
