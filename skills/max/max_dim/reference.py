"""Max over one dimension of a 3-D tensor (the values, not the indices).

    y[b, j] = max_i x[b, i, j]        (reduce_dim = 1)

KernelBench level 1 style task ("max reduction over a dimension"); the dimension is a
constructor argument.
"""
import torch
import torch.nn as nn

batch_size = 16
dim1 = 4096
dim2 = 4095
reduce_dim = 1


class Model(nn.Module):
    """Max over `dim`; returns the values."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim)[0]


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]


def _out_numel() -> int:
    sizes = [batch_size, dim1, dim2]
    sizes[reduce_dim] = 1
    return sizes[0] * sizes[1] * sizes[2]


def get_flops() -> int:
    # one compare per input element
    return batch_size * dim1 * dim2


def get_bytes() -> int:
    # fp32: x read once, the reduced tensor written once
    return (batch_size * dim1 * dim2 + _out_numel()) * 4
