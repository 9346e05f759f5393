"""LogSoftmax over dim 1 of a (batch_size, dim) tensor, i.e. over the last dimension.

    y[i, j] = x[i, j] - log(sum_k exp(x[i, k]))

KernelBench level 1 style task (the dimension is a constructor argument).
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """LogSoftmax over the given dimension."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [1]


def get_flops() -> int:
    # per element: max compare, subtract, exp, add to the sum, one subtract of the log-sum-exp
    return 5 * batch_size * dim


def get_bytes() -> int:
    # fp32: x read once, y written once (the minimum; a kernel may read x twice)
    return 2 * batch_size * dim * 4
