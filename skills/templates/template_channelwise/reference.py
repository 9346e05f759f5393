"""Batch norm in eval mode (running statistics) then ReLU: a per-channel affine map."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
channels = 64
height = 32
width = 32


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.bn.eval()

    def forward(self, x):
        return torch.relu(self.bn(x))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]


def get_flops():
    return 3 * batch_size * channels * height * width


def get_bytes():
    return 2 * batch_size * channels * height * width * 4 + 4 * channels * 4
