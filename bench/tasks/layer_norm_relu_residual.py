"""Layer norm, ReLU and a residual add: relu(layer_norm(x)) + x."""
import torch
import torch.nn as nn

batch_size = 32768
dim = 16384


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.ln(x)) + x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


def get_flops():
    return 10 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4 + 2 * dim * 4
