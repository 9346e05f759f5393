"""Speed of light: how close a measured time is to the floor set by bytes and FLOPs.

The floor is the larger of two times: the memory floor of the minimum bytes, and the
FLOPs over the measured matrix rate for the task's dtype. A time under the floor is
physically impossible, so achieved rates above a measured ceiling are flagged as a bug
(wrong byte count) or a hack (work hidden from the timer).

Memory model: a byte read costs 1/read (a measured read-only sum) and a byte written
2/copy - 1/read (so a copy's N + N bytes cost 2N/copy), giving, for R >= W bytes read and
written, ``floor = 2*W/copy + (R - W)/read``: a reduction's floor is R/read, a copy's is
unchanged. With W > R, no split or no read ceiling, all bytes are priced at copy bandwidth.

Standard library only (tensors are duck-typed), so it can be tested anywhere.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

from kernelrag.verify.precision import fp32_ceiling

OVER_CEILING = 1.05          # achieved / measured ceiling above this is impossible
REVIEW_SPEEDUP = 10.0        # speedups above this go to review, never straight into memory
REVIEW_FRAC_ROOFLINE = 0.9   # so do times within 10% of the floor

# Which measured compute ceiling bounds a task of each dtype. fp16 runs on the same
# tensor cores at the same rate as bf16 on Hopper. fp32 tasks get the fastest measured
# precision path whose error passes the task's tolerance (precision.fp32_ceiling: 3xTF32
# passes fp32 tolerances, plain TF32 does not), so a kernel that silently uses TF32 can
# still show up as "over the ceiling".
_COMPUTE_KEY = {"bfloat16": "bf16_tflops", "float16": "bf16_tflops", "float32": "fp32_tflops"}
_DTYPE_ALIASES = {
    "bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
    "float": "float32", "fp64": "float64", "double": "float64",
}


def normalize_dtype(dtype: Any) -> str:
    """``torch.float32`` / ``"fp32"`` / ``"float32"`` -> ``"float32"``."""
    if dtype is None:
        raise ValueError("dtype is None; pass the task's dtype, e.g. 'float32' or 'bfloat16'")
    name = str(dtype).strip().lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _DTYPE_ALIASES.get(name, name)


def compute_ceiling_tflops(ceilings: dict[str, Any], dtype: Any) -> tuple[float | None, str | None]:
    """(measured TFLOP/s, the ceilings key it came from) for ``dtype``; (None, None) if unmeasured."""
    key = _COMPUTE_KEY.get(normalize_dtype(dtype))
    if key is None:
        return None, None
    value = ceilings.get(key)
    if not _positive_number(value):
        return None, key
    return float(value), key


def honest_ceiling(ceilings: dict[str, Any], dtype: Any,
                   rel_norm_tol: float | None = None) -> tuple[float | None, str | None]:
    """(TFLOP/s, a name for the verdict) of the compute ceiling that bounds a task.

    fp32: the fastest measured precision path that passes ``rel_norm_tol`` (the task's
    relative-norm tolerance); other dtypes: their measured matrix rate.
    """
    name = normalize_dtype(dtype)
    if name == "float32":
        return fp32_ceiling(ceilings, rel_norm_tol)
    peak, key = compute_ceiling_tflops(ceilings, name)
    if peak is None:
        return None, None
    label = {"bf16_tflops": "bf16 tensor cores (torch.matmul, measured)"}.get(key, key)
    return peak, label


def memory_floor_s(n_bytes: int | float, ceilings: dict[str, Any], bytes_read: int | float | None = None,
                   bytes_written: int | float | None = None) -> tuple[float | None, str | None]:
    """(seconds, the ceiling(s) used, named) for moving ``n_bytes`` (the module docstring's
    model); (None, None) without a measured copy bandwidth. The split is used only when
    both halves are given, sum to ``n_bytes`` and a read bandwidth was measured."""
    copy_gbps, read_gbps = ceilings.get("copy_gbps"), ceilings.get("read_gbps")
    if not _positive_number(copy_gbps):
        return None, None
    copy_label = f"measured copy {copy_gbps:.0f} GB/s (reads + writes)"
    split = (bytes_read is not None and bytes_written is not None
             and math.isclose(bytes_read + bytes_written, n_bytes, rel_tol=1e-9))
    # W > R lies outside the two measurements (the fitted write cost would exceed copy's);
    # a read ceiling at or below copy's says nothing faster than a copy: both price at copy
    if not split or not _positive_number(read_gbps) or read_gbps <= copy_gbps or bytes_read <= bytes_written:
        return n_bytes / (copy_gbps * 1e9), copy_label
    excess = bytes_read - bytes_written                     # reads not paired with a write
    seconds = 2 * bytes_written / (copy_gbps * 1e9) + excess / (read_gbps * 1e9)
    if not bytes_written:
        return seconds, f"measured read {read_gbps:.0f} GB/s (reads only)"
    return seconds, f"measured read {read_gbps:.0f} GB/s (reads past the writes) + {copy_label} (the rest)"


def roofline(flops: int | float | None, bytes: int | float | None, time_ms: float,
             ceilings: dict[str, Any], dtype: Any = "bfloat16",
             rel_norm_tol: float | None = None, *, bytes_read: int | float | None = None,
             bytes_written: int | float | None = None) -> dict[str, Any]:
    """Achieved rates and the share of the speed-of-light floor reached.

    ``flops`` and ``bytes`` are the task's declared counts for one call (None when the
    task does not declare one; 0 FLOPs is a pure data-movement task). ``time_ms`` is
    the measured median time of one call. ``ceilings`` is ``get_ceilings(...)``'s dict.
    ``rel_norm_tol``: the task's relative-norm tolerance, which picks the fp32 precision
    path that bounds an fp32 task (``honest_ceiling``); ``out["ceiling"]`` names it.
    ``bytes_read`` / ``bytes_written``: ``bytes`` split (``counting.Counts``), which prices
    reads at the measured read bandwidth (``memory_floor_s``); ``out["memory_ceiling"]``
    names what the memory floor used. ``frac_bandwidth`` is memory floor / time.
    """
    n_bytes = bytes  # the contract names the argument ``bytes``
    for name, value in (("flops", flops), ("bytes", n_bytes), ("bytes_read", bytes_read),
                        ("bytes_written", bytes_written)):
        _check_count(name, value)
    if not _positive_number(time_ms):
        raise ValueError(f"time_ms={time_ms!r} must be a positive number of milliseconds")
    out: dict[str, Any] = {
        "achieved_gbps": None, "achieved_tflops": None, "frac_bandwidth": None,
        "frac_compute": None, "memory_floor_ms": None, "compute_floor_ms": None,
        "floor_ms": None, "frac_roofline": None, "bound": None,
        "dtype": normalize_dtype(dtype), "ceiling": None, "memory_ceiling": None, "warnings": [],
    }
    warnings: list[str] = out["warnings"]
    seconds = time_ms * 1e-3
    if n_bytes is not None:
        out["achieved_gbps"] = n_bytes / seconds / 1e9
        floor_s, out["memory_ceiling"] = memory_floor_s(n_bytes, ceilings, bytes_read, bytes_written)
        if floor_s is not None:
            out["memory_floor_ms"] = floor_s * 1e3
            out["frac_bandwidth"] = floor_s / seconds
            if out["frac_bandwidth"] > OVER_CEILING:
                roof_gbps = n_bytes / floor_s / 1e9 if floor_s > 0 else 0.0
                named = (f"the measured copy ceiling {roof_gbps:.0f} GB/s"
                         if out["memory_ceiling"].startswith("measured copy")
                         else f"the measured ceiling for its reads and writes, {roof_gbps:.0f} GB/s "
                              f"({out['memory_ceiling']})")
                warnings.append(
                    f"achieved {out['achieved_gbps']:.0f} GB/s exceeds {named}: a bug (are the declared "
                    "bytes right?) or a hack (work hidden from the timer, inputs served from cache)"
                )
        else:
            warnings.append("no measured copy bandwidth in the ceilings: memory floor not counted")
    if flops is not None:
        out["achieved_tflops"] = flops / seconds / 1e12
        peak, label = honest_ceiling(ceilings, dtype, rel_norm_tol)
        if peak is not None:
            out["ceiling"] = f"{label}: {peak:.1f} TFLOP/s"
            out["frac_compute"] = out["achieved_tflops"] / peak
            out["compute_floor_ms"] = flops / (peak * 1e12) * 1e3
            if out["frac_compute"] > OVER_CEILING:
                hint = " (TF32 or a downcast inside an fp32 task?)" if out["dtype"] == "float32" else ""
                warnings.append(
                    f"achieved {out['achieved_tflops']:.1f} TFLOP/s exceeds the measured {out['dtype']} "
                    f"ceiling, {label}, {peak:.1f} TFLOP/s: a bug (are the declared FLOPs right?) or a hack{hint}"
                )
        elif flops > 0:
            warnings.append(f"no measured compute ceiling for {out['dtype']}: compute floor not counted")
    terms = [t for t in (out["memory_floor_ms"], out["compute_floor_ms"]) if t is not None]
    if not terms:
        if n_bytes is None and flops is None:
            warnings.append("the task declares neither get_flops nor get_bytes: no roofline")
        return out
    out["floor_ms"] = max(terms)
    out["frac_roofline"] = out["floor_ms"] / time_ms
    memory_ms = out["memory_floor_ms"] or 0.0
    compute_ms = out["compute_floor_ms"] or 0.0
    out["bound"] = "memory" if memory_ms >= compute_ms else "compute"
    return out


def review_flags(speedup_vs_eager: float | None, speedup_vs_compile: float | None,
                 frac_roofline: float | None) -> list[str]:
    """Reasons a result needs a human look before it may be stored as a skill."""
    flags = []
    for label, speedup in (("eager", speedup_vs_eager), ("torch.compile", speedup_vs_compile)):
        if _finite(speedup) and speedup > REVIEW_SPEEDUP:
            flags.append(f"speedup {speedup:.1f}x vs {label} is over {REVIEW_SPEEDUP:.0f}x: flag for review")
    if _finite(frac_roofline) and frac_roofline > REVIEW_FRAC_ROOFLINE:
        flags.append(
            f"time is within {100 * (1 - REVIEW_FRAC_ROOFLINE):.0f}% of the roofline floor "
            f"(frac_roofline {frac_roofline:.2f}): flag for review"
        )
    return flags


# ---- counting helpers ------------------------------------------------------------

def count_bytes(obj: Any) -> int:
    """Bytes held by every tensor in ``obj`` (a tensor, or nested tuples/lists/dicts of them)."""
    if hasattr(obj, "numel") and hasattr(obj, "element_size"):
        return int(obj.numel()) * int(obj.element_size())
    if isinstance(obj, dict):
        return sum(count_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(count_bytes(v) for v in obj)
    return 0


def io_bytes(inputs: Any, outputs: Any) -> int:
    """Minimum bytes moved by one call: each input read once, each output written once."""
    return count_bytes(inputs) + count_bytes(outputs)


def matmul_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """FLOPs of ``batch`` products of (m x k) by (k x n): one multiply and one add each."""
    for name, value in (("m", m), ("n", n), ("k", k), ("batch", batch)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}={value!r} must be a non-negative int")
    return 2 * int(batch) * int(m) * int(n) * int(k)


def elementwise_flops(numel: int, flops_per_element: int | float = 1) -> int:
    """FLOPs of an elementwise op: ``flops_per_element`` operations on each of ``numel`` elements."""
    if not isinstance(numel, numbers.Integral) or isinstance(numel, bool) or numel < 0:
        raise ValueError(f"numel={numel!r} must be a non-negative int")
    if not _finite(flops_per_element) or flops_per_element < 0:
        raise ValueError(f"flops_per_element={flops_per_element!r} must be a non-negative number")
    return int(round(numel * flops_per_element))


def _check_count(name: str, value: Any) -> None:
    if value is None:
        return
    if not _finite(value) or value < 0:
        raise ValueError(f"{name}={value!r} must be a non-negative number or None (undeclared)")


def _finite(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _positive_number(value: Any) -> bool:
    return _finite(value) and value > 0
