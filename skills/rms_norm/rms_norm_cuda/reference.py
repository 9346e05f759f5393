"""RMS normalization with a learnable weight over the last dimension.

    y = x / sqrt(mean(x^2) + eps) * weight        (per row of hidden_size values)

The normalization of LLaMA-style transformers, on a batch of token rows.
"""
import torch
import torch.nn as nn

batch_size = 4096
hidden_size = 8192


class Model(nn.Module):
    """RMSNorm over the last dimension with a per-feature weight."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def get_inputs():
    x = torch.randn(batch_size, hidden_size)
    return [x]


def get_init_inputs():
    return [hidden_size]


def get_flops() -> int:
    # per element: square, add to the sum, scale by rstd, multiply by weight
    return 4 * batch_size * hidden_size


def get_bytes() -> int:
    # fp32: x read once, y written once, weight read once
    return (2 * batch_size * hidden_size + hidden_size) * 4
