"""Depthwise 3x3 convolution with bias and ReLU6: one channel per group, no tensor cores."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
channels = 64
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x):
        return F.relu6(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]


def get_flops():
    return 2 * batch_size * channels * height * width * 9


def get_bytes():
    return (2 * batch_size * channels * height * width + channels * 9 + channels) * 4
