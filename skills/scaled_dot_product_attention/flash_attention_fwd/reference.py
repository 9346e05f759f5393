"""Scaled dot-product attention, non-causal, no mask, no dropout (KernelBench level 1 form).

O = softmax(Q K^T / sqrt(head_dim)) V per (batch, head), fp32 inputs.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32  # sequences
num_heads = 32  # heads per sequence
seq_len = 512  # query and key length
head_dim = 64  # features per head


class Model(nn.Module):
    """O = F.scaled_dot_product_attention(Q, K, V) for Q, K, V [batch, heads, seq, head_dim]."""

    def __init__(self):
        super().__init__()

    def forward(self, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(Q, K, V)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []


def get_flops() -> int:
    # Q K^T and P V: 2 * seq * seq * head_dim each, per (batch, head); softmax ignored
    return 4 * batch_size * num_heads * seq_len * seq_len * head_dim


def get_bytes() -> int:
    # read Q, K, V once, write O once (fp32); the seq x seq score matrix never needs to exist
    return 4 * 4 * batch_size * num_heads * seq_len * head_dim
