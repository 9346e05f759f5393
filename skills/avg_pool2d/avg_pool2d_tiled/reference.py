"""2-D average pooling over NCHW input (KernelBench level 1 Average_Pooling_2D sizes).

kernel 3, stride 2, padding 1 (overlapping windows; zero padding counted in the
divisor, PyTorch's default count_include_pad=True).
"""
import torch
import torch.nn as nn

batch_size = 16  # N
channels = 64  # C
height = 256  # H
width = 256  # W
kernel_size = 3  # window taps per side
stride = 2  # window step
padding = 1  # implicit zero border


class Model(nn.Module):
    """nn.AvgPool2d(kernel_size, stride, padding) on [N, C, H, W]."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.avgpool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.avgpool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]


def _out_size(size: int) -> int:
    return (size + 2 * padding - kernel_size) // stride + 1


def get_flops() -> int:
    # kernel_size^2 adds and one multiply per output element
    return batch_size * channels * _out_size(height) * _out_size(width) * (kernel_size * kernel_size)


def get_bytes() -> int:
    # read the input once, write the output once (fp32)
    return 4 * batch_size * channels * (height * width + _out_size(height) * _out_size(width))
