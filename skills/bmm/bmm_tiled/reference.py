"""Batched matrix multiplication C[b] = A[b] @ B[b] in fp32 (KernelBench level 1, bmm)."""
import torch
import torch.nn as nn

batch_size = 128  # independent matrix products
m = 512  # rows of each A and C
k = 1024  # columns of A, rows of B
n = 2048  # columns of each B and C


class Model(nn.Module):
    """C = torch.bmm(A, B) for A [batch, m, k] and B [batch, k, n]."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    A = torch.randn(batch_size, m, k)
    B = torch.randn(batch_size, k, n)
    return [A, B]


def get_init_inputs():
    return []


def get_flops() -> int:
    return 2 * batch_size * m * n * k


def get_bytes() -> int:
    # read A and B once, write C once (fp32)
    return 4 * batch_size * (m * k + k * n + m * n)
