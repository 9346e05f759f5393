"""Softplus over a 2-D activation tensor.

    y = log(1 + exp(beta * x)) / beta, or x where beta * x > threshold

KernelBench level 1 style task: one elementwise op on batch_size x dim fp32 values.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Applies softplus elementwise."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = float(beta)  # sharpness: softplus(x) = log(1 + exp(beta * x)) / beta
        self.threshold = float(threshold)  # above beta * x > threshold the result is x itself

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x, beta=self.beta, threshold=self.threshold)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [1.0, 20.0]


def get_flops() -> int:
    # about 8 flops per element (exp and log counted as one each)
    return 8 * batch_size * dim


def get_bytes() -> int:
    # fp32: x read once, y written once
    return 2 * batch_size * dim * 4
