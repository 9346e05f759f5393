"""GEGLU MLP gate: a, g = (x @ W^T + b).chunk(2); a * gelu(g), one projection to twice the width."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
in_features = 4096
hidden_features = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, hidden_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * hidden_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, g = self.proj(x).chunk(2, dim=-1)
        return a * F.gelu(g)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features]


def get_flops():
    # GEMM to 2 * hidden, bias add on both halves, GELU and the gating multiply
    return 4 * batch_size * in_features * hidden_features + 4 * batch_size * hidden_features


def get_bytes():
    params = 2 * hidden_features * in_features + 2 * hidden_features
    return (batch_size * in_features + params + batch_size * hidden_features) * 4
