"""2D average pooling (kernel 2, stride 2) of an NCHW fp32 tensor."""
import torch
import torch.nn as nn

batch_size = 32
channels = 64
height = 512
width = 512
kernel_size = 2
stride = 2


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride]


def get_flops():
    return batch_size * channels * height * width


def get_bytes():
    return batch_size * channels * height * width * 4 + batch_size * channels * height * width // (stride * stride) * 4
