"""Template skill: pool (window). 3x3 max pooling, stride 2, padding 1.

Technique: one program computes BLOCK outputs of the flattened [N * C, OH, OW] output.
For each of the 9 window taps (unrolled at compile time) it loads the input element
under every output of the block. Taps that fall in the padding are skipped, and each
tap is folded into an fp32 running max (a running sum for avg). Neighbouring outputs
read neighbouring inputs, so each tap's load is a strided but cache-friendly sweep. The
windows overlap (stride 2 < 3), so repeated taps come from L1/L2. PyTorch's rules are
followed exactly: the output size with ceil_mode, -inf padding with NaN propagation
for max, and the divisor rules (divisor_override, count_include_pad) for avg.

Bytes and FLOPs: the input is 8 x 32 x 64 x 64 = 1,048,576 elements (4.2 MB, read about
once from HBM) and the output 8 x 32 x 32 x 32 = 262,144 (1.0 MB, written once). That
is 5.2 MB, with 9 compares per output = 2.4 M operations: memory-bound, floor bytes /
bandwidth.

Fusion points: an elementwise chain after the pool (an activation, a scale, a bias, or
other tensors broadcast to the output) runs on the pooled value before its one store.
The window loop itself is the reduction. Elementwise ops before the pool are their own
region: the anchored templates take only what follows the anchor, and a prologue
inside the window loop would be recomputed for every tap that reads an element.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 8
channels = 32
height = 64
width = 64


def _cdiv(a, b):
    """ceil(a / b) for ints: triton.cdiv without its constexpr wrapper."""
    return -(-a // b)


def _out_size(L, k, s, p, d, ceil_mode):
    span = L + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= L + p:   # the last window may not start in the right padding
        out -= 1
    return out


@triton.jit
def pool_0_pool_kernel(
    x_ptr,  # input [N, C, L0, L1] through its strides
    y_ptr,  # output [N, C, O0, O1] through its strides
    total, C,  # number of outputs, channels
    L0, L1, O0, O1,  # input and output spatial sizes
    s_xn, s_xc, s_x0, s_x1,  # element strides of the input
    s_yn, s_yc, s_y0, s_y1,  # element strides of the output
    KS0: tl.constexpr, S0: tl.constexpr, P0: tl.constexpr, DL0: tl.constexpr,  # window, stride, padding, dilation of dim 0
    KS1: tl.constexpr, S1: tl.constexpr, P1: tl.constexpr, DL1: tl.constexpr,  # window, stride, padding, dilation of dim 1
    BLOCK: tl.constexpr,  # outputs per program
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < total
    r = offs
    o1 = r % O1
    r = r // O1
    o0 = r % O0
    r = r // O0
    n = r // C
    c = r % C
    base = x_ptr + n.to(tl.int64) * s_xn + c.to(tl.int64) * s_xc
    acc = tl.full((BLOCK,), float('-inf'), dtype=tl.float32)
    for t0 in tl.static_range(KS0):
        i0 = o0 * S0 - P0 + t0 * DL0
        ok0 = live & (i0 >= 0) & (i0 < L0)
        for t1 in tl.static_range(KS1):
            i1 = o1 * S1 - P1 + t1 * DL1
            ok1 = ok0 & (i1 >= 0) & (i1 < L1)
            v = tl.load(base + i0.to(tl.int64) * s_x0 + i1.to(tl.int64) * s_x1, mask=ok1, other=float('-inf')).to(tl.float32)
            acc = tl.where((v > acc) | (v != v), v, acc)  # NaN propagates, as in PyTorch
    y_off = n.to(tl.int64) * s_yn + c.to(tl.int64) * s_yc + o0.to(tl.int64) * s_y0 + o1.to(tl.int64) * s_y1
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=live)


def pool_0_pool(x, ):
    """Max pooling of x [N, C, L0, L1] (kernel (3, 3), stride (2, 2), padding (1, 1), dilation (1, 1)), epilogue fused."""
    if x.ndim != 2 + 2:
        raise ValueError(f"pool_0_pool: need a [N, C, L0, L1] input, got shape {tuple(x.shape)}")
    L = list(x.shape[2:])
    O = [_out_size(L[i], k, s, p, d, False) for i, (k, s, p, d) in enumerate(zip((3, 3), (2, 2), (1, 1), (1, 1)))]
    if min(O) <= 0:
        raise ValueError(f"pool_0_pool: input {tuple(x.shape)} is too small for the window (output {O})")
    y = torch.empty((x.shape[0], x.shape[1], *O), device=x.device, dtype=x.dtype)
    extras = [e.expand(y.shape) for e in ()]
    e_st = [s for e in extras for s in e.stride()]
    total = y.numel()
    BLOCK = 256 if x.is_cuda else 64
    pool_0_pool_kernel[(_cdiv(total, BLOCK),)](
        x, y, total, x.shape[1], *L, *O, *x.stride(), *y.stride(), *e_st, KS0=3, S0=2, P0=1, DL0=1, KS1=3, S1=2, P1=1, DL1=1, BLOCK=BLOCK)
    return y


def pool_0(x0):
    """max_pool2d (pool template)"""
    return (pool_0_pool(x0),)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x):
        t1, = pool_0(x)
        return t1
