"""Batched fp32 matrix product C[b] = A[b] @ B[b]."""
import torch
import torch.nn as nn

batch_size = 128
m = 512
k = 1024
n = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []


def get_flops():
    return 2 * batch_size * m * n * k


def get_bytes():
    return batch_size * (m * k + k * n + m * n) * 4
