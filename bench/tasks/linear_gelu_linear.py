"""Transformer MLP: fc2(gelu(fc1(x))), dim -> 4 dim -> dim, both linears with bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
dim = 2048
hidden = 8192


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, hidden]


def get_flops():
    # two GEMMs, bias add and GELU on the hidden activation, bias add on the output
    return 4 * batch_size * dim * hidden + 2 * batch_size * hidden + batch_size * dim


def get_bytes():
    params = 2 * dim * hidden + hidden + dim
    return (2 * batch_size * dim + params) * 4
