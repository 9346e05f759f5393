"""Group norm (32 groups) then SiLU, the normalisation block of diffusion U-Nets."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 512
num_groups = 32
height = 128
width = 128


class Model(nn.Module):
    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gn(x))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]


def get_flops():
    # group norm (8 per element, as group_norm.py counts) and SiLU
    return 9 * batch_size * channels * height * width


def get_bytes():
    return (2 * batch_size * channels * height * width + 2 * channels) * 4
