"""Residual convolution block: x + gelu(conv3x3(x) + b), channels preserved."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 128
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]


def get_flops():
    out = batch_size * channels * height * width
    # direct convolution, then bias add, GELU and residual add per output element
    return 2 * out * channels * kernel_size * kernel_size + 3 * out


def get_bytes():
    weights = channels * channels * kernel_size * kernel_size + channels
    return (2 * batch_size * channels * height * width + weights) * 4
