"""Inclusive prefix sum along dim 1 of a (batch, dim) fp32 tensor."""
import torch
import torch.nn as nn

batch_size = 8192
dim = 32768


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1]


def get_flops():
    return batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4
