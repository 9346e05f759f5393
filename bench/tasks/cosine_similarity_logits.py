"""CLIP-style logits: normalize(a) @ normalize(b)^T * exp(logit_scale), a learned temperature."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
embed_dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = F.normalize(a, dim=-1)
        b = F.normalize(b, dim=-1)
        return a @ b.t() * self.logit_scale.exp()


def get_inputs():
    return [torch.randn(batch_size, embed_dim), torch.randn(batch_size, embed_dim)]


def get_init_inputs():
    return []


def get_flops():
    # the (batch x batch) GEMM and its scaling, plus square, sum and divide over both inputs
    return 2 * batch_size * batch_size * embed_dim + batch_size * batch_size + 2 * 3 * batch_size * embed_dim


def get_bytes():
    return (2 * batch_size * embed_dim + 1 + batch_size * batch_size) * 4
