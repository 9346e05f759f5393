"""Log-sum-exp over the output features of a linear layer: logsumexp(x @ W^T + b, dim=1)."""
import torch
import torch.nn as nn

batch_size = 8192
in_features = 2048
out_features = 8192


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self.linear(x), dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_flops():
    # GEMM, then bias add, max-subtract, exp and sum per GEMM output element
    return 2 * batch_size * in_features * out_features + 4 * batch_size * out_features


def get_bytes():
    return (batch_size * in_features + in_features * out_features + out_features + batch_size) * 4
