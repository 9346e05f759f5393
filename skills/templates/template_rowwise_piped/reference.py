"""Layer norm over long rows with learned weight and bias: 6 rows of 16,384 fp32 (64 KiB a row)."""
import torch
import torch.nn as nn

batch_size = 6
dim = 16384


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


def get_flops():
    return 8 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4 + 2 * dim * 4
