"""MobileNet block: 3x3 depthwise convolution, ReLU6, 1x1 pointwise convolution, ReLU6 (both with bias)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 256
out_channels = 256
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)
        self.pointwise = nn.Conv2d(channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(self.pointwise(F.relu6(self.depthwise(x))))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, out_channels, kernel_size]


def get_flops():
    pixels = batch_size * height * width
    depthwise = 2 * pixels * channels * kernel_size * kernel_size + 2 * pixels * channels
    pointwise = 2 * pixels * channels * out_channels + 2 * pixels * out_channels
    return depthwise + pointwise


def get_bytes():
    weights = channels * kernel_size * kernel_size + channels + out_channels * channels + out_channels
    return (batch_size * (channels + out_channels) * height * width + weights) * 4
