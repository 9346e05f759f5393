"""Video / 3-D U-Net block: 3x3x3 convolution with bias, group norm (32 groups), SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
in_channels = 64
out_channels = 64
num_groups = 32
depth = 16
height = 64
width = 64
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_groups: int):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.gn = nn.GroupNorm(num_groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gn(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]


def get_flops():
    out = batch_size * out_channels * depth * height * width
    # direct convolution, then bias add, group norm (8 per element) and SiLU
    return 2 * out * in_channels * kernel_size ** 3 + 10 * out


def get_bytes():
    weights = out_channels * in_channels * kernel_size ** 3 + 3 * out_channels
    return (batch_size * (in_channels + out_channels) * depth * height * width + weights) * 4
