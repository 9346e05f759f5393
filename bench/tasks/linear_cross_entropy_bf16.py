"""Language-model head and per-token loss in bf16: cross_entropy(h @ W^T, targets, reduction="none")
over a 32768-token vocabulary (the per-token losses a loss mask or a per-sequence mean then reduces;
their mean over 8192 random tokens is ~log(32768) whatever the inputs, too weak a check)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
hidden = 2048
vocab_size = 32768


class Model(nn.Module):
    def __init__(self, hidden: int, vocab_size: int):
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False, dtype=torch.bfloat16)

    def forward(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.lm_head(h), targets, reduction="none")


def get_inputs():
    return [torch.randn(batch_size, hidden, dtype=torch.bfloat16), torch.randint(0, vocab_size, (batch_size,))]


def get_init_inputs():
    return [hidden, vocab_size]


def get_flops():
    # GEMM, then max, subtract, exp and sum over the logits (never stored by a fused kernel)
    return 2 * batch_size * hidden * vocab_size + 4 * batch_size * vocab_size


def get_bytes():
    return (batch_size * hidden + hidden * vocab_size + batch_size) * 2 + batch_size * 8
