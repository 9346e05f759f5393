"""Leaky ReLU over a 2-D activation tensor.

    y = x if x >= 0 else negative_slope * x

KernelBench level 1 style task: one elementwise op on batch_size x dim fp32 values.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Applies Leaky ReLU elementwise."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = float(negative_slope)  # slope used for x < 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [0.01]


def get_flops() -> int:
    # one compare and one multiply per element
    return 2 * batch_size * dim


def get_bytes() -> int:
    # fp32: x read once, y written once
    return 2 * batch_size * dim * 4
