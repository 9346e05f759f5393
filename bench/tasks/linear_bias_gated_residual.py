"""Gated residual of a projection, as in adaLN-Zero blocks: x + gate * (h @ W^T + b), gate per sample."""
import torch
import torch.nn as nn

batch_size = 8
seq_len = 1024
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, h: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return x + gate * self.proj(h)


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim), torch.randn(batch_size, seq_len, dim),
            torch.randn(batch_size, 1, dim)]


def get_init_inputs():
    return [dim]


def get_flops():
    # GEMM over batch_size * seq_len rows, then bias add, gate multiply and residual add
    return 2 * batch_size * seq_len * dim * dim + 3 * batch_size * seq_len * dim


def get_bytes():
    return (3 * batch_size * seq_len * dim + batch_size * dim + dim * dim + dim) * 4
