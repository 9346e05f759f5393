"""Template skill: conv (direct). Depthwise 3x3 convolution with bias and ReLU6.

Technique: with one input channel per group the GEMM of each group is one output
channel wide, and an implicit GEMM would pad every tl.dot to 16 columns and 16 K lanes:
16x to 30x the useful work. The direct variant drops tl.dot. Each program owns a tile
of BLOCK_C output channels x BLOCK_P output positions of one image, with positions
flattened and the innermost spatial dim fastest, so each tile row is a contiguous run
of the output and of the input row it reads. It accumulates the 9 taps (unrolled) as
fp32 multiply-adds, acc += w[co, tap] * x[n, co, o * S - P + tap * DL], with one weight
value per channel. Every tap's load is a shifted window of the same input rows, so
after the first tap the input comes from L1/L2. The default picks this variant when the
group's GEMM is narrower than one tensor-core step.

Bytes and FLOPs: 4 x 64 x 32 x 32 = 262,144 outputs. Each takes 9 multiply-adds,
2 * 262,144 * 9 = 4.7 MFLOP. The input and output are moved once each, (262,144 * 2 +
64 * 10) * 4 = 2.1 MB. About 2 FLOP/B: memory-bound, which is why CUDA-core FMAs lose
nothing here. On the H200 the depthwise suite convolutions ran 1.85-4.7x torch.compile
(bench/results/h200-2026-12-02-s5.json).

Fusion points: as the other conv variants. The epilogue (the bias, the ReLU6 clamp,
residuals, per-channel scales) is applied to the fp32 accumulator before the one store.
A norm over the output starts the next region.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 4
channels = 64
height = 32
width = 32


def _cdiv(a, b):
    """ceil(a / b) for ints: triton.cdiv without its constexpr wrapper."""
    return -(-a // b)


def _pow2(n):
    """The least power of two >= n (0 for 0): triton.next_power_of_2 without its wrapper."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


# DIRECT_TILES: (cuda, min M, min N, min K, min programs, (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages));
# the first row that fits is taken (kernelrag.draft.lower.tiles)
DIRECT_TILES = (
    (True, 2048, 0, 0, 0, (2, 1024, 0, 4, 1)),
    (True, 256, 0, 0, 0, (8, 256, 0, 4, 1)),
    (True, 0, 0, 0, 0, (32, 64, 0, 4, 1)),
    (False, 0, 0, 0, 0, (16, 256, 0, 4, 1)),
)


def pick_tile(rules, cuda, M, N, K, programs):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): the first rule whose minimums
    hold; ``programs(BM, BN)`` counts the programs a tile would launch."""
    for on_cuda, min_m, min_n, min_k, min_programs, tile in rules:
        if on_cuda == cuda and M >= min_m and N >= min_n and K >= min_k \
                and (min_programs == 0 or programs(tile[0], tile[1]) >= min_programs):
            return tile
    raise ValueError(f"no tile rule for M={M}, N={N}, K={K} (cuda={cuda}): the table needs a catch-all row")


@triton.jit
def conv_0_conv_direct_kernel(
    x_ptr,  # input [N, C_in, L0, L1] through its strides
    w_ptr,  # weight [C_out, Cg, *KS], contiguous
    y_ptr,  # output [N, C_out, O0, O1], contiguous
    e0_ptr,  # extra epilogue tensor 0, broadcast to the output through its strides
    C_out, Fg, Cg, P_total,  # output channels, per group; input channels per group; positions
    L0, L1, O0, O1, CR0, CR1,  # input sizes, output sizes (after a crop), crop starts
    s_xn, s_xc, s_x0, s_x1,  # element strides of the input
    s_e0_0, s_e0_1, s_e0_2, s_e0_3,  # element strides of e0
    E0_CH: tl.constexpr,  # e0 varies along channels only: one vector load
    KS0: tl.constexpr, S0: tl.constexpr, P0: tl.constexpr, DL0: tl.constexpr,  # taps, stride, padding, dilation of dim 0
    KS1: tl.constexpr, S1: tl.constexpr, P1: tl.constexpr, DL1: tl.constexpr,  # taps, stride, padding, dilation of dim 1
    BLOCK_C: tl.constexpr,  # output channels per program
    BLOCK_P: tl.constexpr,  # output positions per program (a run of the flattened output)
):
    pid = tl.program_id(0)  # position blocks fastest: neighbours share input rows and weights
    num_p = tl.cdiv(P_total, BLOCK_P)
    num_c = tl.cdiv(C_out, BLOCK_C)
    offs_p = (pid % num_p) * BLOCK_P + tl.arange(0, BLOCK_P)
    co = ((pid // num_p) % num_c) * BLOCK_C + tl.arange(0, BLOCK_C)
    n = pid // (num_p * num_c)
    p_ok = offs_p < P_total
    c_ok = co < C_out
    r = offs_p
    o1 = r % O1
    r = r // O1
    o0 = r  # (past P_total only where masked)
    g = co // Fg  # each output channel's group
    x_n = x_ptr + n.to(tl.int64) * s_xn
    acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)
    for c in range(0, Cg):
        ci = g * Cg + c  # the input channel, per output channel
        x_c = x_n + ci.to(tl.int64)[:, None] * s_xc
        w_c = w_ptr + (co.to(tl.int64) * Cg + c) * (KS0 * KS1)
        for t0 in tl.static_range(KS0):
            i0 = (o0 + CR0) * S0 - P0 + t0 * DL0
            ok0 = p_ok & (i0 >= 0) & (i0 < L0)
            for t1 in tl.static_range(KS1):
                i1 = (o1 + CR1) * S1 - P1 + t1 * DL1
                ok1 = ok0 & (i1 >= 0) & (i1 < L1)
                wv = tl.load(w_c + (t0) * KS1 + t1, mask=c_ok, other=0.0).to(tl.float32)  # one weight per channel
                xv = tl.load(x_c + (i0.to(tl.int64) * s_x0 + i1.to(tl.int64) * s_x1)[None, :], mask=c_ok[:, None] & ok1[None, :], other=0.0)
                acc += wv[:, None] * xv.to(tl.float32)
    out_ok = c_ok[:, None] & p_ok[None, :]
    if E0_CH:
        e0 = tl.load(e0_ptr + n.to(tl.int64) * s_e0_0 + co.to(tl.int64) * s_e0_1, mask=c_ok, other=0.0).to(tl.float32)[:, None]
    else:
        e0 = tl.load(e0_ptr + n.to(tl.int64) * s_e0_0 + co[:, None].to(tl.int64) * s_e0_1 + o0[None, :].to(tl.int64) * s_e0_2 + o1[None, :].to(tl.int64) * s_e0_3, mask=out_ok, other=0.0).to(tl.float32)
    v5 = (acc + e0)
    v6 = tl.minimum(tl.maximum(v5, 0.0), 6.0)
    acc = v6
    # the output is allocated contiguous: the flattened position is its offset in a plane
    y_off = (n.to(tl.int64) * C_out + co[:, None]) * P_total + offs_p[None, :]
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=out_ok)


def conv_0_conv(x, w, e0, precision=None):
    """Convolution of x [N, C_in, L0, L1] computed directly (few channels per group), epilogue fused; precision is unused (no tl.dot)."""
    D = 2
    if x.ndim != D + 2 or w.ndim != D + 2:
        raise ValueError(f"conv_0_conv: need x [N, C, L0, L1] and a {D + 2}-D weight, got {tuple(x.shape)}, {tuple(w.shape)}")
    if x.dtype != w.dtype:
        raise TypeError(f"conv_0_conv: input is {x.dtype} but weight is {w.dtype}")
    Nb, C_in = x.shape[0], x.shape[1]
    G = C_in // w.shape[1]  # the weight [C_out, C_in / groups, *KS] gives the group count
    L = list(x.shape[2:])
    KS, S, P, DL, OP = (3, 3), (1, 1), (1, 1), (1, 1), (0, 0)
    Cg, Fg = w.shape[1], w.shape[0] // G
    O = [(L[d] + 2 * P[d] - DL[d] * (KS[d] - 1) - 1) // S[d] + 1 for d in range(D)]
    if C_in != Cg * G or min(O) <= 0:
        raise ValueError(f"conv_0_conv: input {tuple(x.shape)} does not fit weight {tuple(w.shape)} with groups={G} (output sizes {O})")
    CR = [0] * D
    CROP = ()  # the slice taken of the output, folded in: kept outputs only
    if CROP:
        kept = [range(O[d])[slice(*CROP[d])] for d in range(D)]
        if any(r.step != 1 or len(r) == 0 for r in kept):
            raise ValueError(f"conv_0_conv: the slice {CROP} of outputs {O} is empty or strided")
        CR, O = [r.start for r in kept], [len(r) for r in kept]
    w = w.contiguous()  # a view for an nn.Conv weight
    C_out = Fg * G
    y = torch.empty((Nb, C_out, *O), device=x.device, dtype=x.dtype)
    extras = [e.expand(y.shape) for e in (e0, )]
    e_st = [s for e in extras for s in e.stride()]
    e_ch = {f"E{i}_CH": all(e.stride(d) == 0 for d in range(2, D + 2)) for i, e in enumerate(extras)}
    P_total = 1
    for o in O:
        P_total *= o
    BC, BP, _, warps, _ = pick_tile(DIRECT_TILES, x.is_cuda, P_total, C_out, Cg, lambda bc, bp: 0)
    BP = min(BP, _pow2(P_total))
    BC = min(BC, _pow2(C_out))
    grid = (_cdiv(P_total, BP) * _cdiv(C_out, BC) * Nb,)
    conv_0_conv_direct_kernel[grid](
        x, w, y, extras[0], C_out, Fg, Cg, P_total, *L, *O, *CR, *x.stride(), *e_st,
        KS0=3, S0=1, P0=1, DL0=1, KS1=3, S1=1, P1=1, DL1=1, BLOCK_C=BC, BLOCK_P=BP, num_warps=warps, **e_ch)
    return y


def conv_0(x0, x1, x2):
    """conv2d > conv_bias > relu6 (conv template, direct)"""
    return (conv_0_conv(x0, x1, x2),)


class ModelNew(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x):
        t3 = self.conv.bias.view(-1, 1, 1)   # a view: free
        t6, = conv_0(x, self.conv.weight, t3)
        return t6
