"""Linear layer followed by tanh-approximate GELU: y = gelu(x @ W^T + b, approximate="tanh").

The pattern is matmul > add (bias) > gelu[approximate=tanh]; nn.Linear stores W as [out, in].
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 1024  # rows of x
in_features = 4096  # reduction size
out_features = 4096  # columns of y


class Model(nn.Module):
    """y = gelu(linear(x), approximate="tanh") with nn.Linear(in_features, out_features)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_flops() -> int:
    # matmul (2 per multiply-add), bias add (1) and tanh-gelu (counted as 9: cube, fma, exp, div, muls)
    return 2 * batch_size * in_features * out_features + 10 * batch_size * out_features


def get_bytes() -> int:
    # read x, W and b once, write y once (fp32)
    return 4 * (batch_size * in_features + out_features * in_features + out_features
                + batch_size * out_features)
