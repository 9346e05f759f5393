"""Entry point of the verifier's subprocesses: ``python -m kernelrag.verify.worker ROLE [JOB]``.

ROLE ``reference`` serves ``kernelrag.verify.reference`` jobs (from JOB, then from
stdin). ROLE ``candidate`` runs the
candidate, in its own scratch directory (the working directory), like this:

1. install the ``Guard`` (identities, flags, launch counter), then import the candidate;
2. wait for the plan file (sizes, seeds, distributions, input digests, expected
   output structure): it is written only after the reference process has finished;
3. per trial: regenerate the inputs and check their digest; copy them into the same
   input buffers every trial (a cache keyed by ``data_ptr`` then returns stale
   results); build the reference Model with redrawn parameters and load its
   ``state_dict`` into a fresh ModelNew; call it with NaN-filled allocations; check
   the output structure, that inputs are unchanged, that a kernel launched and that
   nothing was patched; save the outputs for the reference process to compare;
4. write ``phase1.json``; on a GPU, wait for the "go" file ("time" only when the
   outputs were correct) and measure; write ``result.json``.

Exceptions from candidate code end up in the result, never as a crash of this
process; a crash, ``os._exit`` or a hang is seen by the parent.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from kernelrag.verify.exchange import IMPORTED_FILE, write_json
from kernelrag.verify.faults import InputsDiffer, classify, error_text


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (no orphans if the parent is killed)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


READY_FILE = "ready"


def say_ready() -> None:
    """A process started ahead of its job tells the parent it is ready (``Child.started``)."""
    Path(READY_FILE).touch()


def wait_json(path: Path) -> dict[str, Any]:
    """Wait for the parent to write ``path`` (atomically); the parent kills us on timeout.

    If the process that started us goes away, nobody will write it: leave.
    """
    parent = os.getppid()
    while not path.exists():
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.01)
    return json.loads(path.read_text())


class CandidateRun:
    def __init__(self, job: dict[str, Any]):
        import torch

        from kernelrag.verify.guard import Guard

        self.torch = torch
        self.job = job
        self.device = job["device"]
        self.ceilings = None              # the GPU's cached ceilings, from the parent's "go" file
        self.result: dict[str, Any] = {"phase": "import", "findings": [], "trials": {}, "checks": [],
                                       "warnings": [], "torch_version": torch.__version__}
        self.guard = Guard(self.device, job["interpret"])
        import triton

        self.result["triton_version"] = triton.__version__
        from kernelrag.verify import triton_seed

        self.result["native_builds"] = triton_seed.COUNTS     # filled as Triton builds launchers
        if self.device == "cuda" and torch.cuda.is_available():
            self.result["gpu"] = torch.cuda.get_device_name()
        self.out_dir = Path(job["out_dir"])
        self.kept: dict[str, Any] = {}
        self.model_cls: Any = None

    def findings(self, where: str, **kw) -> None:
        self.result["findings"] += [f.__dict__ for f in self.guard.check(where, **kw)]

    def check(self, name: str, passed: bool, detail: str = "") -> None:
        self.result["checks"].append({"name": name, "passed": passed, "detail": detail})

    # ------------------------------------------------------------ phases
    def load_candidate(self) -> Any:
        spec = importlib.util.spec_from_file_location(self.job["module_name"], self.job["candidate_path"])
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.job["module_name"]] = module
        spec.loader.exec_module(module)
        return module

    def run_trials(self, model_cls: Any, plan: dict[str, Any]) -> None:
        from kernelrag.verify import correctness as C

        torch = self.torch
        mods = {slot: C.load_task(v["source"], f"cand-{slot}") for slot, v in plan["variants"].items() if v}
        buffers: dict[str, list] = {}
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for trial in plan["trials"]:
            tid, mod = trial["id"], mods[trial["slot"]]
            inputs = C.make_inputs(mod, trial["seed"], trial["dist"], self.device)
            if not C.digests_match(C.digest(inputs), trial["digest"]):
                raise InputsDiffer(f"inputs of trial {tid} differ between processes: the task's input "
                                   "generation is not reproducible from a seed")
            bufs = self._into_buffers(buffers, trial["slot"], inputs)
            pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in bufs]
            reference_model = C.build_model(mod, trial["seed"], self.device)
            state = reference_model.state_dict()
            self.result["phase"] = f"init {tid}"
            model = model_cls(*mod.get_init_inputs()).to(self.device)
            problems, note = C.load_reference_state(model, state)
            if problems:
                self.check("state_dict", False, problems[0])
                return
            if note and not any(c["name"] == "state_dict" for c in self.result.get("checks", [])):
                self.check("state_dict", True, note)
            del reference_model
            self.result["phase"] = f"forward {tid}"
            C.poison_cuda_cache(2 * C.nbytes_of(inputs))
            before = self.guard.launches
            C.set_poison_fill(True)
            with torch.no_grad():
                out = model(*bufs)
            if self.device == "cuda":
                torch.cuda.synchronize()
            C.set_poison_fill(False)
            launches = self.guard.launches - before
            outs, problem = C.flatten_outputs(out)
            problems = [problem] if problem else C.output_problems(outs, trial["expected"])
            odd = [type(o).__name__ for o in outs if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor]
            if odd:
                self.result["findings"].append({
                    "rule": "tensor-subclass", "line": None, "blocking": True,
                    "message": f"forward returned a {odd[0]} (a torch.Tensor subclass): outputs must be plain "
                               "tensors holding computed values"})
            changed = [i for i, (a, b) in enumerate(zip(bufs, pristine))
                       if isinstance(a, torch.Tensor) and not (a.shape == b.shape and torch.equal(a, b))]
            self.findings(f"trial {tid}")
            entry = {"launches": launches, "problems": problems, "inputs_changed": changed}
            self.result["trials"][tid] = entry
            if problems:
                return
            path = self.out_dir / f"{tid}.pt"
            torch.save([o.detach() for o in outs], path)
            entry["output"] = str(path)
            if tid == "t0":
                self.kept = {"outs": [o.detach().clone() for o in outs], "trial": trial, "mod": mod}

    def trials_clean(self) -> bool:
        """Every trial ran and returned well-formed outputs over unchanged inputs (the
        values are compared by the reference process, later)."""
        trials = self.result["trials"].values()
        return bool(trials) and all(not t["problems"] and not t["inputs_changed"] for t in trials) \
            and not any(f.get("blocking") for f in self.result["findings"])

    def _into_buffers(self, buffers: dict[str, list], slot: str, inputs: list) -> list:
        """Copy ``inputs`` into the slot's persistent tensors (same storage every trial)."""
        torch = self.torch

        def fits(a: Any, b: Any) -> bool:
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                return a.shape == b.shape and a.dtype == b.dtype
            return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and a == b

        old = buffers.get(slot)
        if old is None or len(old) != len(inputs) or not all(fits(a, b) for a, b in zip(old, inputs)):
            buffers[slot] = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
            return buffers[slot]
        for a, b in zip(old, inputs):
            if isinstance(a, torch.Tensor):
                a.copy_(b)
        return old


def preimport() -> None:
    """What every candidate process needs before its job: torch, triton and the verifier's
    modules (``timing`` captures the real timer functions here); on a GPU also the CUDA
    context and Triton's compiler and driver (``warm_gpu``). Only a process started as a
    new interpreter does this (a CPU zygote must not touch CUDA: it forks)."""
    import torch  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from kernelrag.verify import correctness, faults, guard, measure, tolerances  # noqa: F401
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        try:
            from kernelrag.verify import launch, timing  # noqa: F401
        except ImportError:
            pass
        import torch._dynamo  # noqa: F401 - the guard imports it on a GPU: 2-6 s off the candidate's clock
        warm_gpu()


def warm_gpu() -> None:
    """Create the CUDA context and compile and launch one tiny Triton kernel, before the job:
    the candidate's first call would otherwise pay for the context, Triton's driver helper
    and the compiler's start-up. Nothing of it is visible to the candidate's checks (the
    guard starts with the job); a failure here only means the candidate pays later."""
    try:
        import torch
        import triton
        import triton.language as tl

        if not torch.cuda.is_available():
            return

        @triton.jit
        def _fill(out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, offs.to(tl.float32), mask=offs < n)

        buf = torch.empty(64, device="cuda")
        _fill[(1,)](buf, 64, BLOCK=64)
        torch.cuda.synchronize()
        del buf
    except Exception:   # noqa: BLE001 - warming is an optimisation only
        pass


def run_candidate(job: dict[str, Any], stamps: dict[str, float] | None = None) -> int:
    """Run one candidate job; ``stamps``: monotonic times of process start and end of imports
    (the parent turns them into the verdict's phases; ``time.monotonic`` is system-wide)."""
    die_with_parent()
    from kernelrag.verify.jail import set_limits

    set_limits(job.get("limits") or {})      # CPU seconds, file size, no core dumps, host memory
    phase1, final = Path(job["phase1_path"]), Path(job["result_path"])
    t_job = time.monotonic()
    link, yields = None, False
    if job.get("yield_gate"):          # a session's GPU gate: compiles hold none of it (``yielding``)
        import torch

        from kernelrag.verify.yielding import Link

        link = Link(Path(job["plan_path"]).parent, synchronize=torch.cuda.synchronize)
        yields = link.around_compiles()
    run = CandidateRun(job)
    res = run.result
    clock = res["clock"] = {**(stamps or {}), "job": t_job, "ready": time.monotonic()}
    try:
        module = run.load_candidate()
    except BaseException as exc:   # noqa: BLE001 - the candidate failed to import
        res.update(phase="import", error=error_text(exc, job["candidate_path"]), error_kind="compile_error")
        write_json(phase1, res)
        write_json(final, res)
        return 0
    run.findings("import")
    clock["imported"] = time.monotonic()
    Path(job["plan_path"]).with_name(IMPORTED_FILE).touch()   # the parent asks for the GPU only now
    model_cls = run.model_cls = getattr(module, "ModelNew", None)
    plan = wait_json(Path(job["plan_path"]))
    clock["plan"] = time.monotonic()
    if link is not None:
        link.enabled = yields          # the parent serves requests from the plan on
    if plan.get("cmd") == "stop" or model_cls is None:
        if model_cls is None:
            res.update(error="the candidate defines no ModelNew class", error_kind="compile_error")
        write_json(phase1, res)
        write_json(final, res)
        return 0
    try:
        run.run_trials(model_cls, plan)
        res["phase"] = "trials done"
    except BaseException as exc:   # noqa: BLE001 - candidate code raised
        kind = classify(exc, run.torch)
        if kind == "gpu_memory":       # other processes held the GPU's memory: not checked, verified again
            run.torch.cuda.empty_cache()
            res["untimed_cause"] = "gpu_memory"
        elif res["phase"].startswith("init"):
            kind = "compile_error"
        res.update(error=error_text(exc, job["candidate_path"]), error_kind=kind)
    clock["trials"] = time.monotonic()
    prepared = None
    if job.get("wait_for_go") and "error" not in res and run.trials_clean():
        from kernelrag.verify.measure import first_call, late_failure

        if link is not None:
            link.phase = "first_call"
        try:
            prepared = first_call(run, model_cls, plan)
        except BaseException as exc:   # noqa: BLE001 - building or running at the timed size failed
            late_failure(run, exc, "building the candidate at the timed size")
    if link is not None:
        link.enabled = False           # from here on the parent holds the GPU as the go says
        res["gate"] = {"compiles_yielded": link.compiles,
                       "waited_s": {k: round(v, 3) for k, v in link.waited_s.items()}}
    res["dot_precisions"] = sorted(run.guard.dot_precisions)
    write_json(phase1, res)
    if job.get("wait_for_go"):
        go_message = wait_json(Path(job["go_path"]))
        go, run.ceilings = go_message.get("go"), go_message.get("ceilings")
        clock["go"] = time.monotonic()
        if go == "time" and "error" not in res and prepared is not None:
            from kernelrag.verify.measure import late_failure, measure

            if link is not None:
                link.phase = "after_timing"
            try:
                measure(run, prepared, plan, after_timing=(lambda: link.ask("shared")) if link else None)
            except BaseException as exc:   # noqa: BLE001 - running at the timed size failed
                late_failure(run, exc, "the timed run")
    if link is not None:
        res["gate"]["waited_s"] = {k: round(v, 3) for k, v in link.waited_s.items()}
    write_json(final, res)
    return 0


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["reference"] and len(argv) in (1, 2):
        from kernelrag.verify.reference import main as reference_main

        die_with_parent()
        return reference_main(json.loads(Path(argv[1]).read_text()) if len(argv) == 2 else None)
    if len(argv) != 2 or argv[0] != "candidate":
        print("usage: python -m kernelrag.verify.worker {reference [JOB.json] | candidate JOB.json}",
              file=sys.stderr)
        return 2
    job_path = Path(argv[1])
    stamps = {"main": started}
    if not job_path.exists():
        # a warm process from a pool: import now, then wait for the job to be written
        die_with_parent()
        preimport()
        stamps["imports"] = time.monotonic()
        stamps["warm"] = 1.0
        say_ready()
        return run_candidate(wait_json(job_path), stamps)
    return run_candidate(json.loads(job_path.read_text()), stamps)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # skip interpreter teardown (seconds with torch and triton loaded)
