"""Instance norm with affine parameters then ReLU (style-transfer and GAN generator blocks)."""
import torch
import torch.nn as nn

batch_size = 32
channels = 256
height = 256
width = 256


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.InstanceNorm2d(channels, affine=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]


def get_flops():
    # instance norm (8 per element) and ReLU
    return 9 * batch_size * channels * height * width


def get_bytes():
    return (2 * batch_size * channels * height * width + 2 * channels) * 4
