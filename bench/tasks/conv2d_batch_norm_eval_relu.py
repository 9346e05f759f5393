"""3x3 convolution (no bias), inference batch norm and ReLU: the conv+BN pair folded at deployment."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, eps: float = 1e-5):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.weight = nn.Parameter(torch.ones(out_channels))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.register_buffer("running_mean", torch.zeros(out_channels))
        self.register_buffer("running_var", torch.ones(out_channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.batch_norm(self.conv(x), self.running_mean, self.running_var, self.weight, self.bias,
                         training=False, eps=self.eps)
        return torch.relu(y)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


def get_flops():
    out = batch_size * out_channels * height * width
    # direct convolution, then the batch norm (4 per element) and ReLU
    return 2 * out * in_channels * kernel_size * kernel_size + 5 * out


def get_bytes():
    weights = out_channels * in_channels * kernel_size * kernel_size + 4 * out_channels
    return (batch_size * (in_channels + out_channels) * height * width + weights) * 4
