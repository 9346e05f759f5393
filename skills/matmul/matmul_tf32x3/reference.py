"""Matrix multiplication C = A @ B in fp32 (KernelBench level 1, square matmul).

Square at the benchmark size (M = K = N = 4096); the three sizes are separate
constants so that a shrunk check also exercises rectangular shapes.
"""
import torch
import torch.nn as nn

M = 4096  # rows of A and C
K = 4096  # columns of A, rows of B
N = 4096  # columns of B and C


class Model(nn.Module):
    """C = A @ B for fp32 matrices A [M, K] and B [K, N]."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []


def get_flops() -> int:
    # one multiply and one add per (m, n, k) triple
    return 2 * M * N * K


def get_bytes() -> int:
    # read A and B once, write C once, 4 bytes per fp32 element
    return 4 * (M * K + K * N + M * N)
