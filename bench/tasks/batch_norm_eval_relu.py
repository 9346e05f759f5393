"""Inference batch norm (running statistics, affine) then ReLU on an NCHW fp32 activation."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 256
height = 128
width = 128


class Model(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         training=False, eps=self.eps)
        return torch.relu(y)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]


def get_flops():
    # subtract mean, multiply by inverse std, weight, bias, ReLU per element
    return 5 * batch_size * channels * height * width


def get_bytes():
    return (2 * batch_size * channels * height * width + 4 * channels) * 4
