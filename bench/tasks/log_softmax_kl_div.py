"""Distillation loss: KL(teacher || student) of temperature-softened softmaxes, batch mean, times T^2."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
vocab_size = 32768


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        t = self.temperature
        s = torch.log_softmax(student / t, dim=-1)
        p = torch.log_softmax(teacher / t, dim=-1)
        return F.kl_div(s, p, reduction="batchmean", log_target=True) * (t * t)


def get_inputs():
    return [torch.randn(batch_size, vocab_size), torch.randn(batch_size, vocab_size)]


def get_init_inputs():
    return [2.0]


def get_flops():
    # per element: two divides, two log-softmaxes (4 each), then exp, subtract, multiply, sum
    return 14 * batch_size * vocab_size


def get_bytes():
    return 2 * batch_size * vocab_size * 4 + 4
