"""Pre-norm residual step in bf16: h = x + residual, returns (layer_norm(h), h)."""
import torch
import torch.nn as nn

batch_size = 65536
dim = 8192


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        h = x + residual
        return self.ln(h), h


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16), torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return [dim]


def get_flops():
    # residual add, then layer norm (mean, subtract, square, mean, normalise, weight, bias)
    return 8 * batch_size * dim


def get_bytes():
    return (4 * batch_size * dim + 2 * dim) * 2
