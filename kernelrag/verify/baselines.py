"""The torch.compile baselines of a session's tasks, measured once each, off the candidates' path.

A task's baseline is compiled as soon as the session first sees the task (or is told
about it ahead, ``Baselines.start``), in a reference process of its own, while the
task's first candidate imports and runs its correctness trials. Building the model is
untimed GPU work and shares the GPU (``GpuGate.shared``); inductor's compilation holds
nothing, so it never keeps a candidate from timing; from the compiled code's first call
(where inductor may benchmark configurations of its own, which other work on the GPU
would skew) through the 100 calls interleaved with eager that give the figure, the
baseline has the GPU alone (``GpuGate.exclusive``), like a candidate's timing. A
candidate that reaches timing waits for its task's baseline (``Baselines.wait``) before it
asks for the GPU, so the two never overlap and no one waits while holding the GPU.

Keyed by the task source's hash and the device, within one session (one interpreter,
so one torch and triton). The reference process never runs candidate code, so no
candidate can touch the figure; each candidate's compile figure is this one times eager's
drift since (``outcome._cached_compile``).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

from kernelrag.verify import compile_cache, isolation
from kernelrag.verify.faults import out_of_memory
from kernelrag.verify.gate import Held
from kernelrag.verify.processes import in_background

COMPILE_TIMEOUT_S = 600.0     # torch.compile of a large model can take minutes on a busy host
TIME_TIMEOUT_S = 300.0


def compiles_at_once() -> int:
    """torch.compile runs at once: each uses at most one core (one inductor compile thread per
    worker) and spends much of its time waiting for the GPU, so a 16-core host takes 8 beside
    its candidates (with 4, a suite's baselines queued 18 s each on the H200, 2026-12-02,
    with the host's load average under 3)."""
    return max(2, min(8, (os.cpu_count() or 8) // 2))



def baseline_key(source: str, device: str = "cuda") -> str:
    return f"{hashlib.sha256(source.encode()).hexdigest()}|{device}"


class _Entry:
    def __init__(self):
        self.done = threading.Event()
        self.result: dict[str, Any] | None = None
        self.started = time.monotonic()


class Baselines:
    """Start, measure and hand out the baselines (see the module docstring).

    ``gate``: the session's ``GpuGate``. ``take_ref()`` / ``give_ref(server, healthy)``:
    borrow and return a reference process of the session.
    """

    def __init__(self, gate: Any, take_ref: Callable[[], Any], give_ref: Callable[[Any, bool], None],
                 cache_root: Path | None = None):
        self.gate, self._take_ref, self._give_ref = gate, take_ref, give_ref
        self.cache_root = cache_root      # compiled baselines kept across sessions (``compile_cache``)
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._compiles = threading.Semaphore(compiles_at_once())

    def start(self, source: str, *, seed: int, tolerance: Any = None, device: str = "cuda") -> str:
        """Begin measuring the baseline of ``source`` unless it is measured or under way; its key."""
        key = baseline_key(source, device)
        with self._lock:
            if key in self._entries:
                return key
            entry = self._entries[key] = _Entry()
        in_background(lambda: self._measure(entry, source, seed, tolerance))
        return key

    def wait(self, key: str, timeout_s: float) -> dict[str, Any]:
        """The baseline for ``key`` (started before), waiting at most ``timeout_s``; with ``waited_s``."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return {"compile": None, "error": "no torch.compile baseline was started for this task"}
        t0 = time.monotonic()
        if not entry.done.wait(timeout_s):
            return {"compile": None, "error": f"the torch.compile baseline was not ready within {timeout_s:.0f} s",
                    "waited_s": time.monotonic() - t0}
        result = dict(entry.result or {}, waited_s=time.monotonic() - t0)
        if isinstance(result.get("error"), str) and out_of_memory(result["error"]):    # the GPU's memory was held elsewhere: measured again
            with self._lock:                       # at the next start, not kept for the session
                if self._entries.get(key) is entry:
                    del self._entries[key]
        return result

    def known(self) -> dict[str, dict[str, Any]]:
        """Every finished baseline, by key (for reports)."""
        with self._lock:
            return {k: dict(e.result) for k, e in self._entries.items() if e.done.is_set() and e.result}

    def _measure(self, entry: _Entry, source: str, seed: int, tolerance: Any) -> None:
        ref, healthy, result, stamps = None, False, {}, {}
        held = Held(self.gate)
        try:
            with self._compiles:
                stamps["queued"] = time.monotonic() - entry.started
                t0 = time.monotonic()
                ref = self._take_ref()
                stamps["reference_process"] = time.monotonic() - t0
                t0 = time.monotonic()
                compiled = self._compile(ref, source, seed, tolerance, held)
                stamps["compile_step"] = time.monotonic() - t0 - held.waited_s
                warm = ((compiled or {}).get("seconds") or {}).get("warm_wait")
                if isinstance(warm, (int, float)) and warm >= 0.05:
                    stamps["of_it_inductor_warm_up"] = warm      # started with the reference process
            if compiled is None:
                result = {"compile": None, "error": f"the reference process gave no compiled baseline "
                                                    f"({ref.describe()})"}
            elif not compiled.get("compiled"):
                result, healthy = _strip(compiled), True
            else:
                held.exclusive()              # held since the first call (a graph that never ran: now)
                t0 = time.monotonic()
                ref.send({"cmd": "baseline_time", "iters": 100})
                timed = ref.recv(time.monotonic() + TIME_TIMEOUT_S)
                if timed is None:          # stop it now: it must not run on the GPU after we let go
                    ref.kill()
                healthy = timed is not None
                result = _strip(timed) if timed is not None else {
                    "compile": None, "error": "the reference process gave no torch.compile baseline"}
                result["exclusive_s"] = stamps["timing"] = time.monotonic() - t0
                result.setdefault("seconds", {}).update(compile=(compiled.get("seconds") or {}).get("compile"))
                result["compile_cache"] = compiled.get("cache")
        except Exception as exc:   # noqa: BLE001 - candidates are then timed without a compile figure
            result = {"compile": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
        finally:
            held.release()
            stamps["gpu_wait"] = held.waited_s
            if ref is not None:
                self._give_ref(ref, healthy)
            result["measured_s"] = time.monotonic() - entry.started
            result["stages_s"] = {k: round(v, 2) for k, v in stamps.items()}
            entry.result = result
            entry.done.set()

    def _compile(self, ref: Any, source: str, seed: int, tolerance: Any, held: Held) -> dict[str, Any] | None:
        """The compile step: the GPU shared while the model is built, nothing held while inductor
        compiles (minutes at worst), and the GPU alone from the compiled code's first call (where
        inductor may benchmark its own configurations) on, kept for the timing that follows."""
        deadline = time.monotonic() + COMPILE_TIMEOUT_S
        offered = compile_cache.offer(self.cache_root, source, isolation.exchange_base())
        try:
            held.shared()
            ref.send({"cmd": "baseline_compile", "source": source, "seed": seed, "tolerance": tolerance,
                      "cache": str(offered) if offered else None})
            while True:
                message = ref.recv(deadline)
                phase = (message or {}).get("phase")
                if phase == "built":
                    held.release()
                elif phase == "need_gpu":
                    held.exclusive()
                    ref.send({"cmd": "gpu"})
                elif phase is None:
                    if message is not None:
                        message["cache"] = self._keep(source, message.get("cache"))
                    return message
        finally:
            if offered is not None:
                shutil.rmtree(offered, ignore_errors=True)

    def _keep(self, source: str, packed: Any) -> dict[str, Any]:
        """Store the compile's files for the next session; what the verdict says of the cache."""
        if not isinstance(packed, dict):
            return {"hit": False, "stored": 0}
        hit = packed.get("hit") is True
        return {"hit": hit, "stored": 0 if hit else compile_cache.store(self.cache_root, source, packed)}


def _strip(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("ok", "compiled")}


__all__ = ["Baselines", "baseline_key"]
