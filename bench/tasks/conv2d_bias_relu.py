"""3x3 convolution with bias (padding 1) then ReLU, NCHW fp32."""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 128
out_channels = 128
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


def get_flops():
    out = batch_size * out_channels * height * width
    # direct convolution, then bias add and ReLU per output element
    return 2 * out * in_channels * kernel_size * kernel_size + 2 * out


def get_bytes():
    weights = out_channels * in_channels * kernel_size * kernel_size + out_channels
    return (batch_size * (in_channels + out_channels) * height * width + weights) * 4
