"""Gating x * sigmoid(y), as in GLU-style layers."""
import torch
import torch.nn as nn

batch_size = 8192
dim = 65536


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(y)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_flops():
    return 5 * batch_size * dim


def get_bytes():
    return 3 * batch_size * dim * 4
