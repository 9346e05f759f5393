"""Cross-entropy loss over class logits, mean over the batch (KernelBench level 1 form).

loss = mean_i( logsumexp(x_i) - x_i[t_i] ) for logits x [batch, classes], targets t [batch].
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192  # rows (samples)
num_classes = 4096  # logits per row


class Model(nn.Module):
    """F.cross_entropy(predictions, targets) with the default mean reduction."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []


def get_flops() -> int:
    # per logit: max compare, subtract, exp, add (4); per row a log and two subtractions are negligible
    return 4 * batch_size * num_classes


def get_bytes() -> int:
    # read the fp32 logits and the int64 targets once, write one fp32 scalar
    return 4 * batch_size * num_classes + 8 * batch_size + 4
