"""Softmax of scaled logits softmax(x * scale) over the last dim."""
import torch
import torch.nn as nn

batch_size = 16384
dim = 32768


class Model(nn.Module):
    def __init__(self, scale: float = 0.125):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.125]


def get_flops():
    return 6 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4
