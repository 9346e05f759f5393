"""Running one verification in two fresh processes; the parent only orchestrates.

Design (the reasons matter more than the mechanics):

* Reference process (``worker reference``): imports the task only. It computes every
  reference output and keeps it in its own memory; references are never written to
  disk, so no file name can leak to the candidate, and no stale reference result
  can sit in the candidate's allocator (VERIFY.md hack 1). (Handing references over
  in files with secret names, deleted before candidate code runs, would still leave
  them in the candidate's memory, one ``gc.get_objects()`` away.)
* Candidate process (``worker candidate``): a new process (a new interpreter, or on
  CPU a child forked from a zygote that only imported torch and triton, see
  ``zygote``), working directory a scratch folder of its own that is not on the
  import path. It gets the plan (sizes, seeds, distributions, expected structure)
  as a file only after the reference process is done, regenerates inputs from the
  seeds, runs the candidate and saves its outputs to its scratch folder.
* The reference process then loads those outputs (plain tensors,
  ``weights_only``) and compares. Comparison code therefore never shares a process
  with candidate code, so patched comparisons, lazy tensors or hooks in the
  candidate process cannot affect it.
* The reference process never runs candidate code, so it is kept between
  verifications of one session (one torch start-up saved per verification); it is
  killed on any timeout or protocol failure. The candidate process is always new.
* The parent imports neither torch nor the candidate. Each process runs in its own
  session and, where the kernel allows, in its own namespaces (``isolation``, ``jail``:
  no view of $HOME or $KERNELRAG_HOME, no network, no other process); on timeout the
  whole process group is killed. A watch thread kills a candidate whose exchange
  folder outgrows its cap, and its stdout/stderr go through pipes the parent drains with
  a hard cap (``capture``); either makes the verdict ``resource-limit``. A segfault, ``os._exit``
  or CUDA illegal address ends only the candidate process: the parent reads the
  exit status and the stderr tail and reports ``crashed``.

Both processes start at once (their start-up overlaps); the candidate waits for
the plan file, so on a GPU the reference work never overlaps the candidate's timing,
and for a "go" file before timing (written only when its outputs were correct).
Timing itself has to happen in the candidate's process (CUDA events do not cross
processes); ``guard`` and the timing module's own checks watch it there.

A batch (``session.VerifySession``) passes in its own warm reference process, a
candidate process started ahead of time (``Slot``: a new interpreter that imported
torch and triton, and on a GPU initialised CUDA, and waits for its job; it runs one
candidate only), a ``gate`` that lets only one process time on the GPU at a time, and
the task's torch.compile ``baseline``, measured once per task in a reference process of
its own (``baselines``).

The gate is held as the work needs it: nothing while the reference process starts (a
ping) and the candidate starts and imports, shared from the reference's job to the
candidate's first call at the timed size (untimed GPU work, beside other candidates'), nothing while
the candidate's Triton kernels compile (``yielding``: the candidate asks), alone from the
"go" through the timing, shared again for the re-check after it.

Before the first timing, the parent makes sure the GPU's ceilings are cached
(``ceilings.ensure_cached``, measured once by the verifier's own code, never in a
process that ran task or candidate code) and hands them to the candidate with the "go",
so a candidate process starts no ``nvidia-smi`` and measures nothing but the candidate.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelrag.verify import isolation
from kernelrag.verify.capture import OutputCapture
from kernelrag.verify.exchange import IMPORTED_FILE, write_json
from kernelrag.verify.gate import Held
from kernelrag.verify.yielding import Desk
from kernelrag.verify.ceilings import ensure_cached
from kernelrag.verify.processes import (Child, give_back, reference_key, reference_server,
                                        spawn_candidate)

@dataclass
class Session:
    """Raw results of one run, turned into a Verdict by ``outcome``."""

    ready: dict[str, Any] | None = None          # the reference process's plan message
    ref_error: str | None = None
    ref_lost: str | None = None                  # the reference process gave no comparison: why
    phase1: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    timed_out: str | None = None                 # which stage ran out of time
    crashed: str | None = None                   # exit description
    stderr: str = ""
    not_checkable: str | None = None
    limit: str | None = None                     # a resource limit the candidate broke (it was killed)
    isolation: str = ""                          # what OS isolation was in force
    baseline: dict[str, Any] | None = None       # the gate's torch.compile baseline for this task
    clock: dict[str, float] | None = None        # parent-side monotonic times (spawn, gpu wait)
    ref_healthy: bool = False                    # the reference process may serve the next job


@dataclass
class Job:
    candidate_source: str
    device: str
    seed: int
    trials: int
    timeout_s: float
    measure_time: bool
    primary: list[dict]
    second: list[dict]
    original: dict | None
    budget_primary: int
    budget_second: int
    tolerance: Any = None
    uses_tl_dot: bool = False
    cache_dir: str | None = None
    compile: str = "interleaved"     # "interleaved": torch.compile timed beside the candidate; "gate"


@dataclass
class Slot:
    """A scratch folder and, on a GPU, a candidate process already started in it (imports
    done, waiting for ``job.json``); used by one candidate, then removed."""

    root: Path
    scratch: Path
    module_name: str
    iso: Any
    output: OutputCapture
    child: Child | None = None
    spawned: float = 0.0

    @classmethod
    def make(cls, device: str, prestart: bool, readable: list[str] = ()) -> "Slot":
        root = Path(tempfile.mkdtemp(prefix="kernelrag-verify-", dir=isolation.exchange_base()))
        root.chmod(0o755)
        iso = isolation.probe()
        scratch = root / f"c{secrets.token_hex(8)}"
        scratch.mkdir(parents=True)
        isolation.hand_over(scratch, iso)
        owner = (isolation.NOBODY, isolation.NOBODY) if iso.active and iso.switch_uid else None
        output = OutputCapture(scratch, root, isolation.OUTPUT_BYTES, owner)
        slot = cls(root, scratch, f"kernelrag_candidate_{secrets.token_hex(4)}", iso, output,
                   spawned=time.monotonic())
        if prestart:
            # started before job.json exists: it gets ready, then waits for it
            slot.child = spawn_candidate(scratch / "job.json", scratch, device, readable=list(readable))
        return slot

    def discard(self) -> None:
        if self.child is not None:
            self.child.kill()
        self.output.stop()
        if not os.environ.get("KERNELRAG_VERIFY_KEEP"):
            shutil.rmtree(self.root, ignore_errors=True)


def run_session(job: Job, *, ref=None, slot: Slot | None = None, gate=None, baseline=None) -> Session:
    """One verification. ``ref``: a reference Server to use (the caller keeps it; see
    ``Session.ref_healthy``), else one from the pool. ``slot``: see ``Slot``. ``gate``:
    ``shared()``, ``exclusive()`` and ``release(state)`` around the GPU phases (see
    ``gate.GpuGate``). ``baseline()``: the task's torch.compile baseline, waited for
    before timing (see ``baselines.Baselines``)."""
    slot = slot or Slot.make(job.device, prestart=False)
    try:
        return _run(job, slot, ref, gate, baseline)
    finally:
        slot.child = None             # killed by _run
        slot.discard()


def _run(job: Job, slot: Slot, given_ref, gate, baseline) -> Session:
    iso = slot.iso
    s = Session(isolation=iso.describe(), clock={"spawn": slot.spawned})
    scratch, module_name = slot.scratch, slot.module_name
    cand_path = scratch / f"{module_name}.py"
    cand_path.write_text(job.candidate_source)
    ref_job = {"device": job.device, "seed": job.seed, "trials": job.trials, "primary": job.primary,
               "second": job.second, "original": job.original, "budget_primary": job.budget_primary,
               "budget_second": job.budget_second, "tolerance": job.tolerance,
               "count": job.device == "cuda" and job.measure_time}
    held = Held(gate)
    desk = Desk(scratch, held)
    wait_for_go = job.device == "cuda" and job.measure_time
    files = {name: scratch / f"{name}.json" for name in ("plan", "go", "phase1", "result")}
    cand_job = {"device": job.device, "interpret": job.device == "cpu", "candidate_path": str(cand_path),
                "module_name": module_name, "out_dir": str(scratch / "out"),
                **{f"{name}_path": str(path) for name, path in files.items()},
                "wait_for_go": wait_for_go, "cache_dir": job.cache_dir, "yield_gate": gate is not None,
                "limits": isolation.candidate_limits(job.device)}
    write_json(scratch / "job.json", cand_job)
    ref = given_ref or reference_server(job.device)
    if slot.child is not None:
        cand = slot.child
    else:
        s.clock["spawn"] = time.monotonic()
        cand = spawn_candidate(scratch / "job.json", scratch, job.device,
                               readable=[job.cache_dir] if job.cache_dir else [])
    slot.output.on_cap = cand.kill
    watch = _Watch(cand, scratch, isolation.SCRATCH_BYTES[job.device], job.device)
    healthy = False
    try:
        # a reference process still starting (torch's import, CUDA, inductor's warm-up) does
        # no GPU work: wait for it holding nothing (at a GPU session's start, 20-28 s a worker)
        ref.send({"cmd": "ping"})
        pong = ref.recv(time.monotonic() + job.timeout_s)
        if not (pong and pong.get("pong")):
            s.ref_error = f"the reference process did not start ({ref.describe()})"
            return s
        # nor does a candidate still starting or importing (a load_inline build: a minute)
        deadline = time.monotonic() + job.timeout_s
        while held.gate is not None and not (scratch / IMPORTED_FILE).exists() and not files["phase1"].exists() \
                and cand.poll() is None:
            if time.monotonic() > deadline:
                s.timed_out, s.stderr = "import", slot.output.tail()
                return s
            time.sleep(0.01)
        held.shared()
        ref.send({"cmd": "job", "job": ref_job})
        s.ready = ref.recv(time.monotonic() + job.timeout_s)
        healthy = s.ready is not None
        if s.ready is None or not s.ready.get("ok"):
            s.ref_error = (s.ready or {}).get("error") or f"reference process gave no plan ({ref.describe()})"
            return s
        if job.uses_tl_dot and job.device == "cpu" and "bfloat16" in s.ready["input_dtypes"]:
            s.not_checkable = ("tl.dot on bf16 operands computes wrong results under Triton's CPU "
                               "interpreter; check this kernel on a GPU")
            write_json(files["plan"], {"cmd": "stop"})
            return s
        write_json(files["plan"], _plan(job, s.ready))       # nothing secret: seeds, sizes, shapes
        deadline = time.monotonic() + job.timeout_s
        while not files["phase1"].exists() and cand.poll() is None and time.monotonic() < deadline:
            desk.serve()                   # its compiles hold nothing of the GPU
            time.sleep(0.005 if desk.served else 0.02)
        if not files["phase1"].exists():
            if cand.poll() is None:
                s.timed_out = "correctness trials"
            else:
                s.crashed = cand.exit_description()
            s.stderr = slot.output.tail()
            return s
        s.phase1 = json.loads(files["phase1"].read_text())
        outputs = {tid: e["output"] for tid, e in s.phase1.get("trials", {}).items() if "output" in e}
        if outputs:
            ref.send({"cmd": "compare", "outputs": outputs})
            s.compare = ref.recv(time.monotonic() + max(120.0, job.timeout_s))
            healthy = s.compare is not None
            if not healthy:                # not the candidate's failure: nothing was compared
                s.ref_lost = ref.describe()
        if wait_for_go:
            go, ceilings = _all_passed(s), None
            if go:
                held.release()                      # wait for the baseline holding nothing
                t0 = time.monotonic()
                s.baseline = baseline() if baseline is not None else None
                held.exclusive()
                t1 = time.monotonic()
                ceilings = ensure_cached(job.cache_dir)   # the GPU's ceilings, measured once by trusted code
                s.clock["ceilings"] = time.monotonic() - t1
                s.clock["gpu_wait"] = t1 - t0 - (s.baseline or {}).get("waited_s", 0.0)
            write_json(files["go"], {"go": "time" if go else "stop", "ceilings": ceilings})
        deadline = time.monotonic() + (job.timeout_s if wait_for_go else 60.0)
        while not files["result"].exists() and cand.poll() is None and time.monotonic() < deadline:
            desk.serve()                   # after its timing: the GPU shared for the re-check
            time.sleep(0.005 if desk.served else 0.02)
        s.clock["result"] = time.monotonic()
        if files["result"].exists():
            s.result = json.loads(files["result"].read_text())
        elif cand.poll() is None:
            s.timed_out = "timing" if wait_for_go else "shutdown"
        else:
            s.crashed = cand.exit_description()
        s.stderr = slot.output.tail()
        return s
    finally:
        watch.stop()
        cand.kill()
        slot.output.stop()
        s.limit = slot.output.broken or watch.broken or cand.memory_breach(job.device)
        if s.limit:
            s.stderr = slot.output.tail()
        held.release()
        if healthy:
            ref.send({"cmd": "done"})
            idle = ref.recv(time.monotonic() + 30.0)
            healthy = bool(idle and idle.get("idle"))
        s.ref_healthy = healthy
        if given_ref is None:
            give_back(reference_key(job.device), ref, healthy)
        s.clock["ended"] = time.monotonic()


def _plan(job: Job, ready: dict[str, Any]) -> dict[str, Any]:
    variants = {"primary": ready["primary"], "second": ready["second"], "late": ready.get("late"),
                "timing": job.original}
    return {"variants": variants, "trials": ready["trials"], "tolerances": ready["tolerances"],
            "counts": ready.get("counts"), "timing_seed": job.seed + 500,
            "compile": "interleaved" if job.compile == "interleaved" else "skip"}


def _all_passed(s: Session) -> bool:
    p = s.phase1 or {}
    if "error" in p or "timing_error" in p or any(f.get("blocking") for f in p.get("findings", [])):
        return False
    if any(not c.get("passed") for c in p.get("checks", []) if not str(c.get("name", "")).startswith("null")):
        return False                       # e.g. the full-size check of the first call at the timed size
    if not s.compare or not s.compare.get("trials"):
        return False
    trials = p.get("trials", {})
    return all(t.get("passed") for t in s.compare["trials"].values()) and all(
        not e.get("problems") and not e.get("inputs_changed") for e in trials.values())


class _Watch:
    """Kills the candidate when its exchange folder outgrows its cap (its stdout and stderr
    have their own, in ``capture``) or its resident host memory does (every tenth look)."""

    def __init__(self, cand: Any, scratch: Path, scratch_bytes: int, device: str, period_s: float = 0.02):
        self.cand, self.scratch, self.scratch_bytes, self.period_s = cand, scratch, scratch_bytes, period_s
        self.device = device
        self.broken: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        looks = 0
        while not self._stop.wait(self.period_s):
            looks += 1
            broken = self.check() or (self.cand.memory_breach(self.device) if looks % 10 == 0 else None)
            if broken:
                self.broken = broken
                self.cand.kill()
                return

    def check(self) -> str | None:
        total, files = 0, 0
        for dirpath, _, names in os.walk(self.scratch):
            files += len(names)
            total += sum(_size(Path(dirpath) / n) for n in names)
            if files > 10_000 or total > self.scratch_bytes:
                return (f"the candidate wrote {total / 2**20:.1f} MiB in {files} files to its scratch folder "
                        f"(cap {self.scratch_bytes / 2**20:.0f} MiB, 10000 files) and was killed")
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        if self.broken is None:
            self.broken = self.check()


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0
