"""The convolution (implicit GEMM, direct) and pooling templates under Triton's interpreter, against PyTorch."""
from __future__ import annotations

import os
import types

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from kernelrag.draft.lower.conv import ConvSpec, render_conv
from kernelrag.draft.lower.conv_direct import render_direct_conv
from kernelrag.draft.lower.gemm_spec import LoweringError, Step, steps_code
from kernelrag.draft.lower.pool import PoolSpec, out_size, render_global_pool, render_pool


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
@pytest.mark.parametrize("channels_last", [False, True])
def test_convolution(dims, ks, stride, pad, dil, groups, cin, cout, size, channels_last):
    torch.manual_seed(0)
    conv = load(render_conv(ConvSpec(dims, ks, stride, pad, dil, groups, channels_last=channels_last)))
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


@pytest.mark.parametrize("dims,ks,stride,pad,dil,groups,cin,cout,size", [
    (1, (4,), (1,), (3,), (1,), 8, 8, 8, (37,)),                      # depthwise causal (uncropped)
    (2, (3, 3), (1, 1), (1, 1), (1, 1), 4, 4, 4, (8, 9)),             # depthwise 3x3
    (2, (3, 3), (2, 2), (0, 0), (1, 1), 4, 4, 8, (9, 8)),             # channel multiplier 2, stride
    (2, (3, 2), (2, 1), (1, 0), (2, 1), 2, 6, 4, (12, 10)),           # 3 input channels per group
    (3, (3, 2, 3), (1, 2, 1), (1, 0, 1), (1, 1, 2), 2, 4, 4, (5, 6, 7)),
])
def test_direct_convolution(dims, ks, stride, pad, dil, groups, cin, cout, size):
    torch.manual_seed(6)
    rendered = render_direct_conv(ConvSpec(dims, ks, stride, pad, dil, groups))
    assert "tl.dot(" not in rendered.source and "direct_convolution" in rendered.transformations
    x, w = torch.randn(2, cin, *size), torch.randn(cout, cin // groups, *ks)
    ref = CONV[dims](x.double(), w.double(), None, stride, pad, dil, groups)
    out = load(rendered)(x, w)
    assert out.shape == ref.shape
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


@pytest.mark.parametrize("dims,ks,stride,pad,dil,groups,outpad,cin,cout,size", [
    (2, (4, 4), (2, 2), (1, 1), (1, 1), 4, (0, 0), 4, 4, (5, 6)),
    (1, (3,), (3,), (1,), (2,), 2, (2,), 4, 2, (7,)),
])
def test_direct_transposed_convolution(dims, ks, stride, pad, dil, groups, outpad, cin, cout, size):
    torch.manual_seed(7)
    conv = load(render_direct_conv(ConvSpec(dims, ks, stride, pad, dil, groups, transposed=True,
                                            output_padding=outpad)))
    x, w = torch.randn(2, cin, *size), torch.randn(cin, cout // groups, *ks)
    ref = CONV_T[dims](x.double(), w.double(), None, stride, pad, outpad, groups, dil)
    out = conv(x, w)
    assert out.shape == ref.shape
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")    # inf - inf, as in the reference
def test_strided_transposed_convolution_runs_one_gemm_per_output_phase():
    spec = ConvSpec(2, (4, 3), (2, 2), (1, 1), (1, 1), transposed=True, output_padding=(1, 1))
    rendered = render_conv(spec)
    assert spec.phases and "sub_pixel_phases" in rendered.transformations
    assert "_phase_weight_kernel" in rendered.source
    assert not ConvSpec(2, (3, 3), (2, 2), (1, 1), (2, 1), transposed=True).phases     # dilation: masked gather
    torch.manual_seed(8)
    x, w = torch.randn(2, 4, 5, 4), torch.randn(4, 6, 4, 3)
    x[0, 0, 2, 1] = float("inf")    # an input must not meet the zero weight of a tap past the kernel
    ref = F.conv_transpose2d(x.double(), w.double(), None, (2, 2), (1, 1), (1, 1))
    out = load(rendered)(x, w)
    assert torch.equal(torch.isnan(out), torch.isnan(ref)) and torch.equal(torch.isinf(out), torch.isinf(ref))
    ok = torch.isfinite(ref)
    assert (out.double() - ref)[ok].abs().max().item() < 1e-5 * ref[ok].abs().max().item()


@pytest.mark.parametrize("direct", [False, True])
def test_a_crop_computes_only_the_kept_outputs(direct):
    torch.manual_seed(9)
    render = render_direct_conv if direct else render_conv
    causal = load(render(ConvSpec(1, (4,), (1,), (3,), (1,), crop=((None, -3),))))
    x, w = torch.randn(2, 6, 11), torch.randn(6, 1, 4)
    ref = F.conv1d(x.double(), w.double(), None, 1, 3, 1, 6)[..., :-3]
    out = causal(x, w)
    assert out.shape == ref.shape == (2, 6, 11)
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()
    window = load(render(ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1), crop=((1, -2), (None, 4)))))
    x, w = torch.randn(2, 3, 9, 8), torch.randn(5, 3, 3, 3)
    ref = F.conv2d(x.double(), w.double(), None, 1, 1)[:, :, 1:-2, :4]
    assert (window(x, w).double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()
    with pytest.raises(ValueError, match="empty or strided"):
        window(torch.randn(1, 3, 2, 2), w)


@pytest.mark.parametrize("kind", ["avg", "max"])
@pytest.mark.parametrize("dims,size", [(1, (37,)), (2, (7, 7)), (3, (3, 4, 5)), (1, (300,))])
def test_global_pool(kind, dims, size):
    torch.manual_seed(10)
    pool = load(render_global_pool(kind, dims, name="gpool"))
    x = torch.randn(3, 5, *size)
    x.view(-1)[7] = float("nan") if kind == "max" else x.view(-1)[7]
    fn = getattr(F, f"adaptive_{kind}_pool{dims}d")
    torch.testing.assert_close(pool(x), fn(x, 1), equal_nan=True, rtol=1e-6, atol=1e-6)
    if dims == 2:                # a channels-last input is read through its strides (one copy when flattened)
        xc = x.contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(pool(xc), fn(x, 1), equal_nan=True, rtol=1e-6, atol=1e-6)
    # every other channel: rows no longer one contiguous run, read per row through the strides
    xs = torch.randn(3, 10, *size)[:, ::2]
    torch.testing.assert_close(pool(xs), fn(xs, 1), rtol=1e-6, atol=1e-6)


def test_global_pool_epilogue():
    pool = load(render_global_pool("avg", 2, steps_code((Step("add", ("acc", "e0")), Step("relu", ("acc",)))), 1,
                                   name="gpool"))
    x, b = torch.randn(2, 6, 5, 5), torch.randn(6, 1, 1)
    torch.testing.assert_close(pool(x, b), torch.relu(x.mean((2, 3), keepdim=True) + b), rtol=1e-6, atol=1e-6)


def test_conv_bias_relu_residual_epilogue():
    torch.manual_seed(2)
    epilogue = steps_code((Step("add", ("acc", "e0")), Step("relu", ("acc",)), Step("add", ("acc", "e1"))))
    conv = load(render_conv(ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1), epilogue=epilogue, n_extra=2)))
    x, w, b = torch.randn(2, 3, 9, 11), torch.randn(8, 3, 3, 3), torch.randn(8)
    res = torch.randn(2, 8, 9, 11)
    ref = torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=1)) + res.double()
    out = conv(x, w, b.view(8, 1, 1), res)
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


@pytest.mark.parametrize("direct", [False, True])
def test_per_channel_and_full_extras_both_load_right(direct):
    """A bias (channels only: one vector load per tile), a per-image channel scale (varies
    along the batch too: the direct kernel still loads it as a vector, the GEMM as a tile)
    and a residual (a full tile) in one epilogue."""
    torch.manual_seed(3)
    epilogue = steps_code((Step("add", ("acc", "e0")), Step("mul", ("acc", "e1")), Step("add", ("acc", "e2"))))
    spec = ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1), groups=4 if direct else 1, epilogue=epilogue, n_extra=3)
    rendered = (render_direct_conv if direct else render_conv)(spec)
    assert "E0_CH: tl.constexpr" in rendered.source
    x, w = torch.randn(2, 8, 7, 9), torch.randn(8, 2 if direct else 8, 3, 3)
    b, scale, res = torch.randn(8), torch.randn(2, 8, 1, 1), torch.randn(2, 8, 7, 9)
    conv = CONV[2](x.double(), w.double(), b.double(), 1, 1, 1, 4 if direct else 1)
    ref = conv * scale.double() + res.double()
    out = load(rendered)(x, w, b.view(8, 1, 1), scale, res)
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_channels_last_conv_with_an_epilogue_over_wide_channel_groups(memory_format):
    """Two groups of 20 input channels (K steps straddle taps and groups' ends), bias, ReLU
    and a residual; an input already channels-last is read as it is (no transpose pass)."""
    torch.manual_seed(4)
    epilogue = steps_code((Step("add", ("acc", "e0")), Step("relu", ("acc",)), Step("add", ("acc", "e1"))))
    rendered = render_conv(ConvSpec(2, (3, 3), (2, 1), (1, 1), (1, 2), groups=2, epilogue=epilogue, n_extra=2,
                                    channels_last=True))
    assert "channels_last" in rendered.transformations and "k_major(" in rendered.source
    x = torch.randn(2, 40, 9, 11).contiguous(memory_format=memory_format)
    w, b = torch.randn(12, 20, 3, 3), torch.randn(12)
    ref = torch.relu(F.conv2d(x.double(), w.double(), b.double(), (2, 1), 1, (1, 2), 2))
    res = torch.randn(ref.shape)
    out = load(rendered)(x, w, b.view(12, 1, 1), res)
    assert (out.double() - (ref + res.double())).abs().max().item() < 1e-5 * ref.abs().max().item()


def test_channels_last_is_for_ordinary_convolutions():
    with pytest.raises(LoweringError, match="ordinary convolutions"):
        ConvSpec(2, (3, 3), (2, 2), (1, 1), (1, 1), transposed=True, channels_last=True)


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


@pytest.mark.parametrize("spec,w_shape", [
    (ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1), 2), (8, 2, 3, 3)),                        # groups
    (ConvSpec(2, (3, 3), (2, 1), (1, 0), (1, 2), 1, channels_last=True), (6, 4, 3, 3)),    # channels-last
    (ConvSpec(2, (3, 3), (2, 2), (1, 1), (1, 1), 1, transposed=True, output_padding=(1, 0)), (4, 6, 3, 3)),
    (ConvSpec(1, (4,), (1,), (2,), (2,), 1, transposed=True), (4, 5, 4)),                  # dilated, masked
])
def test_weight_split_into_tf32_parts_before_the_kernel(spec, w_shape):
    """SPLIT_B (opt-in for convolutions): the weight's TF32 parts made in one pass, in the
    layout the kernel reads (per group, per output phase), A split in the K loop. Forced here,
    where the interpreter computes the dots in IEEE fp32, so a missing or misplaced part shows
    as an error near TF32's 1e-3; then an inf in the weight comes out as the unsplit kernel's
    (padding or a missed tap is a zero A element, so 0 * inf is NaN there, as in PyTorch's
    padded convolution but not its transposed one)."""
    torch.manual_seed(5)
    conv = load(render_conv(spec))
    cin = w_shape[0] if spec.transposed else w_shape[1] * spec.groups
    x, w = torch.randn(2, cin, *(9,) * spec.dims), torch.randn(w_shape)
    fn = CONV_T[spec.dims] if spec.transposed else CONV[spec.dims]
    args = ((spec.stride, spec.padding, spec.output_padding or 0, spec.groups, spec.dilation) if spec.transposed
            else (spec.stride, spec.padding, spec.dilation, spec.groups))
    ref = fn(x.double(), w.double(), None, *args)
    parts, splits = conv.__globals__["tf32_parts"], []
    conv.__globals__["tf32_parts"] = lambda t: splits.append(t.shape) or parts(t)   # the split path ran
    out = conv(x, w, precision="tf32x3", split_b=True)
    assert (out.double() - ref).abs().max().item() < 1e-5 * ref.abs().max().item()
    assert len(splits) == 1
    conv(x, w)
    assert len(splits) == 1                                                      # the default: no split
    w[0, 0].view(-1)[0] = float("inf")
    ref = conv(x, w, precision="ieee", split_b=False)
    out = conv(x, w, precision="tf32x3", split_b=True)
    assert ref.isinf().any() and torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.isinf() & (out > 0), ref.isinf() & (ref > 0))


@pytest.mark.parametrize("spec, split", [
    (ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1)), True),
    (ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1), channels_last=True), True),
    (ConvSpec(3, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)), False),
    (ConvSpec(2, (4, 4), (2, 2), (1, 1), (1, 1), transposed=True), False),
    (ConvSpec(1, (3,), (1,), (1,), (1,)), False),
])
def test_the_weight_split_is_the_cuda_default_only_where_it_was_timed_faster(spec, split):
    """On an H100 (bench/results/conv-variants-h100-2026-12-07.json) the split weight ran 3-14%
    faster in every 2-D draft and 5-25% slower in the 3-D and transposed ones (1-D: not timed).
    The launcher's CUDA default and the draft's transformations (its graph evidence) agree."""
    rendered = render_conv(spec)
    assert f"split_b = x.is_cuda and {split}\n" in rendered.source
    assert ("tf32_split_pass" in rendered.transformations) is split
