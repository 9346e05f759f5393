"""Embedding projection head: L2-normalised rows of x @ W^T + b (contrastive learning)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
in_features = 2048
embed_dim = 1024


class Model(nn.Module):
    def __init__(self, in_features: int, embed_dim: int):
        super().__init__()
        self.proj = nn.Linear(in_features, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.proj(x), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, embed_dim]


def get_flops():
    # GEMM, then bias add, square, row sum and divide per output element
    return 2 * batch_size * in_features * embed_dim + 4 * batch_size * embed_dim


def get_bytes():
    return (batch_size * in_features + in_features * embed_dim + embed_dim + batch_size * embed_dim) * 4
