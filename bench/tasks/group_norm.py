"""Group norm of an NCHW fp32 activation with affine weight and bias."""
import torch
import torch.nn as nn

batch_size = 64
features = 64
num_groups = 8
height = 256
width = 256


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
