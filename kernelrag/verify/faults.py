"""What went wrong in a candidate, as its author needs to read it: the trimmed
traceback, and the kind of failure (compile error, crash, not checkable, runtime)."""
from __future__ import annotations

import os
import subprocess
import traceback
from pathlib import Path
from typing import Callable


def error_text(exc: BaseException, candidate_path: str = "") -> str:
    """The traceback as the candidate's author needs it: their frames, then the error.

    Frames inside the verifier and torch say nothing to the author and are dropped
    (the last two library frames are kept: Triton's compile errors point there).
    """
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if candidate_path and f.filename == candidate_path]
    tail = [f for f in frames[-2:] if f not in own and "kernelrag/verify" not in f.filename
            and not f.filename.startswith("<frozen")]
    lines = ["Traceback (candidate frames, then where it failed):\n"]
    lines += traceback.format_list(own + tail)
    lines += traceback.format_exception_only(type(exc), exc)
    text = "".join(lines)
    return (text.replace(candidate_path, "candidate.py") if candidate_path else text)[-6000:]


# A CUDA out-of-memory error is the candidate's own only when it held this share of the GPU
OWN_MEMORY_SHARE = 0.5


# How an exception's text says the GPU ran out of memory: the caching allocator's
# OutOfMemoryError, and the CUDA runtime's own cudaErrorMemoryAllocation, which torch raises as
# an AcceleratorError ("CUDA error: out of memory") where a call allocates outside the caching
# allocator (an H100 suite run, 2026-12-07: two tasks' get_inputs while four others held the GPU)
OUT_OF_MEMORY_MARKS = ("OutOfMemoryError", "CUDA out of memory", "CUDA error: out of memory",
                       "cudaErrorMemoryAllocation")


def out_of_memory(error: object) -> bool:
    """The error (an exception or its text) says the GPU ran out of memory."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return any(mark in text for mark in OUT_OF_MEMORY_MARKS)


def gpu_memory_short(exc: BaseException, torch: object) -> str | None:
    """Why a CUDA out-of-memory error is not the candidate's failure: other processes held
    the memory (verifications of other tasks share the GPU). None for any other error, or
    when this process itself held at least ``OWN_MEMORY_SHARE`` of the GPU."""
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if not (oom is not None and isinstance(exc, oom) or out_of_memory(exc)):
        return None
    try:
        free_b, total_b = torch.cuda.mem_get_info()
        mine_b = torch.cuda.memory_reserved()
    except Exception:  # noqa: BLE001 - a context too broken to ask: the candidate's failure
        return None
    if mine_b >= OWN_MEMORY_SHARE * total_b:
        return None
    gib = 1 << 30
    return (f"GPU memory short: this process held {mine_b / gib:.1f} GiB of {total_b / gib:.0f} GiB, "
            f"{free_b / gib:.1f} GiB free; other processes held the rest")


class InputsDiffer(RuntimeError):
    """This process generated other inputs than the reference process: the task is not seedable."""


def classify(exc: BaseException, torch: object = None) -> str:
    """gpu_memory (CUDA out of memory while other processes held most of it: not the
    candidate's failure; needs ``torch`` to ask), compile_error (Triton compilation), crashed
    (CUDA context broken), resource_limit (host memory cap), not_checkable or runtime."""
    if isinstance(exc, InputsDiffer):
        return "not_checkable"
    if torch is not None and gpu_memory_short(exc, torch):
        return "gpu_memory"
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError) or "can't allocate memory" in text:
        return "resource_limit"         # the host-memory cap of the sandbox
    if any(s in text for s in ("illegal memory access", "CUDA error", "device-side assert",
                               "misaligned address", "unspecified launch failure")):
        return "crashed"
    if type(exc).__module__.startswith("triton") or "CompilationError" in type(exc).__name__:
        return "compile_error"
    return "runtime"


def gpu_holders(query: Callable[[], str] | None = None, proc_root: str = "/proc") -> str | None:
    """Who holds the GPU's memory, largest first, for a warning: each compute process's MiB
    (``nvidia-smi --query-compute-apps``) and what it runs (the ``-m`` module of a kernelrag
    process, else its program's name); None where nvidia-smi cannot say. A verification
    alone in its session that still ran short names what else held the memory this way."""
    try:
        text = (query or _query_compute_apps)()
    except (OSError, subprocess.SubprocessError):
        return None
    rows = []
    for line in text.splitlines():
        pid, _, mib = (part.strip() for part in line.partition(","))
        if pid.isdigit() and mib.isdigit():
            rows.append((int(mib), int(pid)))
    if not rows:
        return None
    return ", ".join(f"{mib / 1024:.1f} GiB pid {pid} ({_process_role(pid, proc_root)})"
                     for mib, pid in sorted(rows, reverse=True))


def _query_compute_apps() -> str:
    return subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=10, check=True).stdout


def _process_role(pid: int, proc_root: str) -> str:
    try:
        args = Path(proc_root, str(pid), "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "not visible here"
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1]
    return os.path.basename(args[0]) if args and args[0] else "unknown"
