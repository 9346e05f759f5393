"""Pre-norm fused QKV projection in bf16: (rms_norm(x) * weight) @ W_qkv^T, no bias."""
import torch
import torch.nn as nn

batch_size = 16384
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.bfloat16))
        self.qkv = nn.Linear(dim, 3 * dim, bias=False, dtype=torch.bfloat16)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
        return self.qkv(h)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return [dim]


def get_flops():
    # RMS norm (square, mean, normalise, weight) then a (dim -> 3 dim) GEMM
    return 4 * batch_size * dim + 2 * batch_size * dim * 3 * dim


def get_bytes():
    return (batch_size * dim + dim + 3 * dim * dim + 3 * batch_size * dim) * 2
