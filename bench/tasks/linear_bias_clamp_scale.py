"""Linear layer with bias, clamped to [lo, hi] and scaled: clamp(x @ W^T + b, lo, hi) * scale."""
import torch
import torch.nn as nn

batch_size = 4096
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, lo: float, hi: float, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.lo = lo
        self.hi = hi
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.linear(x), self.lo, self.hi) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, -0.5, 0.5, 2.0]


def get_flops():
    # GEMM, then bias add, clamp and scale per output element
    return 2 * batch_size * in_features * out_features + 3 * batch_size * out_features


def get_bytes():
    return (batch_size * in_features + in_features * out_features + out_features + batch_size * out_features) * 4
