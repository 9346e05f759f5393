"""Row softmax over the last dim of a (batch, dim) fp32 tensor."""
import torch
import torch.nn as nn

batch_size = 16384
dim = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_flops():
    return 5 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4
