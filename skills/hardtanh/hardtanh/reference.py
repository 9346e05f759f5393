"""Hardtanh over a 2-D activation tensor.

    y = min(max(x, min_val), max_val)

KernelBench level 1 style task: one elementwise op on batch_size x dim fp32 values.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Applies hardtanh elementwise."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0):
        super().__init__()
        self.min_val = float(min_val)  # lower clamp bound
        self.max_val = float(max_val)  # upper clamp bound

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardtanh(x, min_val=self.min_val, max_val=self.max_val)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [-1.0, 1.0]


def get_flops() -> int:
    # two compare-selects per element
    return 2 * batch_size * dim


def get_bytes() -> int:
    # fp32: x read once, y written once
    return 2 * batch_size * dim * 4
