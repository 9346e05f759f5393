"""Square bf16 matrix product C = A @ B on tensor cores (fp32 accumulation)."""
import torch
import torch.nn as nn

N = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N, dtype=torch.bfloat16), torch.randn(N, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def get_flops():
    return 2 * N * N * N


def get_bytes():
    return 3 * N * N * 2
