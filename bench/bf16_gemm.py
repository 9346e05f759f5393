"""bf16 GEMM designs side by side on the GPU: is a persistent TMA kernel worth a template?

    PYTHONPATH=. python3 bench/bf16_gemm.py --out OUT.json [--budget-s 150]

The suite's bf16 GEMM chains ran at 0.71-0.93x torch.compile on the H200 (2026-12-02),
with the lowering's plain grouped tile (128x256x64, 8 warps, 3 stages: pointer loads,
one output tile per program). This times, at each bf16 suite task's GEMM shape, with the
weight stored as ``nn.Linear`` keeps it ((N, K), K-major) or as ``A @ B`` takes it ((K, N)):

  cublas      ``torch.matmul`` / ``F.linear`` (what eager and torch.compile call)
  plain       the grouped pointer-load kernel, the template's current tile and two others
  tma         a persistent kernel (one program per SM walking the output tiles in grouped
              order) loading A and B through host-built TMA descriptors, storing through one

Each row: median and IQR of ``triton.testing.do_bench`` (ms), TFLOP/s, and the relative
error against cuBLAS's own bf16 output (both accumulate in fp32). A benchmark, never a test.
Imports only the standard library, torch and triton.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

# (task, M, N, K, weight layout): the bf16 suite tasks' products at their declared sizes
SHAPES = (
    ("matmul_bf16", 8192, 8192, 8192, "kn"),
    ("rms_norm_linear_bf16", 16384, 4096, 4096, "nk"),
    ("linear_tanh_softcap_bf16", 8192, 32768, 4096, "nk"),
    ("linear_swiglu_bf16 (one of two)", 8192, 11008, 4096, "nk"),
)
PLAIN = ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 4))
TMA = ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 256, 64, 4, 3))
GROUP_M = 8


@triton.jit
def _tile(t, num_pid_m, num_pid_n, GROUP: tl.constexpr):
    # grouped order: GROUP row-tiles share each column of B while it sits in L2
    per_group = GROUP * num_pid_n
    first_m = (t // per_group) * GROUP
    size_m = min(num_pid_m - first_m, GROUP)
    return first_m + (t % per_group) % size_m, (t % per_group) // size_m


@triton.jit
def plain_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid_m, pid_n = _tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a, mask=(rk[None, :] + k * BK) < K, other=0.0),
                     tl.load(b, mask=(rk[:, None] + k * BK) < K, other=0.0), acc)
        a += BK * sak
        b += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def tma_kernel(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP: tl.constexpr, B_NK: tl.constexpr, NUM_SMS: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    for t in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile(t, num_pid_m, num_pid_n, GROUP)
        acc = tl.zeros((BM, BN), tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([pid_m * BM, ki * BK])
            if B_NK:
                acc = tl.dot(a, b_desc.load([pid_n * BN, ki * BK]).T, acc)
            else:
                acc = tl.dot(a, b_desc.load([ki * BK, pid_n * BN]), acc)
        c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


def run_plain(a, w, layout, cfg):
    bm, bn, bk, warps, stages = cfg
    M, K = a.shape
    N = w.shape[0] if layout == "nk" else w.shape[1]
    sbk, sbn = (w.stride(1), w.stride(0)) if layout == "nk" else (w.stride(0), w.stride(1))
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    return lambda: plain_kernel[grid](a, w, c, M, N, K, a.stride(0), a.stride(1), sbk, sbn, c.stride(0), c.stride(1),
                                      BM=bm, BN=bn, BK=bk, GROUP=GROUP_M, num_warps=warps, num_stages=stages), c


def run_tma(a, w, layout, cfg):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, warps, stages = cfg
    M, K = a.shape
    N = w.shape[0] if layout == "nk" else w.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    da = TensorDescriptor.from_tensor(a, [bm, bk])
    db = TensorDescriptor.from_tensor(w, [bn, bk] if layout == "nk" else [bk, bn])
    dc = TensorDescriptor.from_tensor(c, [bm, bn])
    grid = (min(sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
    return lambda: tma_kernel[grid](da, db, dc, M, N, K, BM=bm, BN=bn, BK=bk, GROUP=GROUP_M,
                                    B_NK=layout == "nk", NUM_SMS=sms, num_warps=warps, num_stages=stages), c


def timed(fn) -> dict:
    fn()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="all")
    q = statistics.quantiles(ms, n=4)
    return {"median_ms": round(statistics.median(ms), 4), "iqr_ms": round(q[2] - q[0], 4), "trials": len(ms)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    start, rows = time.monotonic(), []
    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
              "rows": rows}
    for task, M, N, K, layout in SHAPES:
        if time.monotonic() - start > args.budget_s:
            break
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn((N, K) if layout == "nk" else (K, N), device="cuda", dtype=torch.bfloat16, generator=g)
        ref = torch.nn.functional.linear(a, w) if layout == "nk" else a @ w
        ref_norm = ref.float().norm().item()
        flops = 2.0 * M * N * K
        cublas = (lambda: torch.nn.functional.linear(a, w)) if layout == "nk" else (lambda: a @ w)
        variants = [("cublas", None, cublas, ref)]
        for cfg in PLAIN:
            variants.append(("plain", cfg, *run_plain(a, w, layout, cfg)))
        for cfg in TMA:
            variants.append(("tma", cfg, *run_tma(a, w, layout, cfg)))
        for kind, cfg, fn, out in variants:
            row = {"task": task, "M": M, "N": N, "K": K, "weight": layout, "kind": kind, "config": cfg}
            try:
                row.update(timed(fn))
                row["tflops"] = round(flops / row["median_ms"] / 1e9, 1)
                row["rel_err_vs_cublas"] = float(f"{(out.float() - ref.float()).norm().item() / ref_norm:.3e}")
            except Exception as exc:  # noqa: BLE001 - a config that fails to compile is a row too
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
        del a, w, ref
        torch.cuda.empty_cache()
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'task':34} {'kind':7} {'config':22} {'ms':>8} {'TFLOP/s':>8} {'rel err':>9}")
    for r in rows:
        print(f"{r['task'][:34]:34} {r['kind']:7} {str(r['config']):22} {r.get('median_ms', '-'):>8} "
              f"{r.get('tflops', r.get('error', '-'))!s:>8} {r.get('rel_err_vs_cublas', '-')!s:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
