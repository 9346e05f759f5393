"""The GEMM / BMM template: render a module (kernels + launcher) from a ``GemmSpec``.

``render_gemm(spec)`` returns the text of a module that defines the kernels of
``gemm_kernels.py`` and a launcher ``<name>(a, b, *extras, precision=None,
split_k=None)`` computing ``epilogue(prologue(a) @ prologue(b))`` with PyTorch's
matmul broadcasting: a and b may be 1-D (vector), 2-D, or batched with up to two
batch dims after broadcasting (more are flattened); a 2-D b is shared by all of
a's leading dims, which fold into M (a 3-D or 4-D tensor times a matrix is one
tall GEMM). Extras broadcast to the output shape.

Precision. For fp32 the launcher asks tl.dot for ``"ieee"`` (true fp32 FMAs; what
the CPU interpreter checks) unless it runs on CUDA, where it takes the 3xTF32
path ``"tf32x3"``: each operand is split into a TF32 high part and a TF32
remainder and three tensor-core products are summed, giving about fp32 accuracy
(2.5e-7 relative on an H200 at 4096^3, against cuBLAS fp32's 1.1e-6) at several
times the fp32 FMA rate. ``GemmSpec.precision`` sets that default: "tf32x3" (the
lowering's default variant), "bf16x6" (``bf16x6_dot``: three exact bf16 parts per operand,
six bf16 products at the time of three TF32 ones, and a Kahan sum across K steps, so its
error stays at fp32 rounding of the final value even where the GEMM's values are large and
the output is not, a clamp of large values; the ``bf16x6`` variant) or "ieee" (fp32 FMAs on
CUDA too, the ``ieee`` variant), so the draft's variant name says which path an fp32
product takes. On CUDA, 3xTF32 splits B once, in a pass before the kernel (``tf32_parts``: B's
TF32 part and remainder, K-major, 12 bytes moved per element), and A in registers
(``tf32x3_split_dot``), where ``tl.dot``'s own "tf32x3" splits both tiles every K step and sends
B's parts back through shared memory; each step's three products are summed in a fresh tile
and added to the accumulator in fp32 (``split_b``; not when B's tile has a prologue, which acts on
B and not on its parts, nor for a vector B). Where A is one matrix (after folding its leading
dims) without a prologue and N >= 4096, A is split the same way, in the same launch as B
(``split_a``, ``tf32_parts_pair``, ``tf32x3_parts_dot``): the K loop then only loads four tiles
and multiplies. The kernels' text lives in ``split_helpers``.
Hopper's TF32 MMA wants both operands K-major, so a (K, N)-major B or an (M, K) A with a
non-unit K stride is first transposed by ``transpose_kernel`` in one pass (2 * K * N * 4
bytes, small next to the 2 * M * N * K flops). nn.Linear's (N, K) weight is already K-major. 16-bit
inputs use the tensor cores directly with fp32 accumulation.

Host time. The launcher's Python runs inside every timed call, and a small product's GPU waits on
it. It reads strides arithmetically (``_strides``, ``_contiguous``) instead of building views, and
queues the split passes (``_launch`` with a ``pending`` list) until every allocation is made, so
the passes and the GEMM launch back to back.

16-bit products on CUDA (one product after folding a's leading dims, operands as the TMA
engine can fetch them, no prologue or row reduction) run ``<name>_tma_kernel``: persistent,
TMA-fed, the same tile table and epilogue; everything else, the CPU included, the tiled kernel.

Tiles. (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) come from a rule table per dot path
(``tiles.GEMM_TILES`` for tf32x3 / ieee, ``GEMM_TILES_BF16X6``, ``GEMM_TILES_16BIT`` for
bf16 / fp16 operands), carried into the launcher as data: the large tile whenever it still
fills the GPU (a batched product of 512x512 matrices counts its batch), smaller tiles for
small products.
"""
from __future__ import annotations

from kernelrag.draft.lower.gemm_kernels import render_kernels, tma_eligible
from kernelrag.draft.lower.gemm_spec import GemmSpec, Rendered
from kernelrag.draft.lower.host import used_helpers
from kernelrag.draft.lower.split_helpers import BF16X6_DOT, TF32_SPLIT_PAIR, TF32X3_SPLIT, TRANSPOSE_KERNEL
from kernelrag.draft.lower.tiles import (GEMM_TILES, GEMM_TILES_16BIT, GEMM_TILES_BF16X6, GEMM_TILES_TF32X3_SPLIT,
                                         PICK_TILE, table_source)

# the launcher's default tl.dot precision per spec.precision (16-bit inputs ignore it)
LAUNCH_PRECISION = {"tf32x3": '("tf32x3" if cuda else "ieee") if fp32 else "tf32"',
              "bf16x6": '("bf16x6" if cuda else "ieee") if fp32 else "tf32"',
              "ieee": '"ieee" if fp32 else "tf32"'}

TMA_LAYOUT = '''def tma_layout(a2, b2):
    """How the TMA engine can fetch A [M, K] and B [K, N], or None: A K-contiguous and B K-contiguous
    (True: nn.Linear's [N, K] weight, B = weight.T) or N-contiguous (False), each with a 16-byte
    aligned base and row pitch (the descriptor's requirements)."""
    def pitched(t, unit_dim):
        other = 1 - unit_dim
        return (t.stride(unit_dim) == 1 and t.stride(other) > 0 and t.data_ptr() % 16 == 0
                and (t.stride(other) * t.element_size()) % 16 == 0)
    if not pitched(a2, 1):
        return None
    return True if pitched(b2, 0) else False if pitched(b2, 1) else None
'''

LAUNCHER = '''def {name}(a, b, {extras_sig}{scalars_sig}precision=None, split_k=None, split_b=None, split_a=None):
    """{doc}"""
    if a.dtype != b.dtype or a.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{name}: need two tensors of one float dtype, got {{a.dtype}} and {{b.dtype}}")
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    a = a.unsqueeze(0) if vec_a else a
    b = b.unsqueeze(-1) if vec_b else b
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{name}: inner sizes differ, a is {{tuple(a.shape)}}, b is {{tuple(b.shape)}}")
    K, N = b.shape[-2], b.shape[-1]
    batch = _broadcast(a.shape[:-2], b.shape[:-2]) if a.ndim > 2 or b.ndim > 2 else ()
    out_shape = batch + (a.shape[-2], N)
    extras = [e.unsqueeze(-1) if vec_b and e.ndim else e for e in ({extras_tuple})]
    extras = [e.expand(out_shape) for e in extras]
    cuda, fp32 = a.is_cuda, a.dtype == torch.float32
    if precision is None:                     # "tf32" is not applied to 16-bit inputs
        precision = {default_precision}
    if precision not in ("ieee", "tf32x3", "bf16x6", "tf32"):
        raise ValueError(f"{name}: precision {{precision!r}} is not ieee, tf32x3, bf16x6 or tf32")
    if split_b is None:                       # 3xTF32 on CUDA: B split into TF32 parts in one pass first
        split_b = cuda and {b_splittable!r} and N > 1
    split_b = bool(split_b) and precision == "tf32x3" and fp32
    if precision == "tf32x3":
        a = k_major(a, rows_are_k=False)
        b = b if split_b else k_major(b, rows_are_k=True)
    if b.ndim == 2 and a.ndim > 2:            # a matrix shared by every leading dim of a: one tall GEMM
        a, batch = a.reshape(-1, K), ()
    if len(batch) > 2:                        # more than two batch dims: flatten them (may copy)
        a = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
        b = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
        batch = (a.shape[0],)
    B0, B1 = (1,) * (2 - len(batch)) + batch
    M = a.shape[-2]
    # the split passes are queued and launched back to back with the GEMM, after all of this
    # Python: the GPU then does not wait on the host between them
    pending, a_lo, b_lo = [], None, None
    # A split too once it is one matrix (not a bmm's): its pass moves 12 bytes an element of A, less
    # than the K loop saves from N ~ 2,200 (H100, 2026-12-07: 1.84x -> 2.01x cuBLAS fp32 at 8192^3)
    if split_a is None:
        split_a = {a_splittable!r} and N >= 4096
    if split_b and split_a and a.ndim == 2:   # A's parts ([M, K], K-major) and B's in one launch
        (a, a_lo), (b, b_lo) = tf32_parts_pair(a.t(), b, pending)
        a, a_lo = a.t(), a_lo.t()
    elif split_b:
        b, b_lo = tf32_parts(b, pending)
    a_st = _strides(a, (B0, B1, M, K))        # 0 along a broadcast batch dim; the parts share their
    b_st = _strides(b, (B0, B1, K, N))        # tensor's layout
    e4 = [e.reshape(B0, B1, M, N) for e in extras]
    e_st = [s for e in e4 for s in e.stride()]
    rules = GEMM_TILES_16BIT if not fp32 else GEMM_TILES_BF16X6 if precision == "bf16x6" else GEMM_TILES
    rules = GEMM_TILES_TF32X3_SPLIT if split_b else rules   # B's two parts: BLOCK_K 32 (shared memory)
    BM, BN, BK, warps, stages = pick_tile(rules, cuda, M, N, K,
                                          lambda bm, bn: B0 * B1 * _cdiv(M, bm) * _cdiv(N, bn))
    if {whole_rows!r}:                        # the epilogue reduces rows: one tile spans N
        if N > 1024:
            raise ValueError(f"{name}: the fused row reduction holds at most 1024 columns, N is {{N}}")
        BN = max(16, _pow2(N))
        BM = max(16, min(BM, 8192 // BN))
        if cuda:                              # keep (BM + BN) * BK * 4 bytes * stages in shared memory
            BK, stages = (64 if BN <= 128 else 32 if BN <= 512 else 16), 1 if split_b and BN > 512 else 2
    if {split_rows!r}:                        # each tile's row partials, combined by a second kernel
        if split_k not in (None, 1):
            raise ValueError(f"{name}: a chain reducing rows across tiles runs without split-K, got {{split_k}}")
        split_k = 1
    store_cache = ""
    if K <= 32 and not {whole_rows!r}:        # one K step: the output's write is the whole cost (K = 16 on
        BK = max(16, _pow2(K))   # the H100, 2026-12-06: 128 x 128 x 64 tiles 0.72x torch.compile,
        if cuda:                              # 64 x 128 x 16 on 4 warps 1.27x, streamed out 1.40x)
            BM, BN, warps, stages = min(BM, 64), min(BN, 128), 4, 1
            store_cache = ".cs" if B0 * B1 * M * N * a.element_size() > 2 ** 26 else ""   # far past L2
    split_k_given = split_k
    if split_k is None:                       # a long K over fewer output tiles than one wave (132 SMs):
        tiles = B0 * B1 * _cdiv(M, BM) * _cdiv(N, BN)   # split K across programs; from a full wave on,
        split_k = (max(1, min(K // 1024, _cdiv(264, tiles), 64))   # the fp32 partials' round trip and the
                   if K >= 2048 and tiles < 132 else 1)          # summing pass add time and no parallelism
    gemv = {vector!r} and N == 1
    if gemv and split_k_given is None:        # reading A is the whole cost: enough programs to keep HBM busy
        split_k = max(1, min(K // 4096, _cdiv(1056, B0 * B1 * _cdiv(M, 64))))
    out_full = out_shape[:-1] + ((1,) if {row_out!r} else (N,))
    out = torch.empty(out_full, device=a.device, dtype=a.dtype)
    c_st = _contiguous((B0, B1, M, out_full[-1]))
    dest = out
    if {split_rows!r}:                        # the product is never written: [NP, rows, tiles a row] fp32
        NT = _cdiv(N, BN)
        dest = torch.empty(({row_partials}, B0 * B1 * M, NT), device=a.device, dtype=torch.float32)
    alo, blo = (a if a_lo is None else a_lo), (b if b_lo is None else b_lo)   # laid out as a and b
    if gemv or split_k > 1:
        ws = torch.empty((split_k, B0 * B1, M, N), device=a.device, dtype=torch.float32)
    for kernel, grid, args, meta in pending:
        kernel[grid](*args, **meta)
    if gemv or split_k > 1:
        if gemv:
            GM, GK = (64, 128) if cuda else (16, 32)
            {name}_gemv_kernel[(_cdiv(M, GM), B0 * B1, split_k)](
                a, b, ws, M, K, B1, *a_st, *b_st[:3], BLOCK_M=GM, BLOCK_K=GK, SPLIT_K=split_k)
        else:
            {name}_kernel[(_cdiv(M, BM) * _cdiv(N, BN), B0 * B1, split_k)](
                a, alo, b, blo, ws, {extras_call}{scalars_call}M, N, K, B1, *a_st, *b_st, 0, 0, 0, 0, *e_st,
                BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, SPLIT_K=split_k,
                PRECISION=precision, SPLIT_B=split_b, SPLIT_A=a_lo is not None, STORE_CACHE="", num_warps=warps,
                num_stages=stages)
        SM, SN = (32, BN) if {whole_rows!r} else ((32, 32) if N > 1 else (128 if cuda else 16, 1))
        {name}_splitk_kernel[(_cdiv(M, SM) * _cdiv(N, SN), B0 * B1)](
            ws, out, {extras_call}{scalars_call}M, N, B1, split_k, *c_st, *e_st, BLOCK_M=SM, BLOCK_N=SN)
{tma_branch}    else:
        {name}_kernel[(_cdiv(M, BM) * _cdiv(N, BN), B0 * B1, 1)](
            a, alo, b, blo, dest, {extras_call}{scalars_call}M, N, K, B1, *a_st, *b_st, *c_st, *e_st,
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, SPLIT_K=1,
            PRECISION=precision, SPLIT_B=split_b, SPLIT_A=a_lo is not None, STORE_CACHE=store_cache,
            num_warps=warps, num_stages=stages)
    if {split_rows!r}:
        BT = _pow2(NT)
        CR = max(1, min(64, 4096 // BT))      # rows a program: BLOCK_R x BLOCK_T partials of each reduction
        {name}_rows_kernel[(_cdiv(B0 * B1 * M, CR),)](
            dest, out, {extras_call}{scalars_call}B0 * B1 * M, M, B1, N, NT, *e_st, BLOCK_R=CR, BLOCK_T=BT)
    if {squeeze_rows!r}:
        out = out.squeeze(-1)
    if vec_b:
        out = out.squeeze(-1)
    if vec_a:
        out = out.squeeze(-2 if not vec_b else -1)
    return out
'''

TMA_BRANCH = '''    elif cuda and not fp32 and B0 * B1 == 1 and (b_nk := tma_layout(a2 := a.reshape(M, K),
                                                                     b2 := b.reshape(K, N))) is not None:
        # 16-bit, one product: the persistent kernel, its tiles fetched by the TMA engine
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_desc = TensorDescriptor.from_tensor(a2, [BM, BK])
        b_desc = TensorDescriptor.from_tensor(b2.t() if b_nk else b2, [BN, BK] if b_nk else [BK, BN])
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        {name}_tma_kernel[(min(sms, _cdiv(M, BM) * _cdiv(N, BN)),)](
            a_desc, b_desc, dest, {extras_call}{scalars_call}M, N, K, 0, 0, *c_st[2:], *e_st,
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=8, B_NK=b_nk, NUM_SMS=sms,
            num_warps=warps, num_stages=stages)
'''


def gemm_parts(spec: GemmSpec) -> tuple[list[str], str]:
    """(kernel and helper texts, the launcher's text) for ``spec``; helpers shared by
    several GEMMs of one module are separate entries, so they are written once."""
    extras = [f"e{i}" for i in range(spec.n_extra)]
    doc = spec.doc or "epilogue(a @ b) through the GEMM template's kernels."
    extras_call = "".join(f"*e4[{i}:{i + 1}], " for i in range(spec.n_extra))
    scalars_call = "".join(f"float(s{i}), " for i in range(spec.n_scalar))
    launcher = LAUNCHER.format(
        name=spec.name, doc=doc, extras_sig="".join(f"{e}, " for e in extras),
        extras_tuple="".join(f"{e}, " for e in extras),
        extras_call=extras_call, scalars_sig="".join(f"s{i}, " for i in range(spec.n_scalar)),
        scalars_call=scalars_call,
        whole_rows=spec.whole_rows, row_out=spec.row_out, split_rows=bool(spec.row_partials),
        row_partials=spec.row_partials, squeeze_rows=spec.squeeze_rows, vector=spec.vector,
        b_splittable=not spec.b_prologue,     # a prologue on B's tile acts on B, not on its parts
        a_splittable=not (spec.a_prologue or spec.a_tri),   # nor one (or a triangle's mask) on A's tile
        default_precision=LAUNCH_PRECISION[spec.precision],
        tma_branch=TMA_BRANCH.format(name=spec.name, extras_call=extras_call, scalars_call=scalars_call)
        if tma_eligible(spec) else "")
    tables = [table_source(name, table) for name, table in (("GEMM_TILES", GEMM_TILES), (
        "GEMM_TILES_TF32X3_SPLIT", GEMM_TILES_TF32X3_SPLIT), ("GEMM_TILES_BF16X6", GEMM_TILES_BF16X6),
        ("GEMM_TILES_16BIT", GEMM_TILES_16BIT))]
    return [TRANSPOSE_KERNEL, BF16X6_DOT, TF32X3_SPLIT, TF32_SPLIT_PAIR, TMA_LAYOUT, *tables, PICK_TILE,
            render_kernels(spec)], launcher


def transformations_of(spec: GemmSpec) -> list[str]:
    out = ["tiling", "grouped_ordering", "fp32_accumulation", "split_k"]
    out += {"tf32x3": ["tf32x3", "k_major_operands"], "bf16x6": ["bf16x6", "compensated_summation"],
            "ieee": ["ieee_fp32_dot"]}[spec.precision]
    if spec.precision == "tf32x3" and not spec.b_prologue:
        out.append("tf32_split_pass")     # the launcher's CUDA path (split_b)
    if spec.epilogue or spec.out_tri:
        out.append("epilogue_fusion")
    if spec.whole_rows:
        out.append("one_row_per_program")
    if spec.row_partials:
        out.append("split_row_epilogue")
    return out


PRECISION_NOTES = {
    "tf32x3": "dot precision: tf32x3 (3xTF32, K-major operands; on CUDA B is split into its TF32 parts in a pass "
              "before the kernel unless its tile has a prologue, and A too where it is one matrix and N >= 4096) "
              "for fp32, ieee under the CPU interpreter",
    "bf16x6": "dot precision: bf16x6 (three bf16 parts, six products, Kahan sum over K) on CUDA for fp32, "
              "ieee under the CPU interpreter",
    "ieee": "dot precision: ieee (fp32 FMAs) for fp32 on CUDA and under the CPU interpreter",
}


def precision_note(spec: GemmSpec) -> str:
    return PRECISION_NOTES[spec.precision]


def render_gemm(spec: GemmSpec) -> Rendered:
    """The kernels and launcher for ``spec`` as one module's text (imports included)."""
    kernels, launcher = gemm_parts(spec)
    parts = used_helpers([*kernels, launcher]) + kernels
    source = "import torch\nimport triton\nimport triton.language as tl\n\n\n" + "\n\n".join(parts) + launcher
    return Rendered(source=source, entry=spec.name, transformations=transformations_of(spec), notes=[precision_note(spec)])
