"""Row log-softmax over long rows: 4 rows of 32,768 fp32 (128 KiB a row)."""
import torch
import torch.nn as nn

batch_size = 4
dim = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


def get_flops():
    return 5 * batch_size * dim


def get_bytes():
    return 2 * batch_size * dim * 4
