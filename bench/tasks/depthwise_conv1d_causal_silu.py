"""Causal depthwise 1-D convolution (kernel 4, left padding) with bias then SiLU, as in Mamba blocks."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
channels = 4096
seq_len = 4096
kernel_size = 4


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, padding=kernel_size - 1)
        self.trim = kernel_size - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.conv(x)[..., :-self.trim])


def get_inputs():
    return [torch.randn(batch_size, channels, seq_len)]


def get_init_inputs():
    return [channels, kernel_size]


def get_flops():
    out = batch_size * channels * seq_len
    # kernel_size multiply-adds, bias add and SiLU per output element
    return 2 * kernel_size * out + 2 * out


def get_bytes():
    return (2 * batch_size * channels * seq_len + channels * kernel_size + channels) * 4
