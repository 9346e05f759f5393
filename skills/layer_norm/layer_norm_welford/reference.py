"""Layer normalization with an affine weight and bias over the trailing dimension.

    y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias      (biased variance, per row)

KernelBench level 1 style task, with rows of a transformer's hidden size.
"""
import torch
import torch.nn as nn

batch_size = 4096
features = 8192


class Model(nn.Module):
    """LayerNorm over `normalized_shape` (the trailing dims) with learnable weight and bias."""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias,
                                              self.eps)


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [(features,)]


def get_flops() -> int:
    # per element: mean and variance updates (about 4), normalize and affine (about 4)
    return 8 * batch_size * features


def get_bytes() -> int:
    # fp32: x read once, y written once, weight and bias read once
    return (2 * batch_size * features + 2 * features) * 4
