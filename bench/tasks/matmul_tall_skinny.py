"""Tall-skinny fp32 product: (M, K) @ (K, M) with tiny K, so the M x M output dominates (memory-bound)."""
import torch
import torch.nn as nn

M = 32768
K = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, M)]


def get_init_inputs():
    return []


def get_flops():
    return 2 * M * M * K


def get_bytes():
    return (2 * M * K + M * M) * 4
