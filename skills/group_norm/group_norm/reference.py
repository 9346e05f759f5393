"""Group normalization with per-channel affine weight and bias on an NCHW tensor.

    y[n, c] = (x[n, c] - mean[n, g]) / sqrt(var[n, g] + eps) * weight[c] + bias[c]

where g = c // channels_per_group and the statistics run over the group's channels and
all spatial positions (biased variance). KernelBench level 1 style task; the channel
count is num_groups * channels_per_group so any shrinking of the sizes stays valid.
"""
import torch
import torch.nn as nn

batch_size = 16
num_groups = 8
channels_per_group = 8
dim1 = 256
dim2 = 256


class Model(nn.Module):
    """GroupNorm with learnable per-channel weight and bias."""

    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.num_groups = num_groups
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)


def get_inputs():
    x = torch.randn(batch_size, num_groups * channels_per_group, dim1, dim2)
    return [x]


def get_init_inputs():
    return [num_groups * channels_per_group, num_groups]


def get_flops() -> int:
    # per element: sum, centred square and add, then one multiply-add for the affine normalize
    return 6 * batch_size * num_groups * channels_per_group * dim1 * dim2


def get_bytes() -> int:
    # fp32: x read once, y written once, weight and bias read once
    numel = batch_size * num_groups * channels_per_group * dim1 * dim2
    return (2 * numel + 2 * num_groups * channels_per_group) * 4
