"""Pre-norm projection: linear(layer_norm(x)) with affine norm and a biased fp32 linear."""
import torch
import torch.nn as nn

batch_size = 8192
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.ln = nn.LayerNorm(in_features)
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.ln(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_flops():
    # layer norm (8 per input element), GEMM, bias add
    return 8 * batch_size * in_features + 2 * batch_size * in_features * out_features + batch_size * out_features


def get_bytes():
    params = 2 * in_features + in_features * out_features + out_features
    return (batch_size * in_features + params + batch_size * out_features) * 4
