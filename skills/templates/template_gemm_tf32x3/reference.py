"""Linear layer with bias and tanh-GELU in fp32: a GEMM on tensor cores at fp32 accuracy, epilogue in the tile."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
in_features = 512
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.fc(x), approximate="tanh")


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


def get_flops():
    return 2 * batch_size * in_features * out_features + 10 * batch_size * out_features


def get_bytes():
    return (batch_size * in_features + in_features * out_features + out_features + batch_size * out_features) * 4
