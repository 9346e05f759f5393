"""The fp32 GEMM precision paths, measured side by side: rate and error against fp64.

``measure_fp32_paths`` times C = A @ B on random fp32 data three ways and measures
each one's relative error ``||C - C64|| / ||C64||`` against the same product in fp64:

- ``ieee``: cuBLAS fp32 with TF32 off (PyTorch's default, what fp32 tasks reference);
- ``tf32``: cuBLAS with TF32 on (one TF32 tensor-core product);
- ``tf32x3``: a Triton kernel, ``tl.dot(input_precision="tf32x3")`` with both operands
  K-major (B given as B^T [N, K]), 128x128x64 tiles, 8 warps, 3 stages, grouped order.

The ceilings (``ceilings.measure_ceilings``) keep all three, and the roofline of an fp32
task uses the fastest one that passes its tolerance (``precision.fp32_ceiling``).
Times are medians of CUDA events captured before any candidate loaded, L2 flushed
before each call. Imports triton (torch on first use); ``ceilings`` imports this
module only when it measures, on the GPU machine.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import triton
import triton.language as tl

TF32X3_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
PATH_HOW = {
    "ieee": "cuBLAS fp32, TF32 off",
    "tf32": "cuBLAS TF32",
    "tf32x3": "Triton tl.dot tf32x3, K-major operands",
}


@triton.jit
def tf32x3_matmul_kernel(a_ptr, bt_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_bk,
                         stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B with B given as B^T [N, K]: both operands K-major, 3xTF32 tensor-core products."""
    pid = tl.program_id(0)
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
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = bt_ptr + offs_n[:, None] * stride_bn + offs_k[None, :] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=(offs_n[:, None] < N) & k_ok[None, :], other=0.0)
        acc = tl.dot(a, tl.trans(b), acc, input_precision="tf32x3")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def tf32x3_matmul(a: Any, bt: Any, out: Any, config: dict[str, int] | None = None) -> Any:
    """out = a @ bt^T with 3xTF32 (a [M, K], bt [N, K], both K-contiguous)."""
    cfg = dict(TF32X3_CONFIG, **(config or {}))
    M, K = a.shape
    N = bt.shape[0]
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    tf32x3_matmul_kernel[grid](a, bt, out, M, N, K, a.stride(0), a.stride(1), bt.stride(0), bt.stride(1),
                           out.stride(0), out.stride(1), **cfg)
    return out


def cublas_precision(torch: Any, precision: str) -> Callable[[], None]:
    """Set cuBLAS fp32 matmuls to ``precision`` ("ieee" or "tf32"); returns the restore function."""
    import warnings

    matmul = torch.backends.cuda.matmul
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            old = matmul.fp32_precision
            matmul.fp32_precision = precision
            return lambda: setattr(matmul, "fp32_precision", old)
        except (AttributeError, RuntimeError, ValueError):
            pass
        old_tf32, old_precision = matmul.allow_tf32, torch.get_float32_matmul_precision()
        matmul.allow_tf32 = precision == "tf32"
        torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")

    def restore() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            matmul.allow_tf32 = old_tf32
            torch.set_float32_matmul_precision(old_precision)

    return restore


def rel_err(out: Any, ref64: Any) -> float:
    """||out - ref|| / ||ref|| in fp64."""
    return float((out.double() - ref64).norm() / ref64.norm())


def time_ms(torch: Any, run: Callable[[], Any], warmup: int, trials: int,
            flush: Any = None) -> list[float]:
    """Per-call CUDA-event times (ms) of ``run()``; L2 flushed before each call when given."""
    from kernelrag.verify.timing import clock_functions

    event_cls, record, elapsed, sync = clock_functions()
    for _ in range(warmup):
        run()
    sync()
    times = []
    for _ in range(trials):
        if flush is not None:
            flush.zero_()
        start, end = event_cls(enable_timing=True), event_cls(enable_timing=True)
        record(start)
        run()
        record(end)
        sync()
        times.append(elapsed(start, end))
    return times


def measure_fp32_paths(n: int, warmup: int = 2, trials: int = 10, device: Any = None,
                       paths: tuple[str, ...] = ("ieee", "tf32", "tf32x3")) -> dict[str, dict[str, Any]]:
    """``{path: {"tflops", "median_ms", "iqr_ms", "trials", "rel_err", "how"}}`` at n^3."""
    import torch

    from kernelrag.verify.timing import summarize

    dev = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device=dev).manual_seed(1234)
    a = torch.randn(n, n, device=dev, dtype=torch.float32, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=torch.float32, generator=gen)
    bt = b.t().contiguous()                       # B K-major for the tensor-core path
    ref64 = a.double() @ b.double()
    out = torch.empty(n, n, device=dev, dtype=torch.float32)
    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
    flush = torch.empty(max(256 * 1024**2, 4 * l2), dtype=torch.uint8, device=dev)
    results: dict[str, dict[str, Any]] = {}
    try:
        for path in paths:
            if path == "tf32x3":
                run = functools.partial(tf32x3_matmul, a, bt, out)
                restore = lambda: None   # noqa: E731 - Triton's path ignores the cuBLAS flags
            else:
                restore = cublas_precision(torch, path)
                run = functools.partial(torch.matmul, a, b, out=out)
            try:
                stats = summarize(time_ms(torch, run, warmup, trials, flush))
                run()
                torch.cuda.synchronize()
                err = rel_err(out, ref64)
            finally:
                restore()
            results[path] = {"tflops": 2 * n**3 / (stats["median_ms"] * 1e-3) / 1e12, **stats,
                             "rel_err": err, "how": PATH_HOW[path], "n": n}
    finally:
        del a, b, bt, ref64, out, flush
        torch.cuda.empty_cache()
    return results
