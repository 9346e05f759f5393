"""Mean pooling over the sequence then a linear classifier head: linear(x.mean(dim=1))."""
import torch
import torch.nn as nn

batch_size = 256
seq_len = 1024
dim = 4096
num_classes = 1024


class Model(nn.Module):
    def __init__(self, dim: int, num_classes: int):
        super().__init__()
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.mean(dim=1))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, num_classes]


def get_flops():
    # the pooling sum reads every element once; the head is a small GEMM
    return batch_size * seq_len * dim + 2 * batch_size * dim * num_classes + batch_size * num_classes


def get_bytes():
    return (batch_size * seq_len * dim + dim * num_classes + num_classes + batch_size * num_classes) * 4
