"""Mean cross-entropy of (batch, classes) fp32 logits against integer targets."""
import torch
import torch.nn as nn

batch_size = 32768
num_classes = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []


def get_flops():
    return 4 * batch_size * num_classes


def get_bytes():
    return batch_size * num_classes * 4 + batch_size * 8 + 4
