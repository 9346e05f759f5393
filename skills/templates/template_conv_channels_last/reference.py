"""3x3 convolution with bias and ReLU, as an implicit GEMM over channels-last tiles."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
in_channels = 16
out_channels = 32
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]


def get_flops():
    return 2 * batch_size * out_channels * height * width * in_channels * 9


def get_bytes():
    return (batch_size * in_channels * height * width + out_channels * in_channels * 9 + out_channels + batch_size * out_channels * height * width) * 4
