"""Square fp32 matrix product C = A @ B (full fp32: TF32 is off in the reference)."""
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []


def get_flops():
    return 2 * N * N * N


def get_bytes():
    return 3 * N * N * 4
