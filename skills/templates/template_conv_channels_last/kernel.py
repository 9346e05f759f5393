"""Template skill: conv (channels_last). 3x3 convolution with bias and ReLU, on channels-last tiles.

Technique: the same implicit GEMM as template_conv_implicit_gemm, with K ordered as
(tap, channel), channels fastest. The NCHW gather reads the A tile M-major, while
Hopper's TF32 MMA wants both operands K-major. Here the launcher makes the input
channels-last once per call (one read and one write of it), so each row of the A tile
is BLOCK_K neighbouring channels of one input position: one contiguous run, handed to
tl.dot K-major. The weight is permuted to [G, Fg, *KS, Cg] to match, which copies the
weight only.

Bytes and FLOPs: as the NCHW variant, 37.7 MFLOP and 0.80 MB at the reference size,
plus one read and one write of the input for the layout change (0.5 MB here). On the
H200 this variant ran 1.40-2.05x faster than the NCHW implicit GEMM on five suite
convolutions (bench/results/conv-variants-h200-2026-12-02.json), which is why the
graph's evidence ranks it first for those patterns.

Fusion points: identical to the NCHW variant. The epilogue is applied to the fp32
accumulator of a finished tile before the store, including per-channel values
computed from parameters only. Which layout a task gets is not fixed here: the graph
ranks the two from timed evidence per pattern, and a generate run races both.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 4
in_channels = 16
out_channels = 32
height = 32
width = 32


def _contiguous(shape):
    """The strides of a contiguous tensor of ``shape`` (torch.empty(shape).stride() without the tensor)."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def _launch(pending, kernel, grid, args, **meta):
    """kernel[grid](*args, **meta) now, or queued on ``pending`` (a list) for the caller to launch
    later, back to back with its own kernels: nothing between them then waits on the host."""
    if pending is None:
        kernel[grid](*args, **meta)
    else:
        pending.append((kernel, grid, args, meta))


def _cdiv(a, b):
    """ceil(a / b) for ints: triton.cdiv without its constexpr wrapper."""
    return -(-a // b)


def _pow2(n):
    """The least power of two >= n (0 for 0): triton.next_power_of_2 without its wrapper."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


# CONV_TILES: (cuda, min M, min N, min K, min programs, (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages));
# the first row that fits is taken (kernelrag.draft.lower.tiles)
CONV_TILES = (
    (True, 16384, 128, 128, 0, (128, 128, 32, 8, 4)),
    (True, 16384, 64, 0, 0, (128, 64, 32, 4, 4)),
    (True, 16384, 0, 0, 0, (128, 32, 32, 4, 3)),
    (True, 2048, 0, 0, 0, (64, 64, 32, 4, 3)),
    (True, 0, 0, 0, 0, (32, 32, 32, 4, 2)),
    (False, 0, 0, 0, 0, (256, 64, 64, 4, 1)),
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
def rna_tf32(x):
    """x rounded to TF32 (10 explicit mantissa bits), to nearest, ties away from zero, on the bits:
    add half of the 13 dropped bits, clear them. Inf and NaN pass through unchanged."""
    bits = x.to(tl.uint32, bitcast=True)
    rounded = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return tl.where((bits & 0x7F800000) == 0x7F800000, x, rounded)


@triton.jit
def tf32x3_split_dot(a, b_hi, b_lo, acc, MASK_NAN: tl.constexpr):
    """acc + a @ b at about fp32 accuracy on the TF32 tensor cores, B given as its TF32 parts.

    b = b_hi + b_lo to 2^-22 was split once, before the kernel (tf32_parts), so b's parts come
    from shared memory as loaded; tl.dot's own "tf32x3" splits both tiles every K step and sends
    B's parts back through shared memory. a splits here, in registers. The step's three
    products, the small ones first, are summed in a fresh tile and then added to acc in fp32: a
    tensor-core accumulator running over all of K lost about 5e-5 relative at K = 8192 (H100,
    2026-12-06, bench/tf32_split.py). MASK_NAN zeroes a non-finite sum of the small products,
    which only an inf input makes, where a @ b is inf or NaN and a_hi * b_hi carries it: an inf
    meeting a zero part (0 * inf = NaN), or b = inf meeting a_lo, whose sign is a_hi's in half
    the cases only (-inf + inf = NaN). Unmasked (the kernel's fast loop), such a NaN reaches the
    output; the kernel then redoes that tile masked."""
    a_hi = rna_tf32(a)
    return tf32x3_parts_dot(a_hi, a - a_hi, b_hi, b_lo, acc, MASK_NAN)


@triton.jit
def tf32x3_parts_dot(a_hi, a_lo, b_hi, b_lo, acc, MASK_NAN: tl.constexpr):
    """acc + a @ b from both operands' TF32 parts, the step of tf32x3_split_dot: where A was split
    before the kernel too (SPLIT_A), the K loop only loads and multiplies."""
    step = tl.dot(a_lo, b_hi, tl.zeros_like(acc), input_precision="tf32")
    step = tl.dot(a_hi, b_lo, step, input_precision="tf32")
    if MASK_NAN:  # a non-finite small product (an inf input: 0 * inf, or a_lo * inf of the other sign
        step = tl.where(step - step == 0.0, step, 0.0)  # than a_hi * inf): hi * hi alone carries the inf
    return acc + tl.dot(a_hi, b_hi, step, input_precision="tf32")


@triton.jit
def tf32x3_split_step(a, b_hi, b_lo, acc, small):
    """One K step of a @ b at about fp32 accuracy, B given as its TF32 parts: (acc + a_hi @ b_hi,
    small + a_lo @ b_hi + a_hi @ b_lo); the conv template's weight split (``split_b``, on CUDA the
    default for 2-D convolutions).

    The large product goes into a fresh tile added to acc in fp32, as in tf32x3_split_dot. The
    small products, ~2^-11 of it, run in a tensor-core accumulator of their own over all of K,
    loop-carried, so the compiler keeps them asynchronous: two wgmma waits a K step on sm_90
    against tf32x3_split_dot's three, for a third accumulator's registers (255 at 128 x 128 x 32
    on 8 warps, a 40-byte spill: hence not the GEMM template's step). tf32x3_small_sum says
    what an inf input does to small."""
    a_hi = rna_tf32(a)
    # acc - (-a_hi) @ b_hi, not acc + a_hi @ b_hi: Triton's combiner rewrites an fp32 add of a dot
    # started from zero into that dot accumulating in acc, on the tensor cores over all of K
    # (sm_90 PTX: no fp32 add in the loop); it has no such rule for a subtraction
    acc -= tl.dot(-a_hi, b_hi, tl.zeros_like(acc), input_precision="tf32")
    small = tl.dot(a - a_hi, b_hi, small, input_precision="tf32")
    return acc, tl.dot(a_hi, b_lo, small, input_precision="tf32")


@triton.jit
def tf32x3_small_sum(small):
    """The small products' sum to add to the large ones', its non-finite entries zeroed. Only an
    inf input makes one, where a @ b is inf or NaN and the large products carry it: an inf
    meeting a zero part (0 * inf = NaN), or b = inf meeting a_lo, whose sign is a_hi's in half
    the cases only (-inf + inf = NaN)."""
    return tl.where(small - small == 0.0, small, 0.0)


@triton.jit
def tf32_split_tile(x_ptr, hi_ptr, lo_ptr, R, C, s_xg, s_xr, s_xc, g, tile_r, tile_c, BLOCK: tl.constexpr):
    """The TF32 parts of one BLOCK x BLOCK tile of matrix g of x [G, R, C] (read through its
    strides), stored swapped into hi and lo [G, C, R], contiguous."""
    rows = tile_r * BLOCK + tl.arange(0, BLOCK)
    cols = tile_c * BLOCK + tl.arange(0, BLOCK)
    ok = (rows < R)[:, None] & (cols < C)[None, :]
    x = tl.load(x_ptr + g.to(tl.int64) * s_xg + rows[:, None] * s_xr + cols[None, :] * s_xc, mask=ok, other=0.0)
    hi = rna_tf32(x)
    lo = rna_tf32(tl.where(hi == x, 0.0, x - hi))  # 0 where x is exact in TF32, or inf / NaN
    # 4 bytes read and 8 written per element; the swapped tiles are stored along their contiguous axis
    out = g.to(tl.int64) * R * C + cols[:, None] * R + rows[None, :]
    ok_t = (cols < C)[:, None] & (rows < R)[None, :]
    tl.store(hi_ptr + out, tl.trans(hi), mask=ok_t)
    tl.store(lo_ptr + out, tl.trans(lo), mask=ok_t)


@triton.jit
def tf32_split_kernel(
    x_ptr,  # B [G, K, N] through its strides
    hi_ptr, lo_ptr,  # its TF32 parts [G, N, K], contiguous (K-major, as Hopper's TF32 MMA reads them)
    R, C,  # K and N of one matrix
    s_xg, s_xr, s_xc,  # element strides of B
    BLOCK: tl.constexpr,  # a BLOCK x BLOCK tile per program
):
    tf32_split_tile(x_ptr, hi_ptr, lo_ptr, R, C, s_xg, s_xr, s_xc,
                    tl.program_id(2), tl.program_id(0), tl.program_id(1), BLOCK)


def _split_buffers(t):
    """t [..., R, C] as [G, R, C] and two empty fp32 tensors of t's shape for its parts, K-major:
    their storage is [G, C, R], contiguous, as tf32_split_kernel writes it."""
    R, C = t.shape[-2], t.shape[-1]
    t3 = t if t.ndim == 3 else t.reshape(-1, R, C)
    hi = torch.empty_strided(t.shape, (*_contiguous(t.shape[:-2] + (C, R))[:-2], 1, R),
                             device=t.device, dtype=torch.float32)
    return t3, hi, torch.empty_like(hi)


def tf32_parts(t, pending=None):
    """(hi, lo), B = hi + lo to 2^-22 with each part exact in TF32, shaped as t [..., K, N] and
    K-major (storage [..., N, K]); one pass, 12 bytes moved per element. With a list ``pending``
    the pass is queued there for the caller to launch (``_launch``), not launched."""
    t3, hi, lo = _split_buffers(t)
    G, R, C = t3.shape
    _launch(pending, tf32_split_kernel, (_cdiv(R, 32), _cdiv(C, 32), G), (t3, hi, lo, R, C, *t3.stride()),
            BLOCK=32)
    return hi, lo


@triton.jit
def transpose_kernel(
    x_ptr,  # input [G, R, C] through its strides
    y_ptr,  # output [G, C, R], contiguous: the input's rows become columns
    R, C,  # rows and columns of one input matrix
    s_xg, s_xr, s_xc,  # element strides of the input
    BLOCK: tl.constexpr,  # a BLOCK x BLOCK tile per program
):
    g = tl.program_id(2)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = (rows < R)[:, None] & (cols < C)[None, :]
    tile = tl.load(x_ptr + g.to(tl.int64) * s_xg + rows[:, None] * s_xr + cols[None, :] * s_xc, mask=ok)
    # one read and one write per element; the swapped tile is stored along its contiguous axis
    ok_t = (cols < C)[:, None] & (rows < R)[None, :]
    tl.store(y_ptr + g.to(tl.int64) * R * C + cols[:, None] * R + rows[None, :], tl.trans(tile), mask=ok_t)


def k_major(t, rows_are_k):
    """t [..., R, C] with unit stride along K (dim -2 when rows_are_k, else dim -1),
    transposing in one pass when it is not: Hopper's TF32 MMA reads K-major tiles."""
    k_dim = -2 if rows_are_k else -1
    if t.stride(k_dim) == 1 or t.shape[k_dim] == 1:
        return t
    lead = t.shape[:-2]
    t3 = t.reshape(-1, t.shape[-2], t.shape[-1])
    G, R, C = t3.shape
    y = torch.empty((G, C, R), device=t.device, dtype=t.dtype)
    grid = (_cdiv(R, 32), _cdiv(C, 32), G)
    transpose_kernel[grid](t3, y, R, C, t3.stride(0), t3.stride(1), t3.stride(2), BLOCK=32)
    return y.reshape(*lead, C, R).transpose(-1, -2)


@triton.jit
def conv_0_conv_kernel(
    x_ptr,  # input [N, C_in, L0, L1] through its strides
    w_ptr,  # weight [groups, Fg, K], contiguous (K-major); its TF32 part when SPLIT_B
    wlo_ptr,  # SPLIT_B: the weight's TF32 remainder, laid out as the weight (otherwise not read)
    y_ptr,  # output [N, C_out, O0, O1] through its strides
    e0_ptr,  # extra epilogue tensor 0, broadcast to the output through its strides
    NB, M, G, Fg, K, Cg,  # batch; GEMM rows, groups, output channels per group, GEMM depth, input channels per group
    L0, L1, O0, O1, CR0, CR1,  # input sizes, output sizes (after a crop), crop starts
    s_xn, s_xc, s_x0, s_x1,  # element strides of the input
    s_yn, s_yc, s_y0, s_y1,  # element strides of the output
    s_e0_0, s_e0_1, s_e0_2, s_e0_3,  # element strides of e0
    E0_CH: tl.constexpr,  # e0 varies along channels only: one vector load
    KS0: tl.constexpr, S0: tl.constexpr, P0: tl.constexpr, DL0: tl.constexpr,  # taps, stride, padding, dilation of dim 0
    KS1: tl.constexpr, S1: tl.constexpr, P1: tl.constexpr, DL1: tl.constexpr,  # taps, stride, padding, dilation of dim 1
    BLOCK_M: tl.constexpr,  # output positions per program
    BLOCK_N: tl.constexpr,  # output channels per program
    BLOCK_K: tl.constexpr,  # (channel, tap) pairs per K step
    PRECISION: tl.constexpr,  # tl.dot input_precision: "ieee" (CPU), "tf32x3" (3xTF32 on CUDA)
    SPLIT_B: tl.constexpr,  # 3xTF32 with the weight split into TF32 parts before the kernel
):
    pid = tl.program_id(0)
    g = tl.program_id(1)  # the group: its own slice of input and output channels
    Mp = M
    w_g = g.to(tl.int64) * Fg * K  # this group's weight
    num_pid_n = tl.cdiv(Fg, BLOCK_N)
    offs_m = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < Mp
    n_ok = offs_n < Fg
    # row m -> (n, output position), innermost spatial dim fastest (the output's layout)
    r = offs_m
    j1 = r % O1
    r = r // O1
    j0 = r % O0
    r = r // O0
    n_idx = r
    o0 = j0
    o1 = j1
    x_rows = x_ptr + n_idx.to(tl.int64) * s_xn + (g * Cg).to(tl.int64) * s_xc
    w_cols = w_ptr + w_g + offs_n[None, :].to(tl.int64) * K
    wlo_cols = wlo_ptr + w_g + offs_n[None, :].to(tl.int64) * K  # SPLIT_B: the remainder
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # SPLIT_B: the small products' sum
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        # column k -> (kernel tap, input channel c), channels innermost (the channels-last input)
        c_idx = ks % Cg
        t = ks // Cg
        t1 = t % KS1
        t = t // KS1
        t0 = t % KS0
        t = t // KS0
        # A [BLOCK_M, BLOCK_K]: channels along the fast axis, contiguous in memory
        ok = m_ok[:, None] & k_ok[None, :]
        i0 = (o0[:, None] + CR0) * S0 - P0 + t0[None, :] * DL0
        ok = ok & (i0 >= 0) & (i0 < L0)
        i1 = (o1[:, None] + CR1) * S1 - P1 + t1[None, :] * DL1
        ok = ok & (i1 >= 0) & (i1 < L1)
        a = tl.load(x_rows[:, None] + c_idx[None, :].to(tl.int64) * s_xc + i0.to(tl.int64) * s_x0 + i1.to(tl.int64) * s_x1, mask=ok, other=0.0)
        b = tl.load(w_cols + ks[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if SPLIT_B:  # b holds the weight's TF32 part: its remainder is loaded beside it, A splits here
            b_lo = tl.load(wlo_cols + ks[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc, small = tf32x3_split_step(a, b, b_lo, acc, small)
        else:
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if SPLIT_B:
        acc += tf32x3_small_sum(small)

    out_ok = m_ok[:, None] & n_ok[None, :]
    co = g * Fg + offs_n  # absolute output channel
    y_off = n_idx[:, None].to(tl.int64) * s_yn + co[None, :].to(tl.int64) * s_yc + o0[:, None].to(tl.int64) * s_y0 + o1[:, None].to(tl.int64) * s_y1
    if E0_CH:
        e0 = tl.load(e0_ptr + co.to(tl.int64) * s_e0_1, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    else:
        e0 = tl.load(e0_ptr + n_idx[:, None].to(tl.int64) * s_e0_0 + co[None, :].to(tl.int64) * s_e0_1 + o0[:, None].to(tl.int64) * s_e0_2 + o1[:, None].to(tl.int64) * s_e0_3, mask=out_ok, other=0.0).to(tl.float32)
    v5 = (acc + e0)
    v6 = tl.maximum(v5, 0.0)
    acc = v6
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=out_ok)


def conv_0_conv(x, w, e0, precision=None, split_b=None):
    """Convolution of x [N, C_in, L0, L1] with weight [C_out, C_in / groups, *KS], epilogue fused."""
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
    PH = 1
    # [C_out, Cg, *KS] -> [G, Fg, *KS, Cg]: K = (taps, channels), channels fastest (the weight only)
    wg = w.reshape(G, Fg, Cg, -1).permute(0, 1, 3, 2).contiguous().reshape(G, Fg, -1)
    # the input channels-last, in one pass unless it is already: channels contiguous
    x = k_major(x.reshape(Nb, C_in, -1), rows_are_k=True).reshape(x.shape)
    K = wg.shape[2]
    M = Nb
    for o in O:
        M *= o
    y = torch.empty((Nb, Fg * G, *O), device=x.device, dtype=x.dtype)
    extras = [e.expand(y.shape) for e in (e0, )]
    e_st = [s for e in extras for s in e.stride()]
    e_ch = {f"E{i}_CH": all(e.stride(d) == 0 for d in [0] + list(range(2, D + 2))) for i, e in enumerate(extras)}
    if precision is None:
        precision = ("tf32x3" if x.is_cuda else "ieee") if x.dtype == torch.float32 else "tf32"
    # split_b: 3xTF32 with the weight split into TF32 parts once, in one pass, A in the K loop; the
    # CUDA default for 2-D convolutions (H100, 2026-12-07, bench/conv_variants.py: 3-14% faster
    # in all 10 2-D drafts; 5-25% slower in the 3-D and transposed ones, which keep the in-loop split)
    if split_b is None:
        split_b = x.is_cuda and True
    split_b = bool(split_b) and precision == "tf32x3"
    wlo = wg
    if split_b:   # tf32_parts takes [..., K, N], returns K-major views: the weight stays [..., Fg, K]
        wg, wlo = (t.transpose(-1, -2) for t in tf32_parts(wg.transpose(-1, -2)))
    BM, BN, BK, warps, stages = pick_tile(CONV_TILES, x.is_cuda, M, Fg, K,
                                          lambda bm, bn: G * PH * _cdiv(M, bm) * _cdiv(Fg, bn))
    BN = min(BN, max(16, _pow2(Fg)))
    BK = min(BK, max(16, _pow2(K)))
    grid = (_cdiv(M, BM) * _cdiv(Fg, BN), G * PH)
    conv_0_conv_kernel[grid](
        x, wg, wlo, y, extras[0], Nb, M, G, Fg, K, Cg, *L, *O, *CR, *x.stride(), *y.stride(), *e_st,
        KS0=3, S0=1, P0=1, DL0=1, KS1=3, S1=1, P1=1, DL1=1,
        BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, PRECISION=precision, SPLIT_B=split_b, num_warps=warps,
        num_stages=stages, **e_ch)
    return y


def conv_0(x0, x1, x2):
    """conv2d > conv_bias > relu (conv template, channels_last)"""
    return (conv_0_conv(x0, x1, x2),)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x):
        t3 = self.conv.bias.view(-1, 1, 1)   # a view: free
        t6, = conv_0(x, self.conv.weight, t3)
        return t6
