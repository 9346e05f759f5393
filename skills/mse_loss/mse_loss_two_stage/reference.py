"""Mean squared error between predictions and targets (KernelBench level 1 form).

loss = mean((predictions - targets)^2) over every element.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096  # rows
input_size = 8192  # elements per row


class Model(nn.Module):
    """F.mse_loss(predictions, targets) with the default mean reduction."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, input_size), torch.randn(batch_size, input_size)]


def get_init_inputs():
    return []


def get_flops() -> int:
    # subtract, multiply, add per element
    return 3 * batch_size * input_size


def get_bytes() -> int:
    # read both fp32 inputs once, write one fp32 scalar
    return 2 * 4 * batch_size * input_size + 4
