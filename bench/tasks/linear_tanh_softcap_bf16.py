"""Soft-capped language-model logits in bf16: cap * tanh((h @ W^T) / cap)."""
import torch
import torch.nn as nn

batch_size = 8192
hidden = 4096
vocab_size = 32768


class Model(nn.Module):
    def __init__(self, hidden: int, vocab_size: int, cap: float):
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False, dtype=torch.bfloat16)
        self.cap = cap

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.cap * torch.tanh(self.lm_head(h) / self.cap)


def get_inputs():
    return [torch.randn(batch_size, hidden, dtype=torch.bfloat16)]


def get_init_inputs():
    return [hidden, vocab_size, 30.0]


def get_flops():
    # GEMM, then divide, tanh and multiply per logit
    return 2 * batch_size * hidden * vocab_size + 3 * batch_size * vocab_size


def get_bytes():
    return (batch_size * hidden + hidden * vocab_size + batch_size * vocab_size) * 2
