"""Transformer MLP epilogue: gelu(x @ W^T + b) + x with a square fp32 weight."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x)) + x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


def get_flops():
    # GEMM, then bias add, GELU and residual add once per output element
    return 2 * batch_size * dim * dim + 3 * batch_size * dim


def get_bytes():
    return (2 * batch_size * dim + dim * dim + dim) * 4
