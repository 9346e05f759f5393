"""Linear layer followed by ReLU: y = relu(x @ W^T + b) (KernelBench level 2 form).

The pattern is matmul > add (bias) > relu; nn.Linear stores W as [out, in].
"""
import torch
import torch.nn as nn

batch_size = 1024  # rows of x
in_features = 4096  # reduction size
out_features = 4096  # columns of y


class Model(nn.Module):
    """y = relu(linear(x)) with nn.Linear(in_features, out_features)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_flops() -> int:
    # matmul (2 per multiply-add) plus the bias add and the relu, one each per output
    return 2 * batch_size * in_features * out_features + 2 * batch_size * out_features


def get_bytes() -> int:
    # read x, W and b once, write y once (fp32)
    return 4 * (batch_size * in_features + out_features * in_features + out_features
                + batch_size * out_features)
