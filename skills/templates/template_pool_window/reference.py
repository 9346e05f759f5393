"""3x3 max pooling, stride 2, padding 1: one program per tile of output positions."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
channels = 32
height = 64
width = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []


def get_flops():
    return 9 * batch_size * channels * (height // 2) * (width // 2)


def get_bytes():
    return batch_size * channels * height * width * 4 + batch_size * channels * (height // 2) * (width // 2) * 4
