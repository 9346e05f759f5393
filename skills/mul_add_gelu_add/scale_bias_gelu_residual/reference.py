"""Per-feature scale and bias, exact GELU, then a residual add.

    y = gelu(x * scale + bias) + residual        scale, bias: (dim,) parameters

The epilogue of an MLP block written out as four separate PyTorch ops, each one reading
and writing the whole activation tensor.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """gelu(x * scale + bias) + residual over the last dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * self.scale + self.bias) + residual


def get_inputs():
    x = torch.randn(batch_size, dim)
    residual = torch.randn(batch_size, dim)
    return [x, residual]


def get_init_inputs():
    return [dim]


def get_flops() -> int:
    # mul, add, gelu (about 5 with erf counted as one), add: about 8 per element
    return 8 * batch_size * dim


def get_bytes() -> int:
    # fp32: x and residual read once, y written once, scale and bias read once
    return (3 * batch_size * dim + 2 * dim) * 4
