"""A candidate holds no share of the GPU while Triton compiles its kernels.

Triton compiles a kernel the first time it is launched with a new specialization: seconds
of CPU work, tens of seconds for a large GEMM, in the middle of the correctness trials,
which hold a share of the session's GPU gate (``gate.GpuGate``). Held through compiles,
those shares kept every timing of the other tasks waiting for them (gpu wait 16-50 s a
GEMM task with 4 tasks in flight; H200, 2026-12-04). So the candidate tells its parent
around each compile, and the parent lets go of its share meanwhile:

    candidate (``Link``, in the worker)        parent (``Desk``, in ``sandbox._run``)
    synchronize the GPU
    request n: "none"          ---------->    release what it holds
    compile (CPU only)
    request n+1: "shared"      ---------->    take a shared hold (waits its turn)
    wait for "granted n+1"     <----------    write granted n+1
    launch

After its timing the candidate asks for "shared" the same way, so that the re-check of
its outputs leaves the GPU to the next timing instead of holding it alone.

A request is a file the candidate writes into its own scratch folder; the parent only
ever reads a number and a word from it. A candidate that lies (asks for nothing and keeps
launching) can only run beside another candidate's timing, which is timed interleaved with
eager PyTorch: both slow down together and the ratios stand. It cannot lengthen or share
its own timing, which the parent holds alone until the candidate asks to leave it.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from kernelrag.verify.exchange import read_json, write_json

REQUEST, GRANTED = "gate-request.json", "gate-granted.json"
WANTS = ("none", "shared")


class Link:
    """The candidate's side: ``ask(want)`` writes request n and, for "shared", waits until
    the parent grants it. ``around_compiles()`` wraps Triton's compiler so that every
    compile is bracketed by "none" and "shared" while ``enabled``."""

    def __init__(self, scratch: Path, synchronize: Callable[[], None] | None = None):
        self.scratch, self.synchronize = Path(scratch), synchronize
        self.n = 0
        self.enabled = False
        self.compiles = 0
        self.phase = "correctness"       # the verdict phase whose clock the waits are taken off
        self.waited_s: dict[str, float] = {}

    def ask(self, want: str) -> None:
        if want not in WANTS:
            raise ValueError(f"want={want!r} is not one of {WANTS}")
        if want == "none" and self.synchronize is not None:
            self.synchronize()           # nothing of ours left running on the GPU
        self.n += 1
        write_json(self.scratch / REQUEST, {"n": self.n, "want": want})
        if want == "shared":
            t0 = time.monotonic()
            parent = os.getppid()
            while read_json(self.scratch / GRANTED).get("n", 0) < self.n:
                if os.getppid() != parent:
                    os._exit(3)
                time.sleep(0.002)
            self.waited_s[self.phase] = self.waited_s.get(self.phase, 0.0) + time.monotonic() - t0

    def around_compiles(self) -> bool:
        """Wrap ``triton.compiler.compile`` (what each kernel's launcher binds on its first
        launch). False when this Triton has no such function: compiles then hold the share."""
        try:
            import triton.compiler as tc
        except ImportError:
            return False
        real = getattr(tc, "compile", None)
        if real is None or getattr(real, "_kernelrag_yields", False):
            return real is not None
        link = self

        def compile(*args, **kwargs):    # noqa: A001 - the name Triton imports
            if not link.enabled:
                return real(*args, **kwargs)
            link.compiles += 1
            link.ask("none")
            try:
                return real(*args, **kwargs)
            finally:
                link.ask("shared")

        compile._kernelrag_yields = True
        compile.__wrapped__ = real
        tc.compile = compile
        return True


class Desk:
    """The parent's side: ``serve()`` (called between its polls) answers the newest request
    with the gate's ``Held`` of this run. Requests it missed in between need no answer: the
    newest says what the candidate wants now."""

    def __init__(self, scratch: Path, held: Any):
        self.scratch, self.held = Path(scratch), held
        self.served = 0
        self.released = 0

    def serve(self) -> None:
        request = read_json(self.scratch / REQUEST)
        n, want = request.get("n"), request.get("want")
        if not isinstance(n, int) or isinstance(n, bool) or n <= self.served or want not in WANTS:
            return
        self.served = n
        if want == "none":
            self.held.release()
            self.released += 1
            return
        self.held.shared()
        write_json(self.scratch / GRANTED, {"n": n})


__all__ = ["Link", "Desk", "REQUEST", "GRANTED"]
