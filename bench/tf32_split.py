"""3xTF32 GEMM designs side by side: where the split into TF32 parts happens.

    PYTHONPATH=. python3 bench/tf32_split.py --out FILE.json [--budget-s S] [SIZE ...]

``tl.dot(input_precision="tf32x3")`` splits both operand tiles into a TF32 part and a TF32
remainder inside the K loop. Hopper's wgmma reads B from shared memory, so the split B
parts go back through shared memory on every K step. Here the split is moved out of the
loop, for C = A @ B with fp32 A [M, K] and B [K, N] (N contiguous, as ``torch.randn`` makes
it), at SIZE^3 (default 4096 and 8192):

- ``split_b``: one pass writes B^T's two parts, ``hi = rna_tf32(b)`` and
  ``lo = rna_tf32(b - hi)``, K-major (the transpose the skill already makes, now writing
  two arrays); the GEMM loads A's tile, splits it in registers (wgmma may take A from
  registers) and issues three TF32 dots, lo terms first;
- ``split_ab``: A split the same way in its own pass too, so the loop only loads and
  multiplies (four tiles a K step);
- ``+small``: the large product of each step in a fresh tile added in fp32 (subtracted, A's
  part negated: Triton rewrites ``acc + dot(x, y, 0)`` into ``dot(x, y, acc)``, which made the
  first version of this design the 1.9e-5 ``two_acc`` of 2026-12-06), the two small ones in a
  loop-carried tensor-core accumulator of their own over all of K (the conv weight split's
  design: two tensor-core waits a K step in the sm_90 PTX, against three; the skill's SPLIT=1 / 2
  during 2026-12-07, slower there than chunk1);
- ``+chunkN``: the three products of N K steps are summed in a fresh tensor-core accumulator,
  then added to the fp32 total (``chunk1``: each step apart, as ``tl.dot``'s own tf32x3 sums
  them: the GEMM template's step, and the skill's SPLIT=1 / SPLIT=2 form, both with a NaN redo);
  ``chunk0``: one tensor-core accumulator over all of K. On an H100 (2026-12-06) chunk0 ran at up to 115 TFLOP/s (2.25x cuBLAS fp32) with
  a relative error of 5.7e-5 at 8192^3: the tensor cores' accumulation over all of K is what
  loses the accuracy that 3xTF32 exists for;
- ``skill``: the matmul_tf32x3 skill at each of its configs: SPLIT=0 is ``tf32x3`` in the
  loop, SPLIT=1 and 2 are ``split_b`` and ``split_ab`` with ``+chunk1``, in the skill's form;
- ``template``: the offline lowering's GEMM template (what a composed fp32 chain runs), its
  3xTF32 with ``tl.dot``'s own split (``split_b=False``), with B split before the kernel
  (``split_b+chunk1``'s design, with a NaN redo for infinities) and with A split there too
  (``split_a``, ``split_ab+chunk1``'s design, the launcher's default from N = 4096), at the
  launcher's own tile and at each of ``TEMPLATE_TILES`` (the split's tile table replaced by
  that one row for the call), B's split alone and A's too: the candidates for that table;
- ``cublas_fp32`` (TF32 off: the goal's baseline) and ``cublas_tf32`` (the speed of one
  TF32 product, which fails fp32 tolerances).

Each output's relative error ``||C - C64|| / ||C64||`` against fp64 is recorded; one over
1e-6 (the goal's bound) is still timed and marked. Times: ``verify.tune.time_configs``
(L2 flushed before every call, round-robin, medians), split passes included. A survey for
the skill's design, not a verification. Needs only torch, triton and numpy.
"""
from __future__ import annotations

import sys
from pathlib import Path

import triton
import triton.language as tl

from bench.fp32_gemm import GOAL_REL_ERR, SKILLS, load_module, template_module

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) for the split kernels
SPLIT_CONFIGS = ((128, 128, 32, 8, 3), (128, 128, 32, 8, 4), (128, 64, 32, 4, 3))
CHUNKS = (1, 2, 4)  # K steps a tensor-core accumulator sums before the fp32 add (0: all of K)
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) for the template's split of both operands; each
# fits sm_90's 227 KB of shared memory with A's two parts beside B's (128 x 128 x 32 at 4 stages would not)
TEMPLATE_TILES = ((128, 128, 16, 8, 6), (128, 128, 16, 8, 4), (64, 128, 32, 4, 3), (128, 64, 32, 4, 3))
SKILL = load_module(SKILLS["matmul_tf32x3"][0], "skill_matmul_tf32x3")
_rna_tf32 = SKILL._rna_tf32        # the skill's rounding and split pass: the survey's kernels use them


@triton.jit
def split_gemm_kernel(a_ptr, alo_ptr, bhi_ptr, blo_ptr, c_ptr, M, N, K,
                      A_SPLIT: tl.constexpr, STEPS: tl.constexpr, FRESH: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, SMALL: tl.constexpr = False):
    """C [M, N] = A [M, K] @ B, all contiguous, B given as its parts B^T_hi, B^T_lo [N, K].
    A_SPLIT: A given as its parts (a_ptr = hi, alo_ptr = lo), else split here in registers.
    FRESH: every STEPS K steps are summed in a fresh tensor-core accumulator, then added to the
    fp32 total; else one tensor-core accumulator runs over all of K. SMALL: the two small
    products go into a tensor-core accumulator of their own over all of K (loop-carried, the
    form the compiler keeps asynchronous; their error is ~2^-11 of the result's), only the
    large one into the fresh tile."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_offs = offs_m[:, None].to(tl.int64) * K + offs_k[None, :]
    b_offs = offs_n[:, None].to(tl.int64) * K + offs_k[None, :]
    m_ok = offs_m[:, None] < M
    n_ok = offs_n[:, None] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K * STEPS):
        if FRESH:
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        else:
            part = acc
        for j in tl.static_range(STEPS):
            k_ok = (k0 + j * BLOCK_K + offs_k)[None, :] < K
            a = tl.load(a_ptr + a_offs, mask=m_ok & k_ok, other=0.0)
            if A_SPLIT:
                a_hi = a
                a_lo = tl.load(alo_ptr + a_offs, mask=m_ok & k_ok, other=0.0)
            else:
                a_hi = _rna_tf32(a)
                a_lo = a - a_hi
            b_hi = tl.trans(tl.load(bhi_ptr + b_offs, mask=n_ok & k_ok, other=0.0))
            b_lo = tl.trans(tl.load(blo_ptr + b_offs, mask=n_ok & k_ok, other=0.0))
            if SMALL:   # the large product first: its wait can come after the small ones are issued
                # FRESH keeps part negated (acc -= part below): Triton rewrites acc + dot(x, y, 0)
                # into dot(x, y, acc), the large product on the tensor cores' accumulator over all
                # of K (two_acc of 2026-12-06: 1.9e-5); it has no such rule for a subtraction
                part = tl.dot(-a_hi if FRESH else a_hi, b_hi, part, input_precision="tf32")
                small = tl.dot(a_lo, b_hi, small, input_precision="tf32")
                small = tl.dot(a_hi, b_lo, small, input_precision="tf32")
            else:
                part = tl.dot(a_lo, b_hi, part, input_precision="tf32")
                part = tl.dot(a_hi, b_lo, part, input_precision="tf32")
                part = tl.dot(a_hi, b_hi, part, input_precision="tf32")
            a_offs += BLOCK_K
            b_offs += BLOCK_K
        if FRESH and SMALL:
            acc -= part
        elif FRESH:
            acc += part   # part's last dot began from the other products, not from zero: no rewrite
        else:
            acc = part
    if SMALL:
        acc += small
    c_offs = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    tl.store(c_ptr + c_offs, acc, mask=m_ok & (offs_n[None, :] < N))


def split_gemm(a, b, config: tuple, a_split: bool, chunk: int, small: bool = False):
    """C = a @ b through the split kernel; the split passes are part of the call."""
    import torch

    M, K = a.shape
    N = b.shape[1]
    bhi, blo = SKILL.tf32_parts(b, transpose=True)
    ahi, alo = SKILL.tf32_parts(a, transpose=False) if a_split else (a.contiguous(), None)
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    bm, bn, bk, warps, stages = config
    split_gemm_kernel[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](
        ahi, alo if a_split else ahi, bhi, blo, c, M, N, K, A_SPLIT=a_split, STEPS=max(chunk, 1), FRESH=chunk > 0,
        SMALL=small,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    return c


def survey(name: str, folder: Path, iters: int) -> dict:
    import torch

    from kernelrag.verify.gemm_paths import cublas_precision, rel_err
    from kernelrag.verify.tune import time_configs

    n = int(name)
    gen = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=gen)
    b = torch.randn(n, n, device="cuda", generator=gen)
    ref64 = a.double() @ b.double()
    skill = SKILL
    runs = {}
    for precision in ("ieee", "tf32"):
        def run(precision=precision):
            restore = cublas_precision(torch, precision)
            try:
                return a @ b
            finally:
                restore()
        runs[f"cublas_{'fp32' if precision == 'ieee' else 'tf32'}"] = run
    for cfg in skill.CONFIGS:
        config = {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        label = "skill:" + ",".join(f"{k}={v}" for k, v in config.items())
        runs[label] = lambda config=config: skill.matmul_tf32x3(a, b, config=config)
    module, mm = template_module(folder)
    table = module.GEMM_TILES_TF32X3_SPLIT

    def template(split_b: bool, tile: tuple | None = None, split_a: bool | None = None, split_k: int | None = None):
        # a row of the emitted table: (cuda, min M, min N, min K, min programs, tile)
        module.GEMM_TILES_TF32X3_SPLIT = table if tile is None else ((a.is_cuda, 0, 0, 0, 0, tile),)
        return mm(a, b, split_b=split_b, split_a=split_a, split_k=split_k)

    for split_b, split_a in ((False, None), (True, False), (True, True)):
        runs[f"template:split_b={split_b}" + ("" if split_a is None else f",split_a={split_a}")] = (
            lambda s=split_b, t=split_a: template(s, split_a=t))
    # K split across two programs a tile, partials summed after: the launcher's choice at 2048^3
    # (256 tiles) until it split K only below one wave of tiles
    runs["template:split_b=True,split_k=2"] = lambda: template(True, split_k=2)
    for tile in TEMPLATE_TILES:     # each tile with B's split alone and with A's too
        for split_a in (False, True):
            label = f"template:split_b=True,split_a={split_a}," + "BM={},BN={},BK={},warps={},stages={}".format(*tile)
            runs[label] = lambda t=tile, s=split_a: template(True, t, split_a=s)
    for a_split in (False, True):
        for config in SPLIT_CONFIGS:     # the small products apart, the large one fresh each step
            label = f"{'split_ab' if a_split else 'split_b'}+small:" + "BM={},BN={},BK={},warps={},stages={}".format(
                *config)
            runs[label] = lambda c=config, s=a_split: split_gemm(a, b, c, s, 1, small=True)
        for chunk in CHUNKS:
            for config in SPLIT_CONFIGS:
                label = (f"{'split_ab' if a_split else 'split_b'}+chunk{chunk}:"
                         + "BM={},BN={},BK={},warps={},stages={}".format(*config))
                runs[label] = lambda c=config, s=a_split, t=chunk: split_gemm(a, b, c, s, t)
    def check(out):
        err = rel_err(out, ref64)
        return err <= 1e-3, f"rel err {err:.3g}"   # tf32 (~5e-4) is timed as the speed reference

    timed = time_configs(runs, check=check, iters=iters)
    flops = 2 * n ** 3
    for row in timed.values():
        detail = row.get("detail") or ""
        if detail.startswith("rel err "):
            row["rel_err"] = float(detail.split()[-1])
            row["within_goal_err"] = row["rel_err"] <= GOAL_REL_ERR
        if row.get("median_ms"):
            row["tflops"] = round(flops / (row["median_ms"] * 1e-3) / 1e12, 1)
    fp32_ms = timed.get("cublas_fp32", {}).get("median_ms")
    for row in timed.values():
        if fp32_ms and row.get("median_ms"):
            row["x_cublas_fp32"] = round(fp32_ms / row["median_ms"], 3)
    fast = [label for label, row in timed.items()
            if ":" in label and row.get("median_ms") and row.get("within_goal_err")]
    best = {}
    families = ("skill", "template", "split_b+small", "split_ab+small",
                *(f"split_{ops}+chunk{c}" for ops in ("b", "ab") for c in CHUNKS))
    for family in families:
        mine = [label for label in fast if label.split(":")[0] == family]
        if mine:
            label = min(mine, key=lambda key: timed[key]["median_ms"])
            best[family] = {"label": label, "x_cublas_fp32": timed[label].get("x_cublas_fp32"),
                            "tflops": timed[label].get("tflops"), "rel_err": timed[label].get("rel_err")}
    top = max(best.values(), key=lambda row: row["x_cublas_fp32"] or 0) if best else None
    del a, b, ref64
    return {"task": name, "n": n, "runs": timed, "best_by_family": best,
            "best": top["label"] if top else None, "best_x_cublas_fp32": top["x_cublas_fp32"] if top else None}


def main() -> int:
    from bench.rowwise_configs import survey_cli

    return survey_cli(__doc__, ["4096", "8192"], 12, survey, "tf32-split-", ("best", "best_x_cublas_fp32"))


if __name__ == "__main__":
    sys.exit(main())
