"""SwiGLU MLP gate in bf16: silu(x @ Wg^T) * (x @ Wu^T), two bias-free projections."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
in_features = 4096
hidden_features = 11008


class Model(nn.Module):
    def __init__(self, in_features: int, hidden_features: int):
        super().__init__()
        self.gate = nn.Linear(in_features, hidden_features, bias=False, dtype=torch.bfloat16)
        self.up = nn.Linear(in_features, hidden_features, bias=False, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate(x)) * self.up(x)


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, hidden_features]


def get_flops():
    # two GEMMs sharing x, then SiLU and the gating multiply
    return 4 * batch_size * in_features * hidden_features + 2 * batch_size * hidden_features


def get_bytes():
    return (batch_size * in_features + 2 * in_features * hidden_features + batch_size * hidden_features) * 2
