"""Scaled softmax over long rows: the row is walked in chunks, statistics first, outputs second."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x * 0.125, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_flops():
    return 6 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4
