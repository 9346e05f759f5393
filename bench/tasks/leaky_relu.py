"""leaky ReLU over a large fp32 tensor. Memory-bound: one read and one write per element."""
import torch
import torch.nn as nn

batch_size = 8192
dim = 65536


class Model(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.01]


def get_flops():
    return 2 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4
