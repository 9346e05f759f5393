"""Inclusive prefix sum along dim 1 of a 2-D tensor (KernelBench level 1, cumsum)."""
import torch
import torch.nn as nn

batch_size = 2048  # rows, scanned independently
input_size = 32768  # row length (the scanned dimension)
dim = 1  # scan dimension


class Model(nn.Module):
    """y = torch.cumsum(x, dim)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [dim]


def get_flops() -> int:
    # one add per element
    return batch_size * input_size


def get_bytes() -> int:
    # read x once, write y once (fp32)
    return 2 * 4 * batch_size * input_size
