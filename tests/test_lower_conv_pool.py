"""The convolution (implicit GEMM) and pooling templates under Triton's interpreter, against PyTorch."""
from __future__ import annotations

import os
import types

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from kernelrag.draft.lower.conv import ConvSpec, render_conv
from kernelrag.draft.lower.gemm_spec import LoweringError, Step, steps_code
from kernelrag.draft.lower.pool import PoolSpec, out_size, render_pool


def load(rendered):
    module = types.ModuleType(rendered.entry)
    exec(compile(rendered.source, f"<{rendered.entry}>", "exec"), module.__dict__)
    return getattr(module, rendered.entry)


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize("dims,ks,stride,pad,dil,groups,cin,cout,size", [
    (1, (3,), (1,), (1,), (1,), 1, 4, 8, (19,)),
    (1, (5,), (2,), (2,), (2,), 2, 4, 6, (23,)),                      # stride, dilation, groups
    (2, (3, 3), (1, 1), (1, 1), (1, 1), 1, 3, 8, (9, 11)),
    (2, (3, 2), (2, 1), (1, 0), (2, 1), 1, 3, 5, (12, 10)),           # asymmetric everything
    (2, (3, 3), (1, 1), (1, 1), (1, 1), 4, 4, 4, (8, 8)),             # depthwise
    (2, (3, 3), (2, 2), (0, 0), (1, 1), 4, 4, 8, (9, 8)),             # depthwise, channel multiplier 2
    (3, (3, 2, 3), (1, 2, 1), (1, 0, 1), (1, 1, 2), 1, 2, 4, (5, 6, 7)),
])
def test_convolution(dims, ks, stride, pad, dil, groups, cin, cout, size):
    torch.manual_seed(0)
    conv = load(render_conv(ConvSpec(dims, ks, stride, pad, dil, groups)))
    x, w = torch.randn(2, cin, *size), torch.randn(cout, cin // groups, *ks)
    ref = CONV[dims](x.double(), w.double(), None, stride, pad, dil, groups)
    out = conv(x, w)
    assert out.shape == ref.shape
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


@pytest.mark.parametrize("dims,ks,stride,pad,dil,groups,outpad,cin,cout,size", [
    (1, (3,), (3,), (1,), (1,), 1, (2,), 3, 5, (7,)),
    (2, (3, 3), (2, 2), (1, 1), (1, 1), 1, (1, 0), 4, 6, (5, 6)),
    (2, (4, 3), (2, 1), (1, 0), (1, 2), 2, (0, 0), 4, 6, (5, 6)),
    (3, (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), 1, (0, 0, 0), 2, 3, (3, 4, 3)),
])
def test_transposed_convolution(dims, ks, stride, pad, dil, groups, outpad, cin, cout, size):
    torch.manual_seed(1)
    conv = load(render_conv(ConvSpec(dims, ks, stride, pad, dil, groups, transposed=True, output_padding=outpad)))
    x, w = torch.randn(2, cin, *size), torch.randn(cin, cout // groups, *ks)
    ref = CONV_T[dims](x.double(), w.double(), None, stride, pad, outpad, groups, dil)
    out = conv(x, w)
    assert out.shape == ref.shape
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


def test_conv_bias_relu_residual_epilogue():
    torch.manual_seed(2)
    epilogue = steps_code((Step("add", ("acc", "e0")), Step("relu", ("acc",)), Step("add", ("acc", "e1"))))
    conv = load(render_conv(ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1), epilogue=epilogue, n_extra=2)))
    x, w, b = torch.randn(2, 3, 9, 11), torch.randn(8, 3, 3, 3), torch.randn(8)
    res = torch.randn(2, 8, 9, 11)
    ref = torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=1)) + res.double()
    out = conv(x, w, b.view(8, 1, 1), res)
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


def test_conv_rejects_mismatched_weight():
    conv = load(render_conv(ConvSpec(2, (3, 3), (1, 1), (0, 0), (1, 1), groups=2)))
    with pytest.raises(ValueError, match="does not fit weight"):
        conv(torch.randn(1, 3, 8, 8), torch.randn(4, 2, 3, 3))
    with pytest.raises(LoweringError, match="2 entries"):
        ConvSpec(2, (3,), (1, 1), (0, 0), (1, 1))


MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


@pytest.mark.parametrize("dims,ks,stride,pad,dil,ceil,size", [
    (1, (3,), (2,), (1,), (2,), True, (17,)),
    (2, (2, 2), (2, 2), (0, 0), (1, 1), False, (9, 8)),
    (2, (3, 3), (2, 1), (1, 1), (2, 1), True, (11, 9)),
    (3, (2, 3, 2), (2, 2, 1), (1, 1, 0), (1, 1, 2), True, (7, 8, 6)),
    (3, (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1), False, (6, 7, 5)),
])
def test_max_pool(dims, ks, stride, pad, dil, ceil, size):
    torch.manual_seed(3)
    pool = load(render_pool(PoolSpec(dims, "max", ks, stride, pad, dil, ceil)))
    x = torch.randn(2, 3, *size)
    x.view(-1)[5] = float("nan")                      # max pooling propagates NaN
    ref = MAX_POOL[dims](x, ks, stride, pad, dil, ceil_mode=ceil)
    torch.testing.assert_close(pool(x), ref, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("dims,ks,stride,pad,ceil,include_pad,divisor,size", [
    (1, (4,), (3,), (2,), True, False, None, (17,)),
    (1, (4,), (3,), (2,), True, True, None, (18,)),
    (2, (2, 2), (2, 2), (0, 0), False, True, None, (8, 8)),
    (2, (3, 3), (2, 2), (1, 1), True, True, None, (10, 9)),    # a ceil_mode window past the padding
    (2, (3, 3), (2, 2), (1, 1), True, False, None, (10, 9)),
    (2, (3, 2), (2, 2), (1, 1), False, True, 5, (10, 9)),
    (3, (3, 3, 3), (2, 2, 2), (1, 1, 1), True, False, None, (7, 8, 6)),
    (3, (2, 2, 2), (2, 2, 2), (0, 0, 0), False, True, 3, (6, 6, 6)),
])
def test_avg_pool(dims, ks, stride, pad, ceil, include_pad, divisor, size):
    torch.manual_seed(4)
    pool = load(render_pool(PoolSpec(dims, "avg", ks, stride, pad, (1,) * dims, ceil, include_pad, divisor)))
    x = torch.randn(2, 3, *size)
    args = (x, ks, stride, pad, ceil, include_pad) + (() if dims == 1 else (divisor,))
    torch.testing.assert_close(pool(x), AVG_POOL[dims](*args), rtol=1e-6, atol=1e-6)


def test_pool_epilogue_and_output_size():
    torch.manual_seed(5)
    pool = load(render_pool(PoolSpec(2, "max", (2, 2), (2, 2), (0, 0), epilogue=steps_code((Step("relu", ("acc",)),)))))
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(pool(x), torch.relu(F.max_pool2d(x, 2)))
    assert out_size(10, 3, 2, 1, 1, True) == F.max_pool1d(torch.zeros(1, 1, 10), 3, 2, 1, ceil_mode=True).shape[-1]
    with pytest.raises(LoweringError, match="no dilation"):
        PoolSpec(2, "avg", (2, 2), (2, 2), (0, 0), (2, 2))
    with pytest.raises(LoweringError, match="more than half"):
        PoolSpec(1, "max", (2,), (2,), (2,))
