"""Sum reduction over dim 1 of a (batch, dim1, dim2) fp32 tensor: a strided (non-contiguous) reduction."""
import torch
import torch.nn as nn

batch_size = 64
dim1 = 4096
dim2 = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [1]


def get_flops():
    return batch_size * dim1 * dim2


def get_bytes():
    return batch_size * dim1 * dim2 * 4 + batch_size * dim2 * 4
