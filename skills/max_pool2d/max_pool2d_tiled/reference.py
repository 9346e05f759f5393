"""2-D max pooling over NCHW input (KernelBench level 1, Max_Pooling_2D parameters).

kernel 2, stride 2, padding 1, dilation 3: each output takes the max of a 2 x 2
window whose taps are 3 pixels apart, over an input padded with -inf by 1.
"""
import torch
import torch.nn as nn

batch_size = 16  # N
channels = 64  # C
height = 256  # H
width = 256  # W
kernel_size = 2  # window taps per side
stride = 2  # window step
padding = 1  # implicit -inf border
dilation = 3  # distance between taps


class Model(nn.Module):
    """nn.MaxPool2d(kernel_size, stride, padding, dilation) on [N, C, H, W]."""

    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.maxpool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.maxpool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]


def _out_size(size: int) -> int:
    return (size + 2 * padding - dilation * (kernel_size - 1) - 1) // stride + 1


def get_flops() -> int:
    # kernel_size^2 - 1 comparisons per output element
    return batch_size * channels * _out_size(height) * _out_size(width) * (kernel_size * kernel_size - 1)


def get_bytes() -> int:
    # read the input once, write the output once (fp32)
    return 4 * batch_size * channels * (height * width + _out_size(height) * _out_size(width))
