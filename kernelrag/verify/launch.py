"""Proof that the candidate's own kernels did the work (hacks 5 and 6 of the threat model).

One call of the candidate runs under torch.profiler after a warm-up; every GPU kernel
it caused is classified as *custom* (one of the candidate's @triton.jit functions or
CUDA ``__global__`` kernels, matched by name), *torch* (aten, cuBLAS, cuDNN, CUTLASS,
Inductor-generated Triton, memcpy/memset) or *other*. A decoy kernel that is defined
but never launched, or a PyTorch op reached through ``getattr`` doing the real work,
shows as ``launched=False`` or a tiny ``custom_share``.

Kernel names: Triton names a kernel after its jit function (older releases append a
signature suffix such as ``_0d1d2d``); the profiler shows CUDA C++ kernels demangled
(``void my_kernel<float>(float const*, ...)``).
"""
from __future__ import annotations

import ast
import inspect
import re
from typing import Any, Callable, Iterable

MIN_CUSTOM_SHARE = 0.5   # below this share of GPU time in custom kernels, the work is PyTorch's

# Substrings (lower case) of kernels that PyTorch or a vendor library launches.
TORCH_MARKERS = (
    "at::native", "at::cuda", "at_cuda_detail", "c10::", "cublas", "cutlass", "xmma", "nvjet",
    "ampere_", "turing_", "volta_", "hopper_", "sm80_", "sm86_", "sm89_", "sm90_", "sm100_",
    "cudnn", "cufft", "curand", "cusparse", "gemm", "gemv", "elementwise_kernel",
    "vectorized_elementwise", "unrolled_elementwise", "reduce_kernel", "softmax_warp",
    "cunn_", "splitkreduce", "memcpy", "memset", "flash_fwd", "flash_bwd", "fmha",
    "pytorch_flash", "cub::", "thrust::", "nccl", "indexselect", "index_elementwise",
    "layer_norm_kernel", "radixsort", "distribution_elementwise", "triu_tril", "catarraybatched",
)
# Kernels that torch.compile (Inductor) generates are Triton kernels, but not the candidate's.
INDUCTOR_NAME = re.compile(r"^triton_(poi|red|per|tem|for|unk|mm|bmm|cat|scan|sort)_")
_CUDA_GLOBAL = re.compile(
    r"__global__\s+(?:(?:static|inline|__inline__|__forceinline__|extern\s+\"C\")\s+)*void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\("
)
_PROFILER_OK: bool | None = None


class _CandidateFailed(Exception):
    """The candidate raised inside the profiled call (its exception is the cause)."""


def kernel_names_in_source(source: str) -> set[str]:
    """Names of the @triton.jit functions and CUDA ``__global__`` kernels defined in ``source``."""
    names: set[str] = set(_CUDA_GLOBAL.findall(source or ""))
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        names.update(re.findall(r"@(?:triton\.)?jit\b[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)", source or ""))
        return names
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                label = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if label == "jit":
                    names.add(node.name)
    return names


def classify_kernel(name: str, custom_names: Iterable[str] = ()) -> str:
    """``"custom"``, ``"torch"`` or ``"other"`` for one GPU kernel name.

    With no known custom names (nothing to match against), a kernel that carries no
    PyTorch / library marker is taken to be custom.
    """
    custom_names = [n for n in custom_names if n]
    for custom in custom_names:
        if _name_matches(name, custom):
            return "custom"
    lowered = name.lower()
    if INDUCTOR_NAME.match(name) or any(marker in lowered for marker in TORCH_MARKERS):
        return "torch"
    return "other" if custom_names else "custom"


def discover_triton_names(fn: Any) -> set[str]:
    """Triton kernels visible from ``fn``: jit functions in the globals of its module.

    ``fn`` may be a bound method (``model.forward``), an ``nn.Module`` or a closure
    over one. Candidates loaded from a file need not be in ``sys.modules``: the
    forward function's ``__globals__`` is the module's namespace.
    """
    names: set[str] = set()
    for namespace in _namespaces(fn):
        for value in list(namespace.values()):
            kernel = _triton_function_name(value)
            if kernel:
                names.add(kernel)
    return names


def launch_proof(fn: Callable[..., Any], inputs: Any, *, custom_names: Iterable[str] | None = None,
                 source: str | None = None, warmup: int = 2) -> dict[str, Any]:
    """Profile one call of ``fn(*inputs)`` after ``warmup`` calls; classify its GPU kernels.

    Returns ``{launched, kernel_names, custom_kernels, torch_kernels, other_kernels,
    custom_share, custom_ms, total_ms, known_custom_names, warnings, blocking}``.
    ``launched`` is None (with a warning) when the profiler could not say. Exceptions
    raised by ``fn`` itself propagate: the caller turns them into a verdict.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} must be a non-negative int")
    import torch

    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    known = set(custom_names or ()) | kernel_names_in_source(source or "") | discover_triton_names(fn)
    result: dict[str, Any] = {
        "launched": None, "kernel_names": [], "custom_kernels": [], "torch_kernels": [],
        "other_kernels": [], "custom_share": None, "custom_ms": None, "total_ms": None,
        "known_custom_names": sorted(known), "warnings": [], "blocking": [],
    }
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize()
        ok, why = _profiler_works(torch)
        if not ok:
            result["warnings"].append(f"launch proof unavailable: {why}")
            return result
        try:
            kernels = _profile_kernels(torch, fn, args)
        except _CandidateFailed as failed:
            raise failed.__cause__ from None
        except Exception as exc:  # the profiler, not the candidate, failed: say so, do not guess
            result["warnings"].append(f"launch proof unavailable: torch.profiler failed ({type(exc).__name__}: {exc})")
            return result
    return _summarize(kernels, known, result)


def _summarize(kernels: list[tuple[str, float]], known: set[str], result: dict[str, Any]) -> dict[str, Any]:
    """Fill ``result`` from (kernel name, duration in us) pairs."""
    time_us = {"custom": 0.0, "torch": 0.0, "other": 0.0}
    for name, duration_us in kernels:
        kind = classify_kernel(name, known)
        time_us[kind] += max(duration_us, 0.0)
        if name not in result["kernel_names"]:
            result["kernel_names"].append(name)
        bucket = result[f"{kind}_kernels"]
        if name not in bucket:
            bucket.append(name)
    total_us = sum(time_us.values())
    result["custom_ms"] = time_us["custom"] / 1e3
    result["total_ms"] = total_us / 1e3
    result["custom_share"] = time_us["custom"] / total_us if total_us > 0 else 0.0
    result["launched"] = bool(result["custom_kernels"])
    if result["other_kernels"]:
        result["warnings"].append(
            "kernels neither the candidate's nor known PyTorch ones: " + ", ".join(result["other_kernels"][:5])
        )
    if not result["launched"]:
        ran = ", ".join(_short(n) for n in result["kernel_names"][:4]) or "no GPU kernel at all"
        names = ", ".join(sorted(known)) or "none found"
        result["blocking"].append(
            f"no custom kernel launched (candidate kernels: {names}); the GPU ran {ran}: "
            "a decoy kernel, or a PyTorch op doing the work"
        )
    elif result["custom_share"] < MIN_CUSTOM_SHARE:
        result["blocking"].append(
            f"custom kernels took only {100 * result['custom_share']:.0f}% of GPU time; PyTorch kernels "
            f"({', '.join(_short(n) for n in result['torch_kernels'][:3])}) did the rest"
        )
    return result


def _profile_kernels(torch: Any, fn: Callable[..., Any], args: tuple) -> list[tuple[str, float]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        try:
            fn(*args)
        except Exception as exc:
            raise _CandidateFailed() from exc
        torch.cuda.synchronize()   # device-wide: kernels on side streams are counted too
    return _device_kernels(prof.events())


def _device_kernels(events: Iterable[Any]) -> list[tuple[str, float]]:
    """(name, duration us) of the GPU-side events among a profiler's FunctionEvents."""
    from torch.autograd import DeviceType

    out = []
    for event in events or ():
        if getattr(event, "device_type", None) != DeviceType.CUDA:
            continue
        if getattr(event, "is_user_annotation", False):
            continue
        name = getattr(event, "name", "") or ""
        if name in ("gpu_user_annotation",):
            continue
        time_range = getattr(event, "time_range", None)
        duration = float(time_range.elapsed_us()) if time_range is not None else 0.0
        out.append((name, duration))
    return out


def _profiler_works(torch: Any) -> tuple[bool, str]:
    """Whether torch.profiler sees GPU kernels here (a known op must show up); cached per process."""
    global _PROFILER_OK
    if _PROFILER_OK is None:
        try:
            from torch.profiler import ProfilerActivity, profile

            probe = torch.ones(4096, device="cuda")
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                probe.mul_(2.0)
                torch.cuda.synchronize()
            _PROFILER_OK = bool(_device_kernels(prof.events()))
        except Exception:  # CUPTI missing or refused: the proof cannot be made here
            _PROFILER_OK = False
    if _PROFILER_OK:
        return True, ""
    return False, "torch.profiler records no GPU kernels on this machine (CUPTI unavailable?)"


def _name_matches(kernel: str, custom: str) -> bool:
    if kernel == custom:
        return True
    escaped = re.escape(custom)
    if re.fullmatch(escaped + r"_[0-9][0-9a-z]*", kernel):      # old Triton signature suffix
        return True
    return re.search(r"(^|[\s:*&])" + escaped + r"\s*[<(]", kernel) is not None   # demangled C++


def _namespaces(fn: Any, depth: int = 0) -> list[dict]:
    if depth > 2 or fn is None:
        return []
    spaces: list[dict] = []
    func = getattr(fn, "__func__", fn)
    owner = getattr(fn, "__self__", None)
    if isinstance(getattr(func, "__globals__", None), dict):
        spaces.append(func.__globals__)
    for obj in (owner, fn):
        forward = getattr(type(obj), "forward", None) if obj is not None else None
        if isinstance(getattr(forward, "__globals__", None), dict):
            spaces.append(forward.__globals__)
    for cell in getattr(func, "__closure__", None) or ():
        try:
            spaces.extend(_namespaces(cell.cell_contents, depth + 1))
        except ValueError:   # empty cell
            continue
    unique, seen = [], set()
    for space in spaces:
        if id(space) not in seen:
            seen.add(id(space))
            unique.append(space)
    return unique


def _triton_function_name(value: Any) -> str | None:
    """The Python function name behind a Triton jit/autotune/heuristics object, else None."""
    try:
        from triton.runtime.jit import KernelInterface
    except Exception:
        return None
    if not isinstance(value, KernelInterface):
        return None
    inner = value
    for _ in range(8):   # Autotuner -> Heuristics -> JITFunction -> python function
        if inspect.isfunction(inner):
            break
        nxt = getattr(inner, "fn", None)
        if nxt is None:
            break
        inner = nxt
    return getattr(inner, "__name__", None)


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."
