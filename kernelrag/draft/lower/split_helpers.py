"""The emitted helpers that put an fp32 product on the tensor cores at fp32 accuracy.

Text spliced into the GEMM and conv templates' modules (``gemm.render_gemm``,
``conv.render_conv``), each a ``@triton.jit`` function or a host function as the module
will define it:

- ``TF32X3_SPLIT``: ``rna_tf32`` (round to TF32 on the bits), the 3xTF32 K steps
  (``tf32x3_split_dot`` with A split in registers, ``tf32x3_parts_dot`` with both operands
  given as parts, the conv template's ``tf32x3_split_step`` and ``tf32x3_small_sum``), and the
  split pass before the kernel: ``tf32_split_kernel`` and its host function ``tf32_parts``
  (its parts allocated K-major with ``empty_strided``, no views; its launch made at once or
  queued on the caller's ``pending`` list);
- ``TF32_SPLIT_PAIR`` (the GEMM template's, after ``TF32X3_SPLIT``): ``tf32_parts_pair``, the
  split of A and B in one launch;
- ``BF16X6_DOT``: six bf16 products of exact three-part splits, Kahan-summed across K;
- ``TRANSPOSE_KERNEL``: ``k_major``, the one-pass transpose that makes an operand K-major,
  as Hopper's TF32 MMA reads it.
"""
from __future__ import annotations

BF16X6_DOT = '''@triton.jit
def bf16x6_dot(a, b, acc, comp):
    """(acc, comp) after adding a @ b (fp32 tiles) at about fp32 accuracy on the bf16 tensor cores.

    Each operand splits exactly into three bf16 parts, x = hi + mid + lo (8 + 8 + 8 significant
    bits: all 24 of fp32; 3xTF32's two TF32 parts hold 22), and the six products down to 2^-16
    of hi * hi are summed smallest first into a fresh partial; what is dropped is ~2^-24 of it,
    fp32's own rounding. Six bf16 MMAs cost what three TF32 ones do (twice the rate). The
    partial joins acc by Kahan summation: comp keeps the low bits each add to the large running
    sum rounds away, so the error does not grow with the K / BLOCK_K steps. That error matters
    when the epilogue shrinks the output far below the product's magnitude (a clamp of large
    values keeps only the near-zero ones, where the product's absolute error is all there is)."""
    a_hi = a.to(tl.bfloat16)
    a_rest = a - a_hi.to(tl.float32)
    a_mid = a_rest.to(tl.bfloat16)
    a_lo = (a_rest - a_mid.to(tl.float32)).to(tl.bfloat16)
    b_hi = b.to(tl.bfloat16)
    b_rest = b - b_hi.to(tl.float32)
    b_mid = b_rest.to(tl.bfloat16)
    b_lo = (b_rest - b_mid.to(tl.float32)).to(tl.bfloat16)
    small = tl.dot(a_mid, b_mid)
    small = tl.dot(a_lo, b_hi, small)
    small = tl.dot(a_hi, b_lo, small)
    small = tl.dot(a_mid, b_hi, small)
    small = tl.dot(a_hi, b_mid, small)
    small = tl.where(small == small, small, 0.0)  # inf * 0 in a part product: hi * hi alone carries an inf
    part = tl.dot(a_hi, b_hi, small)
    y = part - comp
    total = acc + y
    comp = tl.where(total - total == 0.0, (total - acc) - y, 0.0)  # an inf sum owes nothing (inf - inf is NaN)
    return total, comp
'''

TF32X3_SPLIT = '''@triton.jit
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
'''

TF32_SPLIT_PAIR = '''@triton.jit
def tf32_split_flat(x_ptr, hi_ptr, lo_ptr, R, C, s_xg, s_xr, s_xc, t, BLOCK: tl.constexpr):
    """tf32_split_tile of the t-th BLOCK x BLOCK tile of x [G, R, C], tiles counted matrix by
    matrix, row-major within one."""
    cols = tl.cdiv(C, BLOCK)
    per = tl.cdiv(R, BLOCK) * cols
    tf32_split_tile(x_ptr, hi_ptr, lo_ptr, R, C, s_xg, s_xr, s_xc, t // per, t % per // cols, t % cols, BLOCK)


@triton.jit
def tf32_split_pair_kernel(
    x_ptr, xhi_ptr, xlo_ptr, GX, RX, CX, s_xg, s_xr, s_xc,  # the first tensor, as tf32_split_kernel's
    y_ptr, yhi_ptr, ylo_ptr, RY, CY, s_yg, s_yr, s_yc,  # the second (its matrix count is the grid's rest)
    BLOCK: tl.constexpr,  # a BLOCK x BLOCK tile per program
):
    """tf32_split_kernel over two tensors in one launch (a launch costs the host tens of
    microseconds): the first programs take x's tiles, the rest y's."""
    pid = tl.program_id(0)
    x_tiles = GX * tl.cdiv(RX, BLOCK) * tl.cdiv(CX, BLOCK)
    if pid < x_tiles:
        tf32_split_flat(x_ptr, xhi_ptr, xlo_ptr, RX, CX, s_xg, s_xr, s_xc, pid, BLOCK)
    else:
        tf32_split_flat(y_ptr, yhi_ptr, ylo_ptr, RY, CY, s_yg, s_yr, s_yc, pid - x_tiles, BLOCK)


def tf32_parts_pair(x, y, pending=None):
    """(tf32_parts(x), tf32_parts(y)) in one launch (queued on ``pending`` where one is given)."""
    x3, xhi, xlo = _split_buffers(x)
    y3, yhi, ylo = _split_buffers(y)
    (GX, RX, CX), (GY, RY, CY) = x3.shape, y3.shape
    tiles = GX * _cdiv(RX, 32) * _cdiv(CX, 32) + GY * _cdiv(RY, 32) * _cdiv(CY, 32)
    _launch(pending, tf32_split_pair_kernel, (tiles,),
            (x3, xhi, xlo, GX, RX, CX, *x3.stride(), y3, yhi, ylo, RY, CY, *y3.stride()), BLOCK=32)
    return (xhi, xlo), (yhi, ylo)
'''

TRANSPOSE_KERNEL = '''@triton.jit
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
'''
