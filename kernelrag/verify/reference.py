"""The reference process: computes reference outputs and compares candidates' outputs.

It never imports candidate code. It picks the task sizes (the first variant of each
ladder that runs and fits the byte budget), computes every trial's reference in high
precision (float64 for fp32 tasks, float32 for 16/8-bit tasks), runs the null
controls, reports a plan, then waits. When the candidate process has written its
outputs, it loads them (``weights_only``: plain tensors, no code) and compares them
with the references it kept in memory. References never touch the disk.

Protocol: lines ``@@kernelrag <json>`` on stdout; commands as JSON lines on stdin.

The process keeps the prepared references of its last few jobs, keyed by the whole job
(task source and sizes, seed, trials, budgets, tolerance, device; torch and triton are
those of the process): a session that verifies many candidates of one task with fixed
trial seeds builds the references once. They stay in this process's memory only. On a
GPU it also measures the torch.compile baseline of a task on request (``Baseline``):
this process never runs candidate code, so no candidate can touch that figure.
"""
from __future__ import annotations

import collections
import copy
import hashlib
import json
import sys
import time
import traceback
from typing import Any

import torch

from kernelrag.verify import correctness as C
from kernelrag.verify.compiled import Baseline, wait_warm, warm_in_background
from kernelrag.verify.tolerances import compare, compare_outputs, slack_of, tolerance_for

MARK = "@@kernelrag "
OTHER_SEED = 7919
NULL_CONTROLS = ("zeros", "constant", "poisoned", "other_seed")
# CPU mode has no timing to re-check outputs (VERIFY.md 25): this many more calls, on fresh
# inputs at the task's smallest size, after the trials: with them more calls are compared than
# a GPU run makes before its timed (re-checked) rounds (the trials, one call, 10 of warm-up)
LATE_CALLS = {"cpu": 12, "cuda": 0}
LATE_SEED = 1000
KEEP_PREPARED = 4          # jobs whose references stay in memory


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(MARK + json.dumps(message) + "\n")
    sys.stdout.flush()


class Reference:
    def __init__(self, job: dict[str, Any]):
        self.job = job
        self.device = job["device"]
        self.warnings: list[str] = []
        self.mods: dict[str, Any] = {}
        self.refs: dict[str, list[torch.Tensor]] = {}
        self.slack: dict[str, list[torch.Tensor | None] | None] = {}   # |native - reference| per output
        self.tols: list = []
        self.hi_dtype = torch.float64
        self.reasons: list[str] = []          # why each size was not used

    # ------------------------------------------------------------ sizes
    def choose(self, slot: str, ladder: list[dict], budget_bytes: int, skip: str | None = None) -> dict | None:
        """The first variant of ``ladder`` that runs and fits the budget (``skip``: a source already used)."""
        reasons = []
        for variant in ladder:
            if variant["source"] == skip:
                continue
            try:
                mod = C.load_task(variant["source"], f"{slot}-{variant['name']}")
                inputs = C.make_inputs(mod, self.job["seed"], "task", self.device)
                model = C.build_model(mod, self.job["seed"], self.device)
                with torch.no_grad():
                    outs, problem = C.flatten_outputs(model(*inputs))
            except Exception as exc:   # noqa: BLE001 - a size the task cannot run at: try the next
                reasons.append(f"{variant['name']}: {type(exc).__name__}: {exc}"[:300])
                continue
            if problem:
                raise TaskProblem(f"the task's Model.forward {problem}")
            size = C.nbytes_of(inputs) + C.nbytes_of(outs)
            if size > budget_bytes:
                reasons.append(f"{variant['name']}: inputs+outputs {size / 2**20:.1f} MiB > budget "
                               f"{budget_bytes / 2**20:.1f} MiB")
                continue
            self.mods[slot] = mod
            return variant
        self.reasons = reasons
        return None

    # ------------------------------------------------------------ references
    def _reference(self, slot: str, seed: int, dist: str) -> tuple[list, list, list]:
        mod = self.mods[slot]
        inputs = C.make_inputs(mod, seed, dist, self.device)
        model = C.build_model(mod, seed, self.device)
        with torch.no_grad():
            native, _ = C.flatten_outputs(model(*[x.clone() if isinstance(x, torch.Tensor) else x
                                                  for x in inputs]))
            try:
                hi_model = copy.deepcopy(model).to(self.hi_dtype)
                hi_in = [x.to(self.hi_dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                         for x in inputs]
                hi, _ = C.flatten_outputs(hi_model(*hi_in))
            except Exception as exc:   # noqa: BLE001 - fall back to the native-precision reference
                self.warn(f"{self.hi_dtype} reference failed ({type(exc).__name__}: {exc}); "
                           "compared with the task's own precision instead")
                hi = native
        keep = [h.detach() if not h.is_floating_point() else
                h.detach().to(torch.float64 if h.numel() <= 2**24 else torch.float32) for h in hi]
        return inputs, native, keep

    def build_trials(self) -> list[dict[str, Any]]:
        seed, n = self.job["seed"], self.job["trials"]
        first_inputs, native, refs = self._reference("primary", seed, "task")
        if any(o.is_floating_point() and o.element_size() <= 2 for o in native) or any(
                isinstance(x, torch.Tensor) and x.is_floating_point() and x.element_size() <= 2
                for x in first_inputs):
            self.hi_dtype = torch.float32
            first_inputs, native, refs = self._reference("primary", seed, "task")
        self.tols = [tolerance_for(o.dtype, self.job.get("tolerance")) for o in native]
        self.expected = C.structure(native)
        self.input_dtypes = sorted({str(x.dtype).removeprefix("torch.") for x in first_inputs
                                    if isinstance(x, torch.Tensor)})
        finite = all(bool(torch.isfinite(r).all()) for r in refs if r.is_floating_point())
        nonneg = all(bool((x >= 0).all()) for x in first_inputs
                     if isinstance(x, torch.Tensor) and x.is_floating_point())
        trials = [self._trial("t0", "primary", seed, "task", first_inputs, refs, native=native)]
        for t in range(1, n):
            dist = C.DISTRIBUTIONS[t % len(C.DISTRIBUTIONS)]
            tseed = seed + t
            inputs, native_t, refs_t = self._reference("primary", tseed, dist)
            if finite and not _finite(refs_t, native_t):
                tried = [dist]
                if nonneg:
                    dist = dist + "+abs"
                    tried.append(dist)
                    inputs, native_t, refs_t = self._reference("primary", tseed, dist)
                if not _finite(refs_t, native_t):
                    dist = "task"
                    inputs, native_t, refs_t = self._reference("primary", tseed, dist)
                self.warn(f"trial {t}: {' and '.join(tried)} inputs gave a non-finite reference; used {dist}")
            trials.append(self._trial(f"t{t}", "primary", tseed, dist, inputs, refs_t, native=native_t))
        repeat = dict(trials[0], id="repeat")
        self.refs["repeat"] = self.refs["t0"]
        self.slack["repeat"] = self.slack["t0"]
        trials.append(repeat)
        if "second" in self.mods:
            inputs, native2, refs2 = self._reference("second", seed + 100, "normal")
            trials.append(self._trial("shape2", "second", seed + 100, "normal", inputs, refs2,
                                      expected=C.structure(native2), native=native2))
        for i in range(LATE_CALLS.get(self.device, 0) if "late" in self.mods else 0):
            dist = "normal" if not nonneg else "normal+abs"
            inputs, native_l, refs_l = self._reference("late", seed + LATE_SEED + i, dist)
            if finite and not _finite(refs_l, native_l):
                dist = "task"
                inputs, native_l, refs_l = self._reference("late", seed + LATE_SEED + i, dist)
            trials.append(self._trial(f"late{i}", "late", seed + LATE_SEED + i, dist, inputs, refs_l,
                                      expected=C.structure(native_l), native=native_l))
        return trials

    def _trial(self, tid, slot, seed, dist, inputs, refs, expected=None, native=None) -> dict[str, Any]:
        self.refs[tid] = refs
        # The task's own PyTorch output, in the task's precision, differs from the
        # high-precision reference by its own rounding: that difference calibrates the
        # tolerance where the task is ill-conditioned (see tolerances.compare).
        self.slack[tid] = [slack_of(n, r) for n, r in zip(native, refs)] if native is not None else None
        return {"id": tid, "slot": slot, "seed": seed, "dist": dist, "digest": C.digest(inputs),
                "expected": expected or self.expected}

    # ------------------------------------------------------------ null controls
    def null_controls(self, trials: list[dict]) -> dict[str, bool]:
        """For each control: does it pass the comparison on every primary trial? (True = task weak)"""
        primary = [t for t in trials if t["slot"] == "primary" and t["id"].startswith("t")]
        result = {}
        for name in NULL_CONTROLS:
            passes = True
            for t in primary:
                fakes = self._fake(name, t)
                slacks = self.slack.get(t["id"]) or [None] * len(self.tols)
                if fakes is None or not all(compare(f, r, tol, sl).passed for f, r, tol, sl
                                            in zip(fakes, self.refs[t["id"]], self.tols, slacks)):
                    passes = False
                    break
            result[name] = passes
        return result

    def _fake(self, name: str, trial: dict) -> list[torch.Tensor] | None:
        refs = self.refs[trial["id"]]
        if name == "other_seed":
            return self._reference("primary", trial["seed"] + OTHER_SEED, trial["dist"])[2]
        fakes = []
        for r in refs:
            if name == "zeros":
                fakes.append(torch.zeros_like(r))
            elif name == "constant":
                if r.numel() <= 1:
                    return None        # a single value is its own mean: the control says nothing
                fin = r[torch.isfinite(r)] if r.is_floating_point() else r
                mean = fin.double().mean() if fin.numel() else torch.tensor(0.0)
                fakes.append(torch.full_like(r, float(mean) if r.is_floating_point() else round(float(mean))))
            elif name == "poisoned":
                fill = float("nan") if r.is_floating_point() else (True if r.dtype == torch.bool
                                                                  else torch.iinfo(r.dtype).max)
                fakes.append(torch.full_like(r, fill))
        return fakes

    # ------------------------------------------------------------ comparing
    def compare(self, outputs: dict[str, str]) -> dict[str, Any]:
        loaded, report = {}, {}
        for tid, path in outputs.items():
            if tid not in self.refs:
                continue
            try:
                loaded[tid] = torch.load(path, map_location=self.device, weights_only=True)
            except Exception as exc:   # noqa: BLE001 - an unreadable output file fails that trial
                report[tid] = {"passed": False, "comparisons": [], "problem": f"output not readable: {exc}"}
                continue
            try:
                comps = compare_outputs(list(loaded[tid]), self.refs[tid], self._tols_for(tid),
                                        self.slack.get(tid))
            except Exception as exc:   # noqa: BLE001 - e.g. an output on another device: that trial fails
                report[tid] = {"passed": False, "comparisons": [], "problem": f"could not compare: {exc}"[:300]}
                continue
            report[tid] = {"passed": all(c.passed for c in comps), "comparisons": [c.to_dict() for c in comps]}
        det = None
        if "repeat" in loaded and "t0" in loaded:
            comps = compare_outputs(list(loaded["repeat"]), list(loaded["t0"]), self.tols)
            det = {"passed": all(c.passed for c in comps), "comparisons": [c.to_dict() for c in comps]}
        return {"trials": report, "determinism": det}

    def _tols_for(self, tid: str):
        refs = self.refs[tid]
        return self.tols if len(refs) == len(self.tols) else [tolerance_for(r.dtype) for r in refs]

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)


class TaskProblem(Exception):
    """The task itself cannot be checked (reported as not_checkable)."""


def _finite(refs: list[torch.Tensor], natives: list[torch.Tensor] | None = None) -> bool:
    """Every floating reference is finite, cast to the task's own output dtype when ``natives`` are
    given: a value past fp32's range (a cumprod of large inputs) is one no fp32 output can match."""
    pairs = zip(refs, natives) if natives is not None else ((r, r) for r in refs)
    return all(bool(torch.isfinite(r.to(n.dtype) if n.is_floating_point() else r).all())
               for r, n in pairs if r.is_floating_point())


def prepare(job: dict[str, Any]) -> tuple[Reference | None, dict[str, Any]]:
    """Run one job up to the plan; returns the Reference (None on failure) and the message."""
    device = job["device"]
    if device == "cuda" and not torch.cuda.is_available():
        return None, {"ok": False, "kind": "no_cuda", "error": "torch.cuda.is_available() is False"}
    C.pin_fp32_semantics()                      # a previous task may have changed global state
    torch.set_grad_enabled(True)
    ref = Reference(job)
    try:
        primary = ref.choose("primary", job["primary"], job["budget_primary"])
        if primary is None:
            raise TaskProblem("no size of the task runs within the budget: " + "; ".join(ref.reasons))
        second = (ref.choose("second", job["second"], job["budget_second"], skip=primary["source"])
                  if job["second"] else None)
        late = (ref.choose("late", list(reversed(job["primary"])), job["budget_primary"])
                if LATE_CALLS.get(device) else None)                 # the smallest size that runs
        if job["second"] and second is None:
            ref.warn("no second shape fits the budget; checked one shape only")
        trials = ref.build_trials()
        nulls = ref.null_controls(trials)
        counts = None
        if job.get("count") and job.get("original"):
            from kernelrag.verify.counting import count

            counts = count(C.load_task(job["original"]["source"], "original")).to_dict()
    except Exception as exc:   # noqa: BLE001 - the task failed: say so instead of dying
        return None, {"ok": False, "kind": "task", "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()[-4000:]}
    return ref, {"ok": True, "trials": trials, "primary": primary, "second": second, "late": late, "nulls": nulls,
                 "tolerances": [t.to_dict() for t in ref.tols], "input_dtypes": ref.input_dtypes,
                 "hi_dtype": str(ref.hi_dtype).removeprefix("torch."), "counts": counts,
                 "warnings": ref.warnings, "torch_version": torch.__version__}


def job_key(job: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()


class Prepared:
    """The last ``KEEP_PREPARED`` jobs' references (a successful prepare only)."""

    def __init__(self):
        self.kept: collections.OrderedDict[str, tuple[Reference, dict]] = collections.OrderedDict()

    def get(self, job: dict[str, Any]) -> tuple[Reference | None, dict[str, Any]]:
        key = job_key(job)
        t0 = time.monotonic()
        if key in self.kept:
            C.pin_fp32_semantics()
            torch.set_grad_enabled(True)
            self.kept.move_to_end(key)
            ref, message = self.kept[key]
            return ref, dict(message, reused=True, seconds={"reference_build": time.monotonic() - t0})
        ref, message = prepare(job)
        message["seconds"] = {"reference_build": time.monotonic() - t0}
        if ref is not None:
            self.kept[key] = (ref, message)
            while len(self.kept) > KEEP_PREPARED:
                self.kept.popitem(last=False)
        return ref, message


def main(job: dict[str, Any] | None = None) -> int:
    """Serve jobs until stdin closes: ``ping`` -> pong once started and warm, ``job`` -> plan,
    ``compare`` -> report, ``baseline_compile`` then ``baseline_time`` -> torch.compile and
    eager times (``Baseline``), ``done`` -> next job.

    The process can serve many verifications in a row (it never runs candidate code);
    a job it has prepared before reuses its ``Reference`` (see ``Prepared``).
    """
    ref, prepared, base = None, Prepared(), Baseline(send)
    warm_in_background()
    if job is not None:
        wait_warm()
        ref, message = prepared.get(job)
        send(message)
    for line in sys.stdin:
        cmd = json.loads(line)
        kind = cmd.get("cmd")
        if kind == "job":
            # never beside inductor's warm-up: a compile saves and restores process-wide state
            # (the RNG's, numerics flags) around itself; on the H200 (2026-12-04) the first
            # reference of a fresh process, computed while it ran, was off by TF32-sized errors
            # and failed two correct fp32 kernels on that trial alone
            wait_warm()
            ref, message = prepared.get(cmd["job"])
            send(message)
        elif kind in ("baseline_compile", "baseline_time"):
            if not torch.cuda.is_available():
                send({"ok": True, "compile": None, "error": "no CUDA device in the reference process"})
            else:
                send(base.compile(cmd) if kind == "baseline_compile" else base.time(cmd))
        elif kind == "compare" and ref is not None:
            t0 = time.monotonic()
            report = ref.compare(cmd["outputs"])
            send({"ok": True, **report, "seconds": {"comparison": time.monotonic() - t0}})
        elif kind == "ping":             # up, warm and idle: the parent takes the GPU only now
            wait_warm()
            send({"ok": True, "pong": True})
        elif kind == "done":
            ref = None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            send({"ok": True, "idle": True})
        else:
            break
    return 0
