"""fp32 product with a transposed left operand: C = A.T @ B, A stored (K, M)."""
import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.T, B)


def get_inputs():
    return [torch.randn(K, M), torch.randn(K, N)]


def get_init_inputs():
    return []


def get_flops():
    return 2 * M * N * K


def get_bytes():
    return (M * K + K * N + M * N) * 4
