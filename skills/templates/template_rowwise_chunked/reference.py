"""Group norm over few, long groups: 8 groups of 8 channels x 128 x 128, each group 131,072 elements."""
import torch
import torch.nn as nn

batch_size = 2
features = 32
num_groups = 4
height = 128
width = 128


class Model(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


def get_inputs():
    return [torch.randn(batch_size, features, height, width)]


def get_init_inputs():
    return [features, num_groups]


def get_flops():
    return 8 * batch_size * features * height * width


def get_bytes():
    return (2 * batch_size * features * height * width + 2 * features) * 4
