"""Matrix multiplication C = A @ B in bf16 (KernelBench level 1 square matmul, bf16 inputs).

Square at the benchmark size (M = K = N = 4096); separate constants so that a
shrunk check also exercises rectangular shapes.
"""
import torch
import torch.nn as nn

M = 4096  # rows of A and C
K = 4096  # columns of A, rows of B
N = 4096  # columns of B and C


class Model(nn.Module):
    """C = A @ B for bf16 matrices A [M, K] and B [K, N]; C is bf16."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K, dtype=torch.bfloat16)
    B = torch.randn(K, N, dtype=torch.bfloat16)
    return [A, B]


def get_init_inputs():
    return []


def get_flops() -> int:
    # one multiply and one add per (m, n, k) triple
    return 2 * M * N * K


def get_bytes() -> int:
    # read A and B once, write C once, 2 bytes per bf16 element
    return 2 * (M * K + K * N + M * N)
