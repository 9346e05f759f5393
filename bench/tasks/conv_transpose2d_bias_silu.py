"""2x upsampling transposed convolution (kernel 4, stride 2, padding 1) with bias, then SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
in_channels = 256
out_channels = 128
height = 64
width = 64
kernel_size = 4
stride = 2


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                     padding=(kernel_size - stride) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.up(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride]


def get_flops():
    # every input pixel scatters a kernel_size^2 patch to every output channel
    macs = batch_size * in_channels * out_channels * kernel_size * kernel_size * height * width
    out = batch_size * out_channels * height * stride * width * stride
    return 2 * macs + 2 * out


def get_bytes():
    weights = in_channels * out_channels * kernel_size * kernel_size + out_channels
    out = batch_size * out_channels * height * stride * width * stride
    return (batch_size * in_channels * height * width + weights + out) * 4
