"""adaLN modulation (diffusion transformers): layer_norm(x) * (1 + scale) + shift, per-sample scale and shift."""
import torch
import torch.nn as nn

batch_size = 64
seq_len = 4096
dim = 1152


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.ln(x) * (1 + scale) + shift


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim), torch.randn(batch_size, 1, dim), torch.randn(batch_size, 1, dim)]


def get_init_inputs():
    return [dim]


def get_flops():
    # layer norm without affine (6 per element), then the modulation multiply and add
    return 8 * batch_size * seq_len * dim + batch_size * dim


def get_bytes():
    return (2 * batch_size * seq_len * dim + 2 * batch_size * dim) * 4
