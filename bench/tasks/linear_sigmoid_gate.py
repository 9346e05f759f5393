"""Gated attention output: attn * sigmoid(x @ Wg^T + bg), a sigmoid gate computed from the layer input."""
import torch
import torch.nn as nn

batch_size = 8192
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gate = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        return attn * torch.sigmoid(self.gate(x))


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_flops():
    # GEMM, then bias add, sigmoid and gating multiply per output element
    return 2 * batch_size * in_features * out_features + 3 * batch_size * out_features


def get_bytes():
    params = in_features * out_features + out_features
    return (batch_size * in_features + params + 2 * batch_size * out_features) * 4
