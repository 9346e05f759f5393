"""Layer norm over the last dim with learned weight and bias (fp32)."""
import torch
import torch.nn as nn

batch_size = 32768
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
