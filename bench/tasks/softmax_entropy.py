"""Entropy of the softmax over a vocabulary: -(exp(log_softmax(x)) * log_softmax(x)).sum(-1)."""
import torch
import torch.nn as nn

batch_size = 16384
vocab_size = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits, dim=-1)
        return -(logp.exp() * logp).sum(dim=-1)


def get_inputs():
    return [torch.randn(batch_size, vocab_size)]


def get_init_inputs():
    return []


def get_flops():
    # log-softmax (max, subtract, exp, sum), then exp, multiply and sum
    return 7 * batch_size * vocab_size


def get_bytes():
    return (batch_size * vocab_size + batch_size) * 4
