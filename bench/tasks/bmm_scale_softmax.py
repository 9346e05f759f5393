"""Attention probabilities: softmax(bmm(q, k^T) * scale) over keys, (batch * heads) fp32 batches."""
import torch
import torch.nn as nn

batch_heads = 256
seq_len = 2048
head_dim = 64


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.bmm(q, k.transpose(1, 2)) * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(batch_heads, seq_len, head_dim), torch.randn(batch_heads, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim ** -0.5]


def get_flops():
    # batched GEMM, then scale and softmax (max, subtract, exp, sum, divide) per score
    return 2 * batch_heads * seq_len * seq_len * head_dim + 6 * batch_heads * seq_len * seq_len


def get_bytes():
    return (2 * batch_heads * seq_len * head_dim + batch_heads * seq_len * seq_len) * 4
