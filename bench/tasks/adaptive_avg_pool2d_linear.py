"""CNN classifier head: global average pool of a 7x7 feature map, flatten, linear to 1000 classes."""
import torch
import torch.nn as nn

batch_size = 8192
channels = 2048
height = 7
width = 7
num_classes = 1000


class Model(nn.Module):
    def __init__(self, channels: int, num_classes: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(x), 1))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, num_classes]


def get_flops():
    # pooling sum over every input element, GEMM, bias add
    return batch_size * channels * height * width + 2 * batch_size * channels * num_classes + batch_size * num_classes


def get_bytes():
    params = channels * num_classes + num_classes
    return (batch_size * channels * height * width + params + batch_size * num_classes) * 4
