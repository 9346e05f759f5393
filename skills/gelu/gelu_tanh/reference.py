"""GELU, tanh approximation over a 2-D activation tensor.

    y = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))

KernelBench level 1 style task: one elementwise op on batch_size x dim fp32 values.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Applies GELU, tanh approximation elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x, approximate="tanh")


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


def get_flops() -> int:
    # about 12 flops per element (polynomial, one exp, one divide, products)
    return 12 * batch_size * dim


def get_bytes() -> int:
    # fp32: x read once, y written once
    return 2 * batch_size * dim * 4
