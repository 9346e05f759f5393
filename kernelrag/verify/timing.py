"""GPU timing that a candidate cannot fool: the candidate against eager and torch.compile.

Hacks 9, 11, 12, 17, 19 and 26 of the threat model (shared/VERIFY.md) are handled here:

- before each timed call the persisting-L2 limit is set to 0 and persisting lines are
  reset (``cudaDeviceSetLimit``/``cudaCtxResetPersistingL2Cache`` through libcudart), so a
  carve-out set by the candidate cannot keep its inputs resident through the flush;
- inputs are fresh every round when generating them is cheap (at most 20 ms), so no
  content repeats and a cache keyed by content never hits;

- every timed call starts with L2 flushed (a write of several times its size) and
  inputs rotated through slots whose contents are swapped between rounds, so neither
  a warm cache nor a result cached by pointer survives from one call to the next;
- candidate, eager and compile are interleaved round-robin (the order rotates each
  round), so clock drift and thermal state hit all three alike;
- each call is timed three ways: CUDA events on the current stream (``event``), the
  same start event to an event recorded after a device-wide synchronize (``synced``),
  and the host clock around call + synchronize (``wall``). Work left running on a side
  stream after the end event shows as ``synced`` - ``event`` above what the eager
  reference shows; a tampered event timer shows as ``wall`` - ``synced`` above eager's;
- the timer functions are captured when this module is imported and checked for
  replacement (``guard.tamper_check``); threads running candidate code are reported
  (``guard.foreign_threads``);
- the candidate's outputs are compared with the eager reference's on the same inputs
  (``tolerances.recheck_outputs``) in the first and last timed rounds and in about one
  round in RECHECK_ONE_IN of the others, drawn from the OS's random source after the
  round's calls have returned: a candidate cannot know which of its outputs will be
  looked at, so a candidate lazy in m rounds goes unseen with probability (3/4)**m
  (0.3% at m = 20). Every round was compared until 2026-12-02: a float64 comparison of
  2 GB outputs, about 27 kernels and 6 host syncs per 16M elements (an estimated ~45 ms
  a round), was most of the ~6.5 s for which a 4 GB task's timing held the H200 alone.

Import this module before the candidate: the captured timer functions are then the
real ones even if the candidate patches ``torch.cuda.Event`` or ``time`` later.
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

import torch

from kernelrag.errors import KernelRAGError
from kernelrag.verify.guard import (_library_thread, _provenance_problem, enumerate_threads, foreign_threads,
                                    tamper_check)
from kernelrag.verify.tolerances import merge_rechecks, recheck_outputs

__all__ = ["time_against_baselines", "clock_functions", "summarize"]

MIN_TRUSTED_ITERS = 100
FLUSH_MIN_BYTES = 256 * 1024**2   # at least four times the H200's 60 MB L2
FLUSH_L2_MULTIPLE = 4
INPUT_SLOTS, INPUT_POOL = 2, 3    # tensors the candidate sees / contents rotated through them
INPUT_MEMORY_SHARE = 0.3          # inputs may take at most this share of free device memory
AFTER_END_ABS_MS, AFTER_END_REL = 0.02, 0.25   # side-stream work threshold
HOST_GAP_ABS_MS, HOST_GAP_REL = 0.1, 0.5       # event-vs-wall threshold

# Captured now, before any candidate is imported (see the module docstring).
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_event_sync = torch.cuda.Event.synchronize
_sync = torch.cuda.synchronize
_current_stream = torch.cuda.current_stream
_set_stream = torch.cuda.set_stream
_is_available = torch.cuda.is_available
_urandom = os.urandom
RECHECK_ONE_IN = 4


def _rechecked(r: int, iters: int) -> bool:
    """Whether round ``r``'s outputs are compared: first, last, and one in RECHECK_ONE_IN
    others, by a byte from the OS drawn after the round (not predictable in-process)."""
    return r == 0 or r == iters - 1 or _urandom(1)[0] < 256 // RECHECK_ONE_IN


def summarize(samples_ms: list[float]) -> dict[str, Any]:
    """``{"median_ms", "iqr_ms", "trials"}`` of a list of per-call times."""
    data = [float(x) for x in samples_ms]
    if not data:
        raise ValueError("no timing samples to summarize")
    if len(data) == 1:
        return {"median_ms": data[0], "iqr_ms": 0.0, "trials": 1}
    q1, _, q3 = statistics.quantiles(data, n=4, method="inclusive")
    return {"median_ms": statistics.median(data), "iqr_ms": q3 - q1, "trials": len(data)}


def time_against_baselines(candidate_fn: Callable[..., Any], eager_fn: Callable[..., Any],
                           compile_fn: Callable[..., Any] | None, make_inputs: Callable[[], Any],
                           iters: int = 100, warmup: int = 10, *, atol: float | None = None,
                           rtol: float | None = None, rel_norm_tol: float | None = None,
                           flush_bytes: int | None = None, lean: bool = False) -> dict[str, Any]:
    """Time ``candidate_fn`` against ``eager_fn`` and ``compile_fn`` (None when torch.compile
    failed) on inputs from ``make_inputs()`` (a fresh tuple of CUDA tensors per call).

    Returns ``{"kernel": {median_ms, iqr_ms, trials}, "eager": {...}, "compile": {...} | None,
    "warnings": [...], "blocking": [...], "recheck": {...}, "wall_check": {...},
    "phases": {"warmup": s, "timing": s}}``.
    ``blocking`` lists the findings that must reject the candidate (side-stream or
    background work, tampered timers, foreign threads, outputs that differ during
    timing); every one of them is in ``warnings`` too. ``atol``/``rtol`` are the task's
    tolerances for the output re-check (without them only the relative-norm error and
    NaN/Inf agreement are checked). Exceptions raised by ``candidate_fn`` or
    ``eager_fn`` propagate; a failing ``compile_fn`` is dropped with a warning. ``lean``:
    the fewest input copies (1 slot, 2 contents), for a GPU whose memory others hold.
    """
    _validate(candidate_fn, eager_fn, compile_fn, make_inputs, iters, warmup)
    if not _is_available():
        raise KernelRAGError("no CUDA device: GPU timing needs a GPU; verify with device='cpu' to skip timing")
    warnings: list[str] = []
    blocking: list[str] = []
    tampered = tamper_check()
    if tampered:
        blocking.append("timer or checker function tampered with: " + "; ".join(tampered))
    stream = _current_stream()
    recheck_kwargs = {"atol": atol, "rtol": rtol}
    if rel_norm_tol is not None:
        recheck_kwargs["rel_norm_tol"] = rel_norm_tol
    runners = [("kernel", candidate_fn), ("eager", eager_fn)]
    if compile_fn is not None:
        runners.append(("compile", compile_fn))
    threads = _ThreadWatch(foreign_threads())
    phases = {"warmup": -_perf_counter()}
    with torch.no_grad():
        slots, pool, notes = _build_inputs(make_inputs, stream.device, lean)
        warnings += notes
        fresh = _fresh_is_cheap(make_inputs)
        l2_reset = _reset_persisting_l2()
        if not l2_reset:
            warnings.append("the persisting-L2 limit could not be reset (libcudart not reachable): a persisting "
                            "carve-out set by the candidate would survive the flush")
        flush = torch.empty(_flush_size(stream.device, flush_bytes), dtype=torch.uint8, device=stream.device)
        for i in range(max(1, warmup)):          # compilation, autotuning, module load: not timed
            for name, fn in list(runners):
                try:
                    threads.around(fn, slots[i % len(slots)]) if name == "kernel" else fn(*slots[i % len(slots)])
                except Exception as exc:
                    if name != "compile":
                        raise
                    runners.remove((name, fn))
                    warnings.append(f"torch.compile baseline failed in warm-up and is left out ({type(exc).__name__}: {exc})")
                _keep_stream(stream, name, blocking)
        _sync()
        phases["warmup"] += _perf_counter()
        phases["timing"] = -_perf_counter()
        samples = {name: {"event": [], "synced": [], "wall": []} for name, _ in runners}
        events = {name: tuple(_Event(enable_timing=True) for _ in range(3)) for name, _ in runners}
        rechecks = []
        for r in range(iters):
            k = r % len(slots)
            # fresh inputs every round where generating them is cheap (no content repeats, so a
            # cache keyed by content never hits); else contents rotated through the slots
            _load(slots[k], _as_args(make_inputs()) if fresh else pool[(r // len(slots) + k + 1) % len(pool)])
            shift = r % len(runners)
            outs = {}
            for name, fn in runners[shift:] + runners[:shift]:
                if l2_reset:
                    _reset_persisting_l2()
                try:
                    out, times = _timed_call(fn, slots[k], flush, stream, events[name],
                                             threads if name == "kernel" else None)
                except Exception as exc:
                    if name != "compile":
                        raise
                    runners = [x for x in runners if x[0] != "compile"]
                    samples.pop("compile")
                    warnings.append(f"torch.compile baseline failed while timed and is left out ({type(exc).__name__}: {exc})")
                    continue
                _keep_stream(stream, name, blocking)
                for key, value in zip(("event", "synced", "wall"), times):
                    samples[name][key].append(value)
                if name in ("kernel", "eager"):
                    outs[name] = out
            if _rechecked(r, iters):
                rechecks.append(recheck_outputs(outs["kernel"], outs["eager"], **recheck_kwargs))
            del outs
        del flush
    phases["timing"] += _perf_counter()
    result = _report(samples, rechecks, threads, iters, warnings, blocking, len(slots), len(pool))
    result["wall_check"].update(fresh_inputs_per_round=fresh, persisting_l2_reset=l2_reset)
    result["phases"] = phases          # wall seconds of the warm-up and of the timed rounds
    return result


FRESH_MAX_MS = 20.0          # generating one input set costs at most this: do it every round
CUDA_LIMIT_PERSISTING_L2 = 0x06
_CUDART: list = []


def _fresh_is_cheap(make_inputs) -> bool:
    t0 = _perf_counter()
    args = make_inputs()
    _sync()
    del args
    return (_perf_counter() - t0) * 1e3 <= FRESH_MAX_MS


def _cudart():
    """libcudart as loaded by torch (ctypes), or None."""
    if not _CUDART:
        import ctypes
        import glob
        import os
        import sys

        lib = None
        names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]
        for d in [os.path.join(os.path.dirname(torch.__file__), "lib")] + [
                os.path.join(p, "nvidia", "cuda_runtime", "lib") for p in sys.path]:
            names += sorted(glob.glob(os.path.join(d, "libcudart.so*")))
        for name in names:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        _CUDART.append(lib)
    return _CUDART[0]


def _reset_persisting_l2() -> bool:
    """Set the persisting-L2 limit to 0 and reset persisting lines (VERIFY.md 26); False if impossible."""
    import ctypes

    lib = _cudart()
    if lib is None:
        return False
    try:
        limit = lib.cudaDeviceSetLimit(ctypes.c_int(CUDA_LIMIT_PERSISTING_L2), ctypes.c_size_t(0))
        lines = lib.cudaCtxResetPersistingL2Cache()
    except AttributeError:
        return False
    return limit == 0 and lines == 0


def _report(samples, rechecks, threads, iters, warnings, blocking, n_slots, n_pool) -> dict[str, Any]:
    med = {name: {key: statistics.median(vals) for key, vals in parts.items()} for name, parts in samples.items()}
    k = med["kernel"]
    after_end = {name: m["synced"] - m["event"] for name, m in med.items()}
    host_gap = {name: m["wall"] - m["synced"] for name, m in med.items()}
    hidden_ms = after_end["kernel"] - after_end["eager"]
    kernel_key = "event"
    if hidden_ms > max(AFTER_END_ABS_MS, AFTER_END_REL * k["event"]):
        kernel_key = "synced"   # report the time including the hidden work
        blocking.append(
            f"side-stream or background work: the GPU was still busy {hidden_ms:.3f} ms after the "
            f"candidate's end event (eager: {after_end['eager']:.3f} ms), event time {k['event']:.3f} ms "
            f"vs {k['synced']:.3f} ms to a device-wide synchronize"
        )
    extra_host_ms = host_gap["kernel"] - host_gap["eager"]
    if extra_host_ms > max(HOST_GAP_ABS_MS, HOST_GAP_REL * k["synced"]):
        blocking.append(
            f"event time << synchronized wall time: {k['synced']:.3f} ms by events vs {k['wall']:.3f} ms "
            f"by the host clock ({extra_host_ms:.3f} ms more than eager's gap): timer tampering or "
            "work the events do not see"
        )
    threads.finish(blocking)
    late = [issue for issue in tamper_check() if issue not in " ".join(blocking)]
    if late:
        blocking.append("timer or checker function tampered with: " + "; ".join(late))
    recheck = merge_rechecks(rechecks)
    if not recheck["passed"]:
        blocking.append(
            f"outputs produced during timing differ from the reference on the same inputs "
            f"({recheck['failed_rounds']} of {recheck['rounds']} rounds; {recheck['detail']}): "
            "results cached or replayed across calls"
        )
    if iters < MIN_TRUSTED_ITERS:
        warnings.append(f"only {iters} timed iterations (fewer than {MIN_TRUSTED_ITERS}): the spread is less trustworthy")
    result = {
        "kernel": summarize(samples["kernel"][kernel_key]),
        "eager": summarize(samples["eager"]["event"]),
        "compile": summarize(samples["compile"]["event"]) if "compile" in samples else None,
        "warnings": blocking + [w for w in warnings if w not in blocking],
        "blocking": blocking,
        "recheck": recheck,
        "wall_check": {
            "rounds": iters, "rechecked_rounds": len(rechecks), "input_slots": n_slots, "input_contents": n_pool,
            "kernel_timed_by": kernel_key,
            **{f"{name}_{key}_ms": value for name, m in med.items() for key, value in m.items()},
            "kernel_after_end_ms": after_end["kernel"], "eager_after_end_ms": after_end["eager"],
            "kernel_host_gap_ms": host_gap["kernel"], "eager_host_gap_ms": host_gap["eager"],
            "threads": threads.summary(),
        },
    }
    return result


def _timed_call(fn, args, flush, stream, events, threads):
    """One call: flush L2, then (event ms, synced ms, wall ms) around ``fn(*args)``."""
    start, end, synced = events
    before = threads.snapshot() if threads is not None else None
    t0 = _perf_counter()
    flush.zero_()
    _record(start, stream)
    out = fn(*args)
    _record(end, stream)
    _sync()                       # device-wide: waits for every stream
    t1 = _perf_counter()
    _record(synced, stream)
    _event_sync(synced)
    if threads is not None:
        threads.check_after(before)
    return out, (_elapsed(start, end), _elapsed(start, synced), (t1 - t0) * 1e3)


class _ThreadWatch:
    """Threads running candidate code: present at the start, or started by a candidate call."""

    def __init__(self, at_start: list[str]):
        self.at_start = at_start
        self.started: list[str] = []
        self.max_count = len(enumerate_threads())

    def snapshot(self) -> set[int]:
        return {t.ident for t in enumerate_threads()}

    def check_after(self, before: set[int]) -> None:
        alive = enumerate_threads()
        self.max_count = max(self.max_count, len(alive))
        for t in alive:
            if t.ident in before or not t.is_alive() or _library_thread(t):
                continue
            label = f"{t.name} (started during a candidate call)"
            if label not in self.started:
                self.started.append(label)

    def around(self, fn, args):
        before = self.snapshot()
        out = fn(*args)
        self.check_after(before)
        return out

    def finish(self, blocking: list[str]) -> None:
        foreign = sorted(set(self.at_start) | set(foreign_threads()))
        if foreign:
            _add(blocking, "side-stream or background work: background thread(s) running candidate code: "
                 + ", ".join(foreign))
        if self.started:
            _add(blocking, "side-stream or background work: the candidate started thread(s) that outlive "
                 "its call: " + ", ".join(self.started))

    def summary(self) -> dict[str, Any]:
        return {"foreign_at_start": self.at_start, "started_by_candidate": self.started,
                "max_count": self.max_count}


def _keep_stream(stream, name: str, blocking: list[str]) -> None:
    """Put ``stream`` back if a call left another one current, and say so."""
    if _current_stream() != stream:
        _set_stream(stream)
        _add(blocking, f"side-stream or background work: the {name} call left another CUDA stream current")


def _add(messages: list[str], message: str) -> None:
    if message not in messages:
        messages.append(message)


def _validate(candidate_fn, eager_fn, compile_fn, make_inputs, iters, warmup) -> None:
    for name, value in (("candidate_fn", candidate_fn), ("eager_fn", eager_fn), ("make_inputs", make_inputs)):
        if not callable(value):
            raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    if compile_fn is not None and not callable(compile_fn):
        raise TypeError(f"compile_fn must be callable or None, got {type(compile_fn).__name__}")
    if not isinstance(iters, int) or isinstance(iters, bool) or iters < 1:
        raise ValueError(f"iters={iters!r} must be an int >= 1 ({MIN_TRUSTED_ITERS} or more for trusted numbers)")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} must be an int >= 0")


def _as_args(inputs: Any) -> tuple:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _signature(args: tuple) -> list:
    return [(tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else type(a).__name__ for a in args]


def _build_inputs(make_inputs, device, lean: bool = False) -> tuple[list[tuple], list[tuple], list[str]]:
    """Input slots (the tensors the candidate sees) and a pool of contents rotated through them;
    ``lean``: the fewest that still rotate contents."""
    first = _as_args(make_inputs())
    for i, a in enumerate(first):
        if isinstance(a, torch.Tensor) and a.device.type != device.type:
            raise ValueError(f"make_inputs() returned input {i} on {a.device}; it must return CUDA tensors")
    set_bytes = sum(a.numel() * a.element_size() for a in first if isinstance(a, torch.Tensor))
    free_bytes, _ = torch.cuda.mem_get_info(device)
    n_slots, n_pool, notes = INPUT_SLOTS, INPUT_POOL, []
    if lean:
        n_slots, n_pool = 1, 2
        notes.append("GPU memory short: rotating 1 input slot through 2 contents")
    elif (n_slots + n_pool) * set_bytes > INPUT_MEMORY_SHARE * free_bytes:
        n_slots, n_pool = 1, 2
        notes.append(f"inputs of {set_bytes / 1e9:.2f} GB: rotating 1 slot through 2 contents to fit in memory")
    sets = [first] + [_as_args(make_inputs()) for _ in range(n_slots + n_pool - 1)]
    for s in sets[1:]:
        if _signature(s) != _signature(first):
            raise ValueError(f"make_inputs() returned {_signature(s)} after {_signature(first)}; shapes must not vary")
    return sets[:n_slots], sets[n_slots:], notes


def _load(slot: tuple, content: tuple) -> None:
    """Copy ``content`` into ``slot`` in place: same pointers, new data."""
    for dst, src in zip(slot, content):
        if isinstance(dst, torch.Tensor) and dst.numel() > 0:
            try:
                dst.copy_(src)
            except RuntimeError:   # e.g. an expanded (stride-0) input: leave it as it is
                continue


def _flush_size(device, flush_bytes: int | None) -> int:
    if flush_bytes is not None:
        if not isinstance(flush_bytes, int) or flush_bytes < 1:
            raise ValueError(f"flush_bytes={flush_bytes!r} must be a positive int")
        return flush_bytes
    l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    return max(FLUSH_MIN_BYTES, FLUSH_L2_MULTIPLE * l2_bytes)


def clock_functions() -> tuple[Any, Any, Any, Any]:
    """(Event class, record, elapsed_time, synchronize) as captured when this module loaded.

    Raises KernelRAGError when even those are not torch's own (something patched them
    before the verifier loaded): no trustworthy GPU clock exists in this process.
    """
    captured = {"torch.cuda.Event": _Event, "torch.cuda.Event.record": _record,
                "torch.cuda.Event.elapsed_time": _elapsed, "torch.cuda.synchronize": _sync}
    problems = [f"{path} {why}" for path, obj in captured.items() if (why := _provenance_problem(path, obj))]
    if problems:
        raise KernelRAGError("CUDA timing functions were patched before the verifier loaded ("
                             + "; ".join(problems) + "): time in a clean process")
    return _Event, _record, _elapsed, _sync
