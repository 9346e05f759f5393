"""Verifying many candidates in a row, with what does not depend on the candidate kept warm.

    from kernelrag.verify import VerifySession
    with VerifySession(device="cuda") as session:
        verdicts = session.verify_many("task.py", ["a.py", "b.py", "c.py"])

What a session reuses, and how it is keyed (nothing crosses from one task to another):

* **Reference outputs.** The session draws its trial seeds once (or takes ``seed``), so
  every candidate of a task is checked on the same trials. Its reference processes are
  warm and keep the prepared references of recent jobs in memory, keyed by the whole job
  (task source, sizes, seeds, trials, budgets, tolerance, device) in a process of one
  torch and triton (``reference.Prepared``). They never reach the disk.
* **The torch.compile baseline** (GPU): measured once per task and session, in a
  reference process of its own (which never runs candidate code), 100 calls interleaved
  with eager, keyed by the task source's hash and device (``baselines``). It is compiled
  as soon as the task's first candidate arrives, or earlier when told (``prefetch``),
  while candidates import and run their trials. Each candidate is still timed
  interleaved with eager, the drift anchor; its compile figure is the cached one times
  (eager now / eager then), so both speedups are side-by-side ratios
  (``Verdict.compile_source`` says so).
* **Warm processes.** Reference processes stay up for the session. Candidate processes
  are forked by zygotes that imported torch and triton once and never touch CUDA (an
  initialised CUDA context does not survive a fork; each child creates its own), one
  child per candidate (``processes.spawn_candidate``). A GPU session starts its zygotes
  and reference processes as it opens and keeps one candidate process per worker started
  ahead of its job (``prestart``), its CUDA context and Triton already up; where fork is
  not available these are new interpreters. A CPU session forks each candidate when its
  job arrives (a fork costs milliseconds there).

Parallelism: ``workers`` candidates are in flight at once. On a GPU the gate lets any
number share the device for untimed work (imports, correctness trials, comparisons,
baseline builds; inductor's compiling holds nothing) but gives it to one alone for timing
(a candidate's, or a baseline's from its first call on): no two timed measurements
overlap, and nothing else runs on the GPU while one is timed.
"""
from __future__ import annotations

import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable

from kernelrag.errors import KernelRAGError
from kernelrag.verify.pipeline import DEVICES, _cache_dir, _resolve_device, declared_tolerance, verify, verify_source
from kernelrag.verify.baselines import Baselines
from kernelrag.verify.faults import gpu_holders
from kernelrag.verify.gate import GpuGate, MemoryRoom
from kernelrag.verify.processes import (give_back, in_background, reference_key, reference_server, warm_zygote,
                                        zygotes_enabled)
from kernelrag.verify.sandbox import Job, Session, Slot, run_session
from kernelrag.verify.verdict import Verdict

COMPILE_MODES = ("cached", "interleaved")


class VerifySession:
    """Verify many candidates against one or more tasks; see the module docstring.

    Options are those of ``verify_source`` (``device``, ``timeout_s``, ``trials``,
    ``measure_time``, ``seed``, ``tolerance``, ``policy``, ``cache_dir``,
    ``require_isolation``), fixed for the
    session, plus ``workers`` (candidates in flight; default ``gpu_workers()`` on a GPU, 1
    on a CPU), ``prestart`` (start each candidate process ahead as a new interpreter
    instead of forking it from a zygote; default off when fork is available) and
    ``compile_baseline``: "cached" (once per task, the default) or "interleaved"
    (torch.compile timed beside every candidate, as ``verify`` does). Use it as a context
    manager, or call ``close()``.
    """

    def __init__(self, *, device: str = "auto", timeout_s: float = 300.0, trials: int = 5,
                 measure_time: bool = True, seed: int | None = None,
                 tolerance: dict[str, float] | str | None = None, policy: Any = None,
                 cache_dir: str | Path | None = None, require_isolation: bool = False,
                 workers: int | None = None, prestart: bool | None = None,
                 compile_baseline: str = "cached"):
        if device not in DEVICES:
            raise KernelRAGError(f"device={device!r} is not one of {', '.join(DEVICES)}")
        if compile_baseline not in COMPILE_MODES:
            raise KernelRAGError(f"compile_baseline={compile_baseline!r} is not one of {', '.join(COMPILE_MODES)}")
        if workers is not None and workers < 1:
            raise KernelRAGError(f"workers={workers} must be at least 1")
        self.device, self.resolved = device, _resolve_device(device)
        self.seed = secrets.randbelow(2**31 - 1000) if seed is None else int(seed)
        self.options = dict(device=device, timeout_s=timeout_s, trials=trials, measure_time=measure_time,
                            seed=self.seed, tolerance=tolerance, policy=policy, cache_dir=cache_dir,
                            require_isolation=require_isolation)
        self.workers = workers or (gpu_workers() if self.resolved == "cuda" else 1)   # CPU: one zygote
        # a GPU session keeps a started candidate process per worker (forked by a zygote when
        # possible) whose CUDA context is up before its job; a CPU zygote's fork is enough
        self.prestart = (self.resolved == "cuda" or not zygotes_enabled()) if prestart is None else bool(prestart)
        self.compile_baseline = compile_baseline
        self.gate = GpuGate()
        self.room = MemoryRoom()
        cache = _cache_dir(cache_dir, self.resolved)
        self.baselines = Baselines(self.gate, lambda: self._take_ref("cuda"),
                                   lambda server, ok: self._give_ref("cuda", server, ok),
                                   cache_root=Path(cache) / "baselines" if cache else None)
        self._lock = threading.Lock()
        self._refs: dict[str, list] = {}
        self._slots: list[Slot] = []
        self._filling = 0
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        if self.resolved == "cuda":
            self._warm_up()

    # ------------------------------------------------------------ verifying
    def verify(self, task_path: str | Path, candidate_path: str | Path, **overrides: Any) -> Verdict:
        """One candidate file against one task file (``overrides``: per-call ``verify`` options)."""
        return _timed_once_more(lambda: verify(task_path, candidate_path, **{**self.options, **overrides},
                                               runner=self.run_job, gate=self.gate), self.room)

    def verify_source(self, task_src: str, candidate_src: str, **overrides: Any) -> Verdict:
        return _timed_once_more(lambda: verify_source(task_src, candidate_src, **{**self.options, **overrides},
                                                      runner=self.run_job, gate=self.gate), self.room)

    def verify_many(self, task_path: str | Path, candidate_paths: Iterable[str | Path], *,
                    on_verdict: Callable[[int, Verdict], None] | None = None) -> list[Verdict]:
        """Every candidate against one task, ``workers`` at a time; verdicts in input order."""
        return self.verify_pairs([(task_path, c) for c in candidate_paths], on_verdict=on_verdict)

    def verify_pairs(self, pairs: Iterable[tuple[str | Path, str | Path]], *, errors: str = "raise",
                     on_verdict: Callable[[int, Any], None] | None = None,
                     overrides: list[dict[str, Any]] | None = None) -> list[Any]:
        """(task, candidate) file pairs, ``workers`` at a time; results in input order.

        ``errors="return"`` puts a KernelRAGError (a missing file, a malformed task) in
        the result list instead of raising it. ``overrides``: per-pair options.
        """
        pairs = list(pairs)
        extra = overrides or [{} for _ in pairs]
        if len(extra) != len(pairs):
            raise KernelRAGError(f"{len(extra)} overrides for {len(pairs)} pairs; give one dict per pair")
        if errors == "raise":
            for task, cand in pairs:
                for label, path in (("task", task), ("candidate", cand)):
                    if not Path(path).is_file():
                        raise KernelRAGError(f"{label} file {path} does not exist; pass an existing .py file")

        return self._map([lambda i=i: self.verify(*pairs[i], **extra[i]) for i in range(len(pairs))],
                         errors, on_verdict)

    def verify_sources(self, task_src: str, candidate_srcs: Iterable[str], *, errors: str = "raise",
                       on_verdict: Callable[[int, Any], None] | None = None, **overrides: Any) -> list[Any]:
        """Candidate sources against one task source (a drafter's round, a configuration
        search), ``workers`` at a time; ``overrides``: ``verify`` options for every one."""
        srcs = list(candidate_srcs)
        return self._map([lambda c=c: self.verify_source(task_src, c, **overrides) for c in srcs], errors,
                         on_verdict)

    def _map(self, calls: list[Callable[[], Verdict]], errors: str, on_verdict) -> list[Any]:
        if errors not in ("raise", "return"):
            raise KernelRAGError(f"errors={errors!r} is not one of raise, return")

        def one(i: int) -> Any:
            try:
                result: Any = calls[i]()
            except KernelRAGError as exc:
                if errors == "raise":
                    raise
                result = exc
            if on_verdict is not None:
                on_verdict(i, result)
            return result

        if self.workers == 1:
            return [one(i) for i in range(len(calls))]
        # The threads live as long as the session: a process started from a thread (warm
        # candidates, reference processes) is killed when that thread ends (PR_SET_PDEATHSIG).
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kernelrag-verify")
        return list(self._pool.map(one, range(len(calls))))

    def prefetch(self, task_src: str, *, tolerance: Any = None) -> None:
        """Start the torch.compile baseline of a task verified later (a GPU session with
        cached baselines only; elsewhere nothing to do). ``tolerance``: the override that
        its verifications will use, if any."""
        if self.resolved != "cuda" or self.compile_baseline != "cached" or not self.options["measure_time"]:
            return
        tol = tolerance if tolerance is not None else self.options.get("tolerance")
        try:
            tol = tol if tol is not None else declared_tolerance(task_src)
        except KernelRAGError:
            return                       # a malformed task: its verification will say so
        self.baselines.start(task_src, seed=self.seed + 500, tolerance=tol)

    # ------------------------------------------------------------ processes
    def run_job(self, job: Job) -> Session:
        """The session's runner for ``verify_source``: warm reference, prestarted slot, gate."""
        if self._closed:
            raise KernelRAGError("this VerifySession is closed; open a new one")
        cuda = job.device == "cuda"
        job.compile = "gate" if cuda and self.compile_baseline == "cached" else "interleaved"
        baseline = None
        if job.compile == "gate" and job.measure_time:
            key = self.baselines.start((job.original or {}).get("source") or "", seed=job.seed + 500,
                                       tolerance=job.tolerance)
            wait_s = max(300.0, job.timeout_s)
            baseline = lambda: self.baselines.wait(key, wait_s)   # noqa: E731
        ref = self._take_ref(job.device)
        slot = self._take_slot(job.device)
        healthy = False
        try:
            session = run_session(job, ref=ref, slot=slot, gate=self.gate if cuda else None, baseline=baseline)
            healthy = session.ref_healthy
            return session
        finally:
            self._give_ref(job.device, ref, healthy)

    def _warm_up(self) -> None:
        """Start the zygotes and reference processes of ``workers`` candidates now, in the
        background: their imports overlap with whatever the caller does before verifying."""
        def one_ref() -> None:
            server = reference_server(self.resolved)
            self._give_ref(self.resolved, server, server.alive())

        for _ in range(self.workers):
            in_background(one_ref)
        if zygotes_enabled(self.resolved):
            # one zygote per candidate in flight and one per prestarted slot
            for _ in range(2 * self.workers if self.prestart else self.workers):
                in_background(lambda: warm_zygote(self.resolved))
        if self.prestart:
            self._refill(self.resolved)

    def _take_ref(self, device: str):
        with self._lock:
            idle = self._refs.setdefault(device, [])
            server = idle.pop() if idle else None
        if server is not None and server.alive():
            return server
        if server is not None:
            server.kill()
        return reference_server(device)

    def _give_ref(self, device: str, server, healthy: bool) -> None:
        if healthy and server.alive() and not self._closed:
            with self._lock:
                self._refs.setdefault(device, []).append(server)
                return
        if healthy and server.alive():
            give_back(reference_key(device), server, True)
        else:
            server.kill()

    def _take_slot(self, device: str) -> Slot:
        if not (self.prestart and device == self.resolved):
            return Slot.make(device, prestart=False)
        with self._lock:
            slot = self._slots.pop(0) if self._slots else None
        slot = slot if slot is not None and slot.child.poll() is None else _replace(slot, device,
                                                                                    self._readable(device))
        self._refill(device)
        return slot

    def _refill(self, device: str) -> None:
        """Keep one started process per worker ready for the next candidates, started in the
        background so that the candidate in hand does not wait for them."""
        with self._lock:
            missing = max(0, self.workers - len(self._slots) - self._filling)
            self._filling += missing

        def add() -> None:
            fresh = None
            try:
                fresh = Slot.make(device, prestart=True, readable=self._readable(device))
            finally:
                with self._lock:
                    self._filling -= 1
                    keep = fresh is not None and not self._closed
                    if keep:
                        self._slots.append(fresh)
                if fresh is not None and not keep:
                    fresh.discard()

        for _ in range(missing):
            in_background(add)

    def wait_warm(self, timeout_s: float = 60.0) -> bool:
        """Wait until one started candidate process per worker waits for its job (a GPU
        session refills them in the background after each candidate); True when they do.
        Nothing to wait for without ``prestart``."""
        deadline = time.monotonic() + timeout_s
        while self.prestart and not self._closed:
            with self._lock:
                ready = len(self._slots) >= self.workers and all(
                    slot.child is not None and slot.child.started() for slot in self._slots)
            if ready:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _readable(self, device: str) -> list[str]:
        """What a candidate may read besides its scratch folder: the measured-ceilings cache."""
        cache = _cache_dir(self.options.get("cache_dir"), device)
        return [cache] if cache else []

    def close(self) -> None:
        """Stop the warm candidate processes; hand the reference processes back to the pool."""
        self._closed = True
        with self._lock:
            slots, self._slots = self._slots, []
            refs, self._refs = self._refs, {}
        for slot in slots:
            slot.discard()
        for device, servers in refs.items():
            for server in servers:
                give_back(reference_key(device), server, True)
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> "VerifySession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _timed_once_more(call: Callable[[], Verdict], room: MemoryRoom | None = None) -> Verdict:
    """The verdict of ``call()``, sharing the session's GPU memory; verified once more,
    fresh inputs and all, with the memory to itself (``room.alone()``: the other
    verifications end first, new ones wait), when it went untimed or unchecked because
    other processes held the GPU's memory."""
    room = room or MemoryRoom()
    with room.shared():
        v = call()
    if getattr(v, "untimed_cause", None) != "gpu_memory":
        return v
    with room.alone():
        again = call()
    again.warnings.append("verified twice: the first time the GPU's memory was held by other processes, "
                          "the second time alone in this session")
    if getattr(again, "untimed_cause", None) == "gpu_memory":   # short even alone: say who held the memory
        holders = gpu_holders()
        if holders:
            again.warnings.append(f"GPU memory after the second try: {holders}")
    return again


def _replace(dead: Slot | None, device: str, readable: list[str]) -> Slot:
    if dead is not None:
        dead.discard()
    return Slot.make(device, prestart=True, readable=readable)


def verify_many(task_path: str | Path, candidate_paths: Iterable[str | Path], **options: Any) -> list[Verdict]:
    """``VerifySession(**options).verify_many(task, candidates)``, closed afterwards."""
    with VerifySession(**options) as session:
        return session.verify_many(task_path, candidate_paths)


def gpu_workers() -> int:
    """Candidates in flight on one GPU: enough to keep it busy while others import, compile
    and check, at most one per 3 host cores (each uses a few), at least 2, at most 6 (5 on
    the H200's 16-core host). With compiles holding no share of the GPU (``yielding``), the
    GPU is free more often than 4 candidates can fill it."""
    return max(2, min(6, (os.cpu_count() or 8) // 3))


__all__ = ["VerifySession", "GpuGate", "verify_many", "gpu_workers"]
