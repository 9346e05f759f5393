"""VGG-style stage: 3x3 convolution with bias, ReLU, 2x2 max pooling (stride 2)."""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
pool = 2


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, pool: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pool = nn.MaxPool2d(pool, stride=pool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool]


def get_flops():
    conv_out = batch_size * out_channels * height * width
    # direct convolution, then bias add, ReLU and one comparison per pre-pool element
    return 2 * conv_out * in_channels * kernel_size * kernel_size + 3 * conv_out


def get_bytes():
    weights = out_channels * in_channels * kernel_size * kernel_size + out_channels
    pooled = batch_size * out_channels * (height // pool) * (width // pool)
    return (batch_size * in_channels * height * width + weights + pooled) * 4
