"""Linear layer with bias followed by ReLU (a matmul with a fused bias+activation epilogue)."""
import torch
import torch.nn as nn

batch_size = 8192
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_flops():
    return 2 * batch_size * in_features * out_features


def get_bytes():
    return (batch_size * in_features + in_features * out_features + out_features + batch_size * out_features) * 4
