"""Softmax over the last dimension of a (batch_size, dim) tensor.

    y[i, j] = exp(x[i, j]) / sum_k exp(x[i, k])

KernelBench level 1 style task.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


def get_flops() -> int:
    # per element: max compare, subtract, exp, add to the sum, one multiply by 1/sum
    return 5 * batch_size * dim


def get_bytes() -> int:
    # fp32: x read once, y written once (the minimum; a kernel may read x twice)
    return 2 * batch_size * dim * 4
