"""RMS norm with weight followed by SiLU."""
import torch
import torch.nn as nn

batch_size = 32768
dim = 16384


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return torch.nn.functional.silu(x * rms * self.weight)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


def get_flops():
    return 8 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4 + dim * 4
