"""ReLU over a large fp32 tensor. Memory-bound: one read and one write per element."""
import torch
import torch.nn as nn

batch_size = 8192
dim = 65536


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_flops():
    return 1 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4
