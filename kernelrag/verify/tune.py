"""Timing kernel configurations against each other inside the verifier's protocol.

``time_configs`` takes one zero-argument launcher per configuration (same inputs,
same output buffer or a fresh one, the caller's choice) and returns each one's
median, spread and trial count. It is the autotuner's measurement, and it follows the
rules the candidate timing follows (``timing``), not ``triton.testing.do_bench``'s:

- the clock is the one ``timing`` captured before any candidate loaded
  (``clock_functions``), so a patched ``torch.cuda.Event`` cannot skew a search;
- L2 is flushed (a write of several times its size) before every timed call;
- a device-wide synchronize closes every call, so work left on a side stream counts;
- configurations are interleaved round-robin with the order rotating each round, so
  clock and thermal drift hit all of them alike; medians, not means.

Each configuration's first call (compilation, out-of-resources errors) happens in the
warm-up and its output goes through ``check`` (the caller's comparison with a
reference): a configuration that fails to build or computes wrong results is reported
with its error and never timed. ``time_configs_cpu`` does the same with the host clock
for a dry run under Triton's interpreter (no GPU: the numbers say nothing about speed).
"""
from __future__ import annotations

import time
from typing import Any, Callable

Check = Callable[[Any], "tuple[bool, str]"]


def _first_calls(runs: dict[str, Callable[[], Any]], check: Check | None, sync: Callable[[], None],
                 warmup: int) -> tuple[list[str], dict[str, dict[str, Any]]]:
    ok, results = [], {}
    for name, run in runs.items():
        try:
            out = run()
            sync()
            passed, detail = check(out) if check is not None else (True, "not checked")
            for _ in range(max(0, warmup - 1)):
                run()
            sync()
        except Exception as exc:   # noqa: BLE001 - a config that cannot build or launch is a result
            results[name] = {"status": "compile_error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        if not passed:
            results[name] = {"status": "incorrect", "detail": str(detail)[:300]}
            continue
        results[name] = {"status": "ok", "detail": str(detail)[:300]}
        ok.append(name)
    return ok, results


def time_configs(runs: dict[str, Callable[[], Any]], *, check: Check | None = None, iters: int = 50,
                 warmup: int = 3, flush_bytes: int | None = None) -> dict[str, dict[str, Any]]:
    """``{name: {"status", "detail", "median_ms", "iqr_ms", "trials"}}`` for each launcher.

    ``status`` is "ok" (timed), "compile_error" or "incorrect" (never timed).
    """
    import torch

    from kernelrag.verify.timing import _flush_size, clock_functions, summarize

    if not runs:
        return {}
    if not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters={iters!r} must be an int >= 1")
    event_cls, record, elapsed, sync = clock_functions()
    device = torch.device("cuda", torch.cuda.current_device())
    ok, results = _first_calls(runs, check, sync, warmup)
    flush = torch.empty(_flush_size(device, flush_bytes), dtype=torch.uint8, device=device)
    stream = torch.cuda.current_stream()
    samples: dict[str, list[float]] = {name: [] for name in ok}
    after_end: dict[str, list[float]] = {name: [] for name in ok}
    events = {name: tuple(event_cls(enable_timing=True) for _ in range(3)) for name in ok}
    try:
        for r in range(iters):
            shift = r % len(ok) if ok else 0
            for name in ok[shift:] + ok[:shift]:
                start, end, synced = events[name]
                flush.zero_()
                record(start, stream)
                runs[name]()
                record(end, stream)
                sync()                          # device-wide: waits for every stream
                record(synced, stream)
                synced.synchronize()
                samples[name].append(elapsed(start, end))
                after_end[name].append(elapsed(start, synced) - samples[name][-1])
    finally:
        del flush
    for name in ok:
        # work still running after the end event (a side stream) is counted, not hidden
        hidden = summarize(after_end[name])["median_ms"]
        stats = summarize(samples[name] if hidden < 0.02 else
                          [a + b for a, b in zip(samples[name], after_end[name])])
        results[name].update(stats, after_end_ms=hidden)
    return results


def time_configs_cpu(runs: dict[str, Callable[[], Any]], *, check: Check | None = None, iters: int = 3,
                     warmup: int = 1) -> dict[str, dict[str, Any]]:
    """The same protocol with the host clock, for a dry run with no GPU (interpreter times)."""
    from kernelrag.verify.timing import summarize

    ok, results = _first_calls(runs, check, lambda: None, warmup)
    samples: dict[str, list[float]] = {name: [] for name in ok}
    for r in range(iters):
        shift = r % len(ok) if ok else 0
        for name in ok[shift:] + ok[:shift]:
            t0 = time.perf_counter()
            runs[name]()
            samples[name].append((time.perf_counter() - t0) * 1e3)
    for name in ok:
        results[name].update(summarize(samples[name]), clock="host (no GPU: not a speed measurement)")
    return results
