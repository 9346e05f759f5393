"""Post-norm transformer sublayer output: layer_norm(x + h @ W^T + b)."""
import torch
import torch.nn as nn

batch_size = 8192
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.ln(x + self.proj(h))


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


def get_flops():
    # GEMM, then bias add, residual add and layer norm (8 per element)
    return 2 * batch_size * dim * dim + 10 * batch_size * dim


def get_bytes():
    return (3 * batch_size * dim + dim * dim + 3 * dim) * 4
