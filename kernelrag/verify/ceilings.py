"""The GPU's own ceilings, measured on the machine itself and cached per GPU and driver.

Achieved rates are reported against what this card really does, never against a
datasheet: copy bandwidth from a large device-to-device copy (bytes read plus bytes
written over time), read bandwidth from a sum over a buffer of the same size (bytes
read over time: a read-only stream runs faster than a copy) and matrix rates from
large products on random data (zeros run faster than real data on Hopper). fp32
products are measured on each precision path (``gemm_paths``: cuBLAS IEEE fp32, cuBLAS
TF32, Triton 3xTF32) with each path's error against fp64, so an fp32 task is judged
against the fastest path that passes its tolerance. One measurement takes about a
second; the result is cached as JSON under ``cache_dir/ceilings-<gpu-slug>.json``
and measured again when the driver (or ``CACHE_VERSION``) changes.

Standard library plus torch: this module runs on the GPU machine.
"""
from __future__ import annotations

import datetime
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from kernelrag.errors import KernelRAGError

CACHE_VERSION = 3                 # 2: fp32_paths (rate and error of each fp32 precision path); 3: read_gbps
COPY_BYTES = 2 * 1024**3          # one side of the copy; read + write moves twice this
COPY_WARMUP, COPY_TRIALS = 3, 20
READ_WARMUP, READ_TRIALS = 3, 20   # torch.sum over a buffer of the copy's size
BF16_N, BF16_WARMUP, BF16_TRIALS = 8192, 3, 10
FP32_N, FP32_WARMUP, FP32_TRIALS = 4096, 2, 10
REQUIRED_KEYS = ("gpu", "driver", "copy_gbps", "bf16_tflops", "fp32_tflops", "fp32_paths", "measured_at", "method")

_MEMO: dict[tuple[str, str], dict[str, Any]] = {}   # per process, for cache_dir=None


def slug(text: str) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200``: safe in a file name, stable across runs."""
    out = re.sub(r"[^a-z0-9.]+", "-", str(text).lower()).strip("-.")
    return out or "unknown"


def driver_version() -> str:
    """The NVIDIA driver version (``580.159.04``), or ``"unknown"`` when nothing says."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
        first = done.stdout.strip().splitlines()[0].strip() if done.stdout.strip() else ""
        if done.returncode == 0 and re.fullmatch(r"[0-9][0-9.]*", first):
            return first
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        match = re.search(r"Kernel Module\s+([0-9][0-9.]+)", text) or re.search(r"\s([0-9]{3}\.[0-9.]+)\s", text)
        if match:
            return match.group(1)
    except OSError:
        pass
    return "unknown"


def gpu_identity(device: Any = None) -> tuple[str, str]:
    """(GPU name, driver version) of ``device`` (default: the current CUDA device)."""
    import torch

    _require_cuda(torch)
    return torch.cuda.get_device_name(cuda_device(device)), driver_version()


@functools.lru_cache(maxsize=None)
def host_gpu() -> tuple[str, str] | None:
    """(name, driver) of GPU 0 from ``nvidia-smi``, once per process; None without one."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [r.split(",") for r in done.stdout.strip().splitlines()]
    if done.returncode != 0 or not rows or len(rows[0]) != 2:
        return None
    return rows[0][0].strip(), rows[0][1].strip()


_ENSURED: dict[str, dict[str, Any] | None] = {}
_ENSURE_LOCK = threading.Lock()


def ensure_cached(cache_dir: str | Path | None) -> dict[str, Any] | None:
    """This machine's ceilings, cached under ``cache_dir``; None when they could not be
    (the candidate then measures them itself).

    Called by the verifier's parent process before a candidate is timed. When the cache
    is missing or stale, the ceilings are measured in a new process that runs this module
    and nothing else (no task, no candidate code), once per parent process and folder.
    """
    if cache_dir is None:
        return None
    folder = str(cache_dir)
    with _ENSURE_LOCK:
        if folder not in _ENSURED:
            ident = host_gpu()
            cached = read_cache(cache_path(Path(folder), ident[0]), *ident) if ident else None
            if cached is None:
                ident = _measure_in_child(folder)
                cached = read_cache(cache_path(Path(folder), ident[0]), *ident) if ident else None
            _ENSURED[folder] = cached
        return _ENSURED[folder]


def _measure_in_child(folder: str) -> tuple[str, str] | None:
    from kernelrag.verify.isolation import base_env

    with tempfile.TemporaryDirectory(prefix="kernelrag-ceilings-") as home:
        try:
            done = subprocess.run([sys.executable, "-P", "-m", "kernelrag.verify.ceilings", folder],
                                  env=base_env("cuda", home), cwd=home, capture_output=True, text=True,
                                  timeout=600, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
    try:
        ident = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return (ident["gpu"], ident["driver"]) if done.returncode == 0 and isinstance(ident, dict) else None


def cache_path(cache_dir: Path, gpu: str) -> Path:
    return Path(cache_dir) / f"ceilings-{slug(gpu)}.json"


def read_cache(path: Path, gpu: str, driver: str) -> dict[str, Any] | None:
    """The cached ceilings at ``path`` if they are whole and belong to this GPU and driver."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return None
    if any(key not in data for key in REQUIRED_KEYS):
        return None
    if data["gpu"] != gpu or data["driver"] != driver:
        return None
    for key in ("copy_gbps", "bf16_tflops", "fp32_tflops", "read_gbps"):
        value = data.get(key)
        if key == "read_gbps" and value is None:
            continue          # optional: without it the roofline prices every byte at copy bandwidth
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            return None
    paths = data["fp32_paths"]
    if not isinstance(paths, dict) or not all(isinstance(p, dict) and "tflops" in p and "rel_err" in p
                                              for p in paths.values()):
        return None
    return data


def write_cache(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (temp file + rename), so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def get_ceilings(cache_dir: Path | str | None, *, refresh: bool = False, device: Any = None) -> dict[str, Any]:
    """Measured ceilings of the current GPU: ``{gpu, driver, copy_gbps, read_gbps,
    bf16_tflops, fp32_tflops, measured_at, method, ...}``.

    Measured once per GPU name and driver and cached under ``cache_dir``; with
    ``cache_dir=None`` the result is kept for the life of the process only.
    ``refresh=True`` measures again and overwrites the cache.
    """
    gpu, driver = gpu_identity(device)
    path = cache_path(Path(cache_dir), gpu) if cache_dir is not None else None
    if not refresh:
        if path is not None:
            cached = read_cache(path, gpu, driver)
            if cached is not None:
                return cached
        elif (gpu, driver) in _MEMO:
            return dict(_MEMO[(gpu, driver)])
    data = measure_ceilings(device, driver=driver)
    _MEMO[(gpu, driver)] = dict(data)
    if path is not None:
        try:
            write_cache(path, data)
        except OSError as exc:   # an unwritable cache costs a re-measure, not the verdict
            data["cache_error"] = f"could not write {path}: {exc}"
    return data


def measure_ceilings(device: Any = None, *, driver: str | None = None) -> dict[str, Any]:
    """Measure copy and read bandwidth, the bf16 matrix rate and each fp32 precision path
    now (a few seconds on an H200)."""
    import torch

    from kernelrag.verify.gemm_paths import measure_fp32_paths

    _require_cuda(torch)
    dev = cuda_device(device)
    props = torch.cuda.get_device_properties(dev)
    with torch.cuda.device(dev):
        copy_bytes = _copy_size(torch)
        copy_ms = _time_copy(torch, dev, copy_bytes)
        read_ms = _time_read(torch, dev, copy_bytes)
        bf16_ms = _time_matmul(torch, dev, torch.bfloat16, BF16_N, BF16_WARMUP, BF16_TRIALS)
        fp32_ms = _time_matmul(torch, dev, torch.float32, FP32_N, FP32_WARMUP, FP32_TRIALS)
        torch.cuda.empty_cache()
        fp32_paths = measure_fp32_paths(FP32_N, FP32_WARMUP, FP32_TRIALS, device=dev)
    return {
        "version": CACHE_VERSION,
        "gpu": props.name,
        "driver": driver if driver is not None else driver_version(),
        "copy_gbps": 2 * copy_bytes / (copy_ms * 1e-3) / 1e9,
        "read_gbps": copy_bytes / (read_ms * 1e-3) / 1e9,
        "bf16_tflops": 2 * BF16_N**3 / (bf16_ms * 1e-3) / 1e12,
        "fp32_tflops": 2 * FP32_N**3 / (fp32_ms * 1e-3) / 1e12,
        "fp32_paths": {name: {k: path[k] for k in ("tflops", "rel_err", "how", "median_ms", "iqr_ms", "trials")}
                       for name, path in fp32_paths.items()},
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "method": (
            f"copy: median of {COPY_TRIALS} device-to-device copies of {copy_bytes} bytes of random "
            f"fp32 after {COPY_WARMUP} warm-ups, counting bytes read + written; read: median of {READ_TRIALS} "
            f"torch.sum over the same {copy_bytes} bytes after {READ_WARMUP} warm-ups, counting bytes read; "
            f"bf16: median of "
            f"{BF16_TRIALS} torch.matmul {BF16_N}^3 on randn after {BF16_WARMUP} warm-ups; fp32: median "
            f"of {FP32_TRIALS} torch.matmul {FP32_N}^3 on randn with TF32 off after {FP32_WARMUP} "
            f"warm-ups; fp32_paths: the same {FP32_N}^3 product by cuBLAS fp32, cuBLAS TF32 and a Triton "
            "3xTF32 kernel (L2 flushed before each call), each with its relative error against fp64; "
            "CUDA events, clocks as found"
        ),
        "copy_bytes": copy_bytes,
        "sm_count": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
    }


def cuda_device(device: Any = None) -> Any:
    """``device`` (None, an index, ``"cuda"``, ``"cuda:1"``, a torch.device) as a CUDA torch.device."""
    import torch

    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if dev.type != "cuda":
        raise ValueError(f"device={device!r} is not a CUDA device; pass None, an index or 'cuda:N'")
    return torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())


def _require_cuda(torch: Any) -> None:
    if not torch.cuda.is_available():
        raise KernelRAGError(
            "no CUDA device: GPU ceilings can only be measured on a GPU machine; "
            "run there, or verify with device='cpu', which measures no time"
        )


def _copy_size(torch: Any) -> int:
    """COPY_BYTES, or less when the card has little free memory (two buffers must fit)."""
    free_bytes, _ = torch.cuda.mem_get_info()
    size = COPY_BYTES
    while size > 64 * 1024**2 and 2 * size > 0.6 * free_bytes:
        size //= 2
    return size


def _median_event_ms(torch: Any, run, warmup: int, trials: int) -> float:
    # The clock captured before any candidate loaded: a patched Event cannot skew the ceilings.
    from kernelrag.verify.timing import clock_functions

    event_cls, record, elapsed, sync = clock_functions()
    for _ in range(warmup):
        run()
    sync()
    pairs = [(event_cls(enable_timing=True), event_cls(enable_timing=True)) for _ in range(trials)]
    for start, end in pairs:
        record(start)
        run()
        record(end)
    sync()
    return statistics.median(elapsed(start, end) for start, end in pairs)


def _time_copy(torch: Any, dev: Any, copy_bytes: int) -> float:
    src = torch.rand(copy_bytes // 4, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    try:
        return _median_event_ms(torch, lambda: dst.copy_(src), COPY_WARMUP, COPY_TRIALS)
    finally:
        del src, dst


def _time_read(torch: Any, dev: Any, read_bytes: int) -> float:
    """A read-only stream: torch.sum of one buffer into a scalar (the output is 4 bytes)."""
    src = torch.rand(read_bytes // 4, device=dev, dtype=torch.float32)
    out = torch.empty((), device=dev, dtype=torch.float32)
    try:
        return _median_event_ms(torch, lambda: torch.sum(src, dim=0, out=out), READ_WARMUP, READ_TRIALS)
    finally:
        del src, out


def _time_matmul(torch: Any, dev: Any, dtype: Any, n: int, warmup: int, trials: int) -> float:
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    out = torch.empty(n, n, device=dev, dtype=dtype)
    restore = _true_fp32(torch)      # the fp32 ceiling is true fp32, never TF32
    try:
        return _median_event_ms(torch, lambda: torch.matmul(a, b, out=out), warmup, trials)
    finally:
        restore()
        del a, b, out


def _true_fp32(torch: Any):
    """Turn TF32 off for cuBLAS matmuls; return a function that restores the old setting
    (``gemm_paths.cublas_precision``, the one switch for both precision paths)."""
    from kernelrag.verify.gemm_paths import cublas_precision

    return cublas_precision(torch, "ieee")


def main(argv: list[str] | None = None) -> int:
    """``python -m kernelrag.verify.ceilings CACHE_DIR``: measure (or read) and cache; prints
    the GPU and driver as one JSON line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m kernelrag.verify.ceilings CACHE_DIR", file=sys.stderr)
        return 2
    data = get_ceilings(argv[0])
    if data.get("cache_error"):
        print(data["cache_error"], file=sys.stderr)
        return 1
    print(json.dumps({"gpu": data["gpu"], "driver": data["driver"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
