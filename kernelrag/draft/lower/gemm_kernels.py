"""Kernel text of the GEMM / BMM template (the launcher is in ``gemm.py``).

Three kernels, rendered from one ``GemmSpec``; the launcher picks which run for the
shapes it sees:

* ``<name>_kernel``: the tiled product. One program owns a BLOCK_M x BLOCK_N output
  tile of one batch entry (grid axis 1 walks two batch dims, B0 x B1, so 3-D and
  4-D products and broadcast operands with stride 0 need no copy) and one K chunk
  (axis 2, split-K). It reads (BLOCK_M + BLOCK_N) * BLOCK_K elements per step for
  2 * BLOCK_M * BLOCK_N * BLOCK_K flops and keeps an fp32 accumulator in registers.
  With one K chunk the epilogue (and a row reduction when N fits the tile) runs on
  the accumulator and the output is written once: M * N * 4 bytes, where an
  unfused chain of c ops would read and write it c more times.
* ``<name>_gemv_kernel``: the matrix-vector form (N == 1). A dot with a 16-wide N
  would waste 15/16 of its work on a memory-bound op, so each program multiplies a
  BLOCK_M x BLOCK_K tile of A by the vector elementwise and keeps BLOCK_K separate
  fp32 partial sums per row; the final tl.sum adds them pairwise. Reading A once
  (M * K * 4 bytes) is the whole cost.
* ``<name>_tma_kernel`` (16-bit operands on CUDA, one product, no prologue or row
  reduction): persistent, one program per SM walking the output tiles in the same
  grouped order, its A and B tiles fetched by the TMA engine through host-built
  descriptors (the copy engine computes the addresses and zero-fills the edges, so
  the warps only issue MMAs), then the same epilogue and store. On an H200 at the
  bf16 suite's shapes it ran at 648-684 TFLOP/s, 0.94-1.02x cuBLAS, where the
  pointer-load kernel above, at its table's tile, ran at 520-618
  (bench/results/bf16-gemm-h200-2026-12-04.json).
* ``<name>_splitk_kernel``: adds the SPLIT_K partial tiles in a fixed order (the
  result is the same on every run, unlike atomics) and then runs the epilogue.
  Splitting K gives small-M*N, large-K products enough programs to fill the GPU and
  sums K in SPLIT_K shorter runs, which keeps fp32 rounding error inside an fp32
  tolerance at K in the millions.

Why the fusion points sit where they are: the prologue acts on operand tiles as
they are loaded (a transpose is only a swap of strides; a triangular operand masks
its tile and narrows the K range, skipping the zero half); the epilogue acts on the
finished accumulator, once per output element, after all K work (and after the
split-K sum, since a nonlinear op does not distribute over partial sums); a row
reduction needs whole rows, so it is fused whole only when one tile spans N (up to 1024
columns). A wider row whose chain ends in one value per row (a logsumexp, an lm head's
cross-entropy) leaves per-tile partials instead of the tile (``row_partials``, rendered by
``gemm_rows``: never split-K, and the combine kernel follows); any other wider row is
written once and reduced by the next kernel (a second pass over M * N * 4 bytes).
"""
from __future__ import annotations

from kernelrag.draft.lower.gemm_rows import store_text
from kernelrag.draft.lower.gemm_spec import (GemmSpec, chain_code, epilogue_code, extra_args, extra_strides,
                                             k_range_code, scalar_args, tri_keep)

_HEADER = '''@triton.jit
def {name}_kernel(
    a_ptr,  # A [B0, B1, M, K] read through its strides (a transpose is a stride swap; 0 = broadcast); its TF32 part when SPLIT_A
    alo_ptr,  # SPLIT_A: A's TF32 remainder, laid out as A (otherwise not read)
    b_ptr,  # B [B0, B1, K, N] read through its strides (B[k, n] at k * s_bk + n * s_bn); its TF32 part when SPLIT_B
    blo_ptr,  # SPLIT_B: B's TF32 remainder, laid out as B (otherwise not read)
    c_ptr,  # output [B0, B1, M, N] (or [B0, B1, M] for a per-row result), or the split-K partials
{extra_args}{scalar_args}    M, N, K,  # sizes of one product
    B1,  # inner batch size: grid axis 1 enumerates B0 * B1 batch entries
    s_a0, s_a1, s_am, s_ak,  # element strides of A
    s_b0, s_b1, s_bk, s_bn,  # element strides of B
    s_c0, s_c1, s_cm, s_cn,  # element strides of the output
{extra_strides}    BLOCK_M: tl.constexpr,  # rows of the output tile owned by one program
    BLOCK_N: tl.constexpr,  # columns of the output tile (all of N when the epilogue reduces rows)
    BLOCK_K: tl.constexpr,  # depth of one K step
    GROUP_M: tl.constexpr,  # tile rows per group of the L2-friendly order
    SPLIT_K: tl.constexpr,  # programs sharing one tile's K range; > 1 writes fp32 partials
    PRECISION: tl.constexpr,  # "ieee" (CPU, exact fp32), "tf32x3" (3xTF32, CUDA), "bf16x6" (bf16x6_dot, CUDA)
    SPLIT_B: tl.constexpr,  # 3xTF32 with B split into TF32 parts before the kernel (A here unless SPLIT_A)
    SPLIT_A: tl.constexpr,  # with SPLIT_B: A split before the kernel too, its parts loaded as B's are
    STORE_CACHE: tl.constexpr,  # "" or ".cs": an output far past L2, written once, streams out evict-first
):
    pid = tl.program_id(0)
    batch = tl.program_id(1)
    split = tl.program_id(2)
    b0 = batch // B1
    b1 = batch % B1
    # grouped ordering: GROUP_M consecutive programs walk down a column of tiles, so the
    # B panel they share and their A panels are still in L2 when the next one needs them
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    m_first = pid_m * BLOCK_M
    m_last = m_first + BLOCK_M - 1
    n_first = pid_n * BLOCK_N
    n_last = n_first + BLOCK_N - 1

    k_lo = 0
    k_hi = K
{k_range}    if SPLIT_K > 1:  # this program sums one BLOCK_K-aligned chunk of [k_lo, k_hi)
        k_chunk = tl.cdiv(tl.cdiv(k_hi - k_lo, SPLIT_K), BLOCK_K) * BLOCK_K
        k_lo = k_lo + split * k_chunk
        k_hi = min(k_hi, k_lo + k_chunk)
    a_offs = (b0.to(tl.int64) * s_a0 + b1.to(tl.int64) * s_a1 + offs_m[:, None].to(tl.int64) * s_am
              + (k_lo + offs_k)[None, :].to(tl.int64) * s_ak)
    b_offs = (b0.to(tl.int64) * s_b0 + b1.to(tl.int64) * s_b1 + offs_n[None, :].to(tl.int64) * s_bn
              + (k_lo + offs_k)[:, None].to(tl.int64) * s_bk)
    # 64-bit offsets once per tile; the K loop only steps the pointers (the form the compiler pipelines)
    a_ptrs = a_ptr + a_offs
    alo_ptrs = alo_ptr + a_offs  # A's remainder (SPLIT_A): laid out as A
    b_ptrs = b_ptr + b_offs
    blo_ptrs = blo_ptr + b_offs  # B's remainder (SPLIT_B): laid out as B
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    comp = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # bf16x6 only: the rounding error acc still owes
{k_loop}    if PRECISION == "bf16x6":  # comp is what the last adds rounded away, with its sign flipped
        acc = acc - comp
    if SPLIT_B:  # the fast loop leaves a small product's inf * 0 unmasked: a NaN in the tile (only where an
        # input holds an inf or a NaN) redoes the tile with the mask, so the common case pays one check
        if tl.max(tl.where(acc == acc, 0, 1)) > 0:
            a_ptrs = a_ptr + a_offs
            alo_ptrs = alo_ptr + a_offs
            b_ptrs = b_ptr + b_offs
            blo_ptrs = blo_ptr + b_offs
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
{k_loop_masked}
    out_ok = m_ok[:, None] & n_ok[None, :]
    if SPLIT_K > 1:  # partials [SPLIT_K, B0 * B1, M, N], contiguous; the epilogue runs after their sum
        ws = c_ptr + (split * tl.num_programs(1) + batch).to(tl.int64) * M * N
        tl.store(ws + offs_m[:, None] * N + offs_n[None, :], acc, mask=out_ok)
    else:
{epilogue}{store}'''

_STORE_TILE = '''{i}c = c_ptr + b0.to(tl.int64) * s_c0 + b1.to(tl.int64) * s_c1
{i}tl.store(c + offs_m[:, None] * s_cm + offs_n[None, :] * s_cn, acc.to(c_ptr.dtype.element_ty), mask=out_ok{cache})
'''

_STORE_ROW = '''{i}c = c_ptr + b0.to(tl.int64) * s_c0 + b1.to(tl.int64) * s_c1  # one value per row: [BLOCK_M, 1]
{i}tl.store(c + offs_m * s_cm, tl.reshape(acc, (BLOCK_M,)).to(c_ptr.dtype.element_ty), mask=m_ok{cache})
'''

_TMA = '''

@triton.jit
def {name}_tma_kernel(
    a_desc,  # TMA descriptor of A [M, K] (K contiguous), BLOCK_M x BLOCK_K boxes
    b_desc,  # TMA descriptor of B: [N, K] (K contiguous, nn.Linear's weight) when B_NK, else [K, N]
    c_ptr,  # output [M, N] through its strides
{extra_args}{scalar_args}    M, N, K,  # sizes of the product
    s_c0, s_c1, s_cm, s_cn,  # element strides of the output (batch strides 0: one product)
{extra_strides}    BLOCK_M: tl.constexpr,  # rows of an output tile
    BLOCK_N: tl.constexpr,  # columns of an output tile
    BLOCK_K: tl.constexpr,  # depth of one K step (one TMA box per operand)
    GROUP_M: tl.constexpr,  # tile rows per group of the L2-friendly order
    B_NK: tl.constexpr,  # B is stored [N, K]: its box is read transposed
    NUM_SMS: tl.constexpr,  # programs launched: one per SM, each walking every NUM_SMS-th tile
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    b0 = tl.program_id(0) * 0  # one product: batch entry 0 (a tensor, as the epilogue's indexing expects)
    b1 = b0
    # flatten: the compiler pipelines the K steps of consecutive tiles as one stream, so the
    # next tile's first boxes are in flight while this tile's epilogue runs
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=True):
        first_pid_m = (tile // num_pid_in_group) * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
        pid_n = (tile % num_pid_in_group) // group_size_m
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, tl.cdiv(K, BLOCK_K)):  # boxes past K arrive zero-filled
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            if B_NK:
                acc = tl.dot(a, b_desc.load([pid_n * BLOCK_N, ki * BLOCK_K]).T, acc)
            else:
                acc = tl.dot(a, b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N]), acc)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        m_ok = offs_m < M
        n_ok = offs_n < N
        out_ok = m_ok[:, None] & n_ok[None, :]
{epilogue}{store}'''

_GEMV = '''

@triton.jit
def {name}_gemv_kernel(
    a_ptr,  # A [B0, B1, M, K] through its strides
    x_ptr,  # the vector, B [B0, B1, K, 1]: element k at k * s_bk
    ws_ptr,  # fp32 partial sums [SPLIT_K, B0 * B1, M], contiguous
    M, K, B1,  # rows, length of the dot, inner batch size
    s_a0, s_a1, s_am, s_ak,  # element strides of A
    s_b0, s_b1, s_bk,  # element strides of the vector
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_K: tl.constexpr,  # vector elements per step; also the number of partial sums per row
    SPLIT_K: tl.constexpr,  # programs sharing one row block's K range
):
    pid_m = tl.program_id(0)
    batch = tl.program_id(1)
    split = tl.program_id(2)
    b0 = batch // B1
    b1 = batch % B1
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    m_first = pid_m * BLOCK_M
    m_last = m_first + BLOCK_M - 1
    n_first = 0
    n_last = 0
    k_lo = 0
    k_hi = K
{k_range}    k_chunk = tl.cdiv(tl.cdiv(k_hi - k_lo, SPLIT_K), BLOCK_K) * BLOCK_K
    k_lo = k_lo + split * k_chunk
    k_hi = min(k_hi, k_lo + k_chunk)
    a_rows = a_ptr + b0.to(tl.int64) * s_a0 + b1.to(tl.int64) * s_a1 + offs_m[:, None].to(tl.int64) * s_am
    x_base = x_ptr + b0.to(tl.int64) * s_b0 + b1.to(tl.int64) * s_b1
    a_ptrs = a_rows + (k_lo + offs_k)[None, :].to(tl.int64) * s_ak
    x_ptrs = x_base + (k_lo + offs_k)[:, None].to(tl.int64) * s_bk
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)  # BLOCK_K running sums per row
    for k0 in range(k_lo, k_hi, BLOCK_K):
        ks = k0 + offs_k
        k_ok = ks < k_hi
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(x_ptrs, mask=k_ok[:, None], other=0.0)
{prologue}        acc += a.to(tl.float32) * tl.reshape(b.to(tl.float32), (1, BLOCK_K))
        a_ptrs += BLOCK_K * s_ak
        x_ptrs += BLOCK_K * s_bk
    part = tl.sum(acc, axis=1)  # pairwise sum of the BLOCK_K partial sums
    ws = ws_ptr + (split * tl.num_programs(1) + batch).to(tl.int64) * M
    tl.store(ws + offs_m, part, mask=m_ok)
'''

_SPLITK = '''

@triton.jit
def {name}_splitk_kernel(
    ws_ptr,  # fp32 partials [SPLIT_K, B0 * B1, M, N], contiguous
    c_ptr,  # output [B0, B1, M, N] (or [B0, B1, M] for a per-row result)
{extra_args}{scalar_args}    M, N, B1, SPLIT_K,  # sizes; SPLIT_K partial tiles are added in order
    s_c0, s_c1, s_cm, s_cn,  # element strides of the output
{extra_strides}    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_N: tl.constexpr,  # columns per program (all of N when the epilogue reduces rows)
):
    pid = tl.program_id(0)
    batch = tl.program_id(1)
    b0 = batch // B1
    b1 = batch % B1
    pid_m = pid // tl.cdiv(N, BLOCK_N)
    pid_n = pid % tl.cdiv(N, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    out_ok = m_ok[:, None] & n_ok[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(0, SPLIT_K):  # a fixed order: every run adds the same numbers the same way
        ws = ws_ptr + (s * tl.num_programs(1) + batch).to(tl.int64) * M * N
        acc += tl.load(ws + offs_m[:, None] * N + offs_n[None, :], mask=out_ok, other=0.0)
{epilogue}{store}'''


def _k_loop(spec: GemmSpec, indent: str, masked: bool) -> str:
    """The tiled kernel's K loop at ``indent``. ``masked``: the SPLIT_B redo of a tile that came out
    with a NaN, its small products' NaN masked each step (the other precision paths never get there)."""
    body = indent + " " * 4
    b_lo_mask = ("" if spec.b_tri is None else
                 f"{body}b_lo = tl.where({tri_keep(spec.b_tri, 'ks', 'offs_n')}, b_lo, 0.0)\n")
    split = (f"{body}b_lo = tl.load(blo_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)\n"
             + b_lo_mask
             + f"{body}if SPLIT_A:  # a holds A's TF32 part: its remainder is loaded beside it\n"
             + f"{body}    a_lo = tl.load(alo_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)\n"
             + f"{body}    acc = tf32x3_parts_dot(a, a_lo, b, b_lo, acc, MASK_NAN={masked})\n"
             + f"{body}    alo_ptrs += BLOCK_K * s_ak\n"
             + f"{body}else:\n"
             + f"{body}    acc = tf32x3_split_dot(a, b, b_lo, acc, MASK_NAN={masked})\n"
             + f"{body}blo_ptrs += BLOCK_K * s_bk\n")
    if masked:
        multiply = split
    else:
        multiply = (f"{body}if SPLIT_B:  # b holds B's TF32 part: its remainder is loaded beside it\n"
                    + "".join(f"    {line}\n" for line in split.splitlines())
                    + f'{body}elif PRECISION == "bf16x6":\n'
                    + f"{body}    acc, comp = bf16x6_dot(a, b, acc, comp)\n"
                    + f"{body}else:\n"
                    + f"{body}    acc = tl.dot(a, b, acc, input_precision=PRECISION)\n")
    steps = "tl.range(k_lo, k_hi, BLOCK_K, num_stages=1)" if masked else "range(k_lo, k_hi, BLOCK_K)"
    return (f"{indent}for k0 in {steps}:\n"
            f"{body}ks = k0 + offs_k\n"
            f"{body}k_ok = ks < k_hi  # the K tail (and a narrowed range) loads zeros, which add nothing\n"
            f"{body}a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)\n"
            f"{body}b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)\n"
            + _prologue(spec, body) + multiply
            + f"{body}a_ptrs += BLOCK_K * s_ak\n"
            f"{body}b_ptrs += BLOCK_K * s_bk\n")


def _prologue(spec: GemmSpec, indent: str, vector: bool = False) -> str:
    """Elementwise chains on the loaded tiles, then the triangular masks of the operands."""
    code = ""
    if spec.a_prologue:
        code += f"{indent}a = a.to(tl.float32)\n" + chain_code(spec.a_prologue, "a", indent)
    if spec.b_prologue:
        code += f"{indent}b = b.to(tl.float32)\n" + chain_code(spec.b_prologue, "b", indent)
    if spec.a_tri is not None:
        code += f"{indent}a = tl.where({tri_keep(spec.a_tri, 'offs_m', 'ks')}, a, 0.0)\n"
    if spec.b_tri is not None:
        cols = "tl.zeros((1,), dtype=tl.int32)" if vector else "offs_n"
        code += f"{indent}b = tl.where({tri_keep(spec.b_tri, 'ks', cols)}, b, 0.0)\n"
    if (spec.a_prologue or spec.b_prologue) and not vector:
        code += f"{indent}a = a.to(b_ptr.dtype.element_ty)\n{indent}b = b.to(b_ptr.dtype.element_ty)\n"
    return code


def tma_eligible(spec: GemmSpec) -> bool:
    """The persistent TMA kernel takes the product as stored: no operand prologue or
    triangular structure (they act on loaded tiles or narrow K), and a tile of the fixed
    TMA box width (no row reduction across N, no output mask)."""
    return not (spec.a_prologue or spec.b_prologue or spec.a_tri or spec.b_tri or spec.out_tri
                or spec.whole_rows)


def render_kernels(spec: GemmSpec) -> str:
    """All kernel text for ``spec``: the tiled product, the split-K sum, and the
    matrix-vector kernel when the spec asks for it."""
    name = spec.name
    store = _STORE_ROW if spec.row_out else _STORE_TILE
    common = dict(name=name, extra_args=extra_args(spec.n_extra), extra_strides=extra_strides(spec.n_extra),
                  scalar_args=scalar_args(spec.n_scalar))
    tiled_store = store.format(i=" " * 8, cache=", cache_modifier=STORE_CACHE")
    tma_store = store.format(i=" " * 8, cache="")
    if spec.row_partials:     # the tile's row partials instead of the tile (gemm_rows); the launcher never splits K
        tiled_store = store_text(spec.row_partials, " " * 8, "batch.to(tl.int64) * M + ", "tl.num_programs(1) * M")
        tma_store = store_text(spec.row_partials, " " * 8, "", "M")
    text = _HEADER.format(**common, k_range=k_range_code(spec, "    "),
                          k_loop=_k_loop(spec, "    ", masked=False), k_loop_masked=_k_loop(spec, " " * 12, masked=True),
                          epilogue=epilogue_code(spec, " " * 8), store=tiled_store)
    if not spec.row_partials:
        text += _SPLITK.format(**common, epilogue=epilogue_code(spec, "    "), store=store.format(i="    ", cache=""))
    if tma_eligible(spec):
        text += _TMA.format(**common, epilogue=epilogue_code(spec, " " * 8), store=tma_store)
    if spec.vector:
        text += _GEMV.format(name=name, k_range=k_range_code(spec, "    "), prologue=_prologue(spec, " " * 8, True))
    if spec.row_partials:
        text += "\n\n" + spec.combine
    return text
