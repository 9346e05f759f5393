"""ELU over a 2-D activation tensor.

    y = x if x > 0 else alpha * (exp(x) - 1)

KernelBench level 1 style task: one elementwise op on batch_size x dim fp32 values.
"""
import torch
import torch.nn as nn

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """Applies ELU elementwise."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = float(alpha)  # scale of the negative branch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.elu(x, alpha=self.alpha)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [1.0]


def get_flops() -> int:
    # about 4 flops per element (exp counted as one)
    return 4 * batch_size * dim


def get_bytes() -> int:
    # fp32: x read once, y written once
    return 2 * batch_size * dim * 4
