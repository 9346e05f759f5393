"""Turning a run's raw results (``sandbox.Session``) into the Verdict.

Precedence of outcomes, first match wins: the task could not run here
(not_checkable) > timeout > crashed > candidate failed to import or build
(compile_error) > a blocking run-time finding such as a patched function, a thread
or no kernel launched (rejected) > an exception in forward (incorrect, or
compile_error for a Triton compilation error, or not_checkable where other processes
held the GPU's memory: ``faults.classify``; not_checkable too where the reference process
gave no comparison) > a failed check (incorrect) > a null
control that passes on every trial (weak_task) > correct.
"""
from __future__ import annotations

from typing import Any

from kernelrag.verify.faults import out_of_memory
from kernelrag.verify.verdict import PHASES, Check, Finding, Phases, Timing, Verdict


def assemble(v: Verdict, s: Any, static: Any) -> Verdict:
    ready = s.ready or {}
    result = s.result or s.phase1 or {}
    v.phases = phases(s, v.phases)
    v.torch_version = result.get("torch_version") or ready.get("torch_version")
    v.triton_version = result.get("triton_version")
    v.gpu = result.get("gpu")
    v.untimed_cause = result.get("untimed_cause")
    v.warnings += [w for w in ready.get("warnings", []) if w not in v.warnings]
    v.warnings += [w for w in result.get("warnings", []) if w not in v.warnings]
    _sizes(v, ready)
    counts = ready.get("counts") or {}      # the task's FLOPs and minimum bytes at its own sizes
    v.flops, v.bytes_moved = counts.get("flops"), counts.get("bytes_moved")
    v.bytes_read, v.bytes_written = counts.get("bytes_read"), counts.get("bytes_written")
    if v.device == "cpu":
        v.warnings.append("checked under Triton's CPU interpreter; no time measured")
    v.isolation = getattr(s, "isolation", "") or v.isolation
    if getattr(s, "limit", None):
        v.findings.append(Finding("resource-limit", None, s.limit, True))
        return _final(v, "rejected", f"resource-limit: {s.limit}", compiled=bool(s.phase1), error=s.stderr or None)
    if s.ref_error is not None:
        if out_of_memory(str(s.ref_error)):
            v.untimed_cause = "gpu_memory"     # the task's own process ran short: a session verifies again
        return _final(v, "not_checkable", f"the task could not run here: {s.ref_error}"[:400],
                      compiled=False, checkable=False, error=(s.ready or {}).get("traceback"))
    if s.not_checkable:
        return _final(v, "not_checkable", s.not_checkable, compiled=False, checkable=False)
    if s.timed_out:
        return _final(v, "timeout", f"no result within the time limit during {s.timed_out}",
                      compiled=s.timed_out not in ("correctness trials", "import"), error=s.stderr or None)
    if s.crashed and not s.result and not s.phase1:
        return _final(v, "crashed", f"the candidate process died ({s.crashed}); the verifier survived",
                      compiled=False, error=s.stderr or None)
    v.findings += [Finding(**f) for f in result.get("findings", [])]
    v.checks += [Check(**c) for c in result.get("checks", [])]
    kind = result.get("error_kind")
    if kind == "compile_error" and result.get("phase") in ("import", None) or kind == "compile_error" \
            and str(result.get("phase", "")).startswith("init"):
        return _final(v, "compile_error", _first_line(result.get("error"), "the candidate failed to build"),
                      compiled=False, error=result.get("error"))
    v.compiled = True
    _trial_checks(v, s, result, static)
    blocking = [f for f in v.findings if f.blocking]
    if blocking:
        return _final(v, "rejected", f"{blocking[0].rule}: {blocking[0].message}", compiled=True)
    lost = getattr(s, "ref_lost", None)
    definite = [c for c in v.checks if not c.passed and not c.name.startswith("compare")]
    if lost and not kind and not definite:
        if out_of_memory(lost):
            v.untimed_cause = "gpu_memory"     # a session verifies the candidate once more, alone
        return _final(v, "not_checkable", f"not checked: the reference process gave no comparison ({lost})"[:400]
                      + "; verify again", compiled=True, checkable=False)
    if kind == "resource_limit":
        message = "host memory cap reached: " + _first_line(result.get("error"), "allocation failed")
        v.findings.append(Finding("resource-limit", None, message, True))
        return _final(v, "rejected", f"resource-limit: {message}"[:400], compiled=True, error=result.get("error"))
    if kind == "gpu_memory":
        v.untimed_cause = "gpu_memory"         # a session verifies the candidate once more
        return _final(v, "not_checkable", "not checked: other processes held the GPU's memory during the "
                      "correctness trials (" + _first_line(result.get("error"), "out of memory") + "); verify again",
                      compiled=True, checkable=False, error=result.get("error"))
    if kind:
        status = {"compile_error": "compile_error", "crashed": "crashed",
                  "not_checkable": "not_checkable"}.get(kind, "incorrect")
        reason = _first_line(result.get("error"), "forward raised an exception")
        return _final(v, status, f"{'forward raised ' if status == 'incorrect' else ''}{reason}",
                      compiled=status != "compile_error", error=result.get("error"),
                      checkable=status != "not_checkable")
    if s.crashed:
        return _final(v, "crashed", f"the candidate process died during timing ({s.crashed})",
                      compiled=True, error=s.stderr or None)
    late = result.get("timing_error")
    if late:
        status = "crashed" if late["kind"] == "crashed" else "incorrect"
        return _final(v, status, "failed at the timed (original) size: " + _first_line(late["error"], "error"),
                      compiled=True, error=late["error"])
    failed = [c for c in v.checks if not c.passed and not c.name.startswith("null-control")]
    if failed:
        return _final(v, "incorrect", f"{failed[0].name}: {failed[0].detail}"[:400], compiled=True)
    _timing(v, result, s.baseline)
    blocking = [f for f in v.findings if f.blocking]
    if blocking:
        return _final(v, "rejected", f"{blocking[0].rule}: {blocking[0].message}", compiled=True)
    failed = [c for c in v.checks if not c.passed and not c.name.startswith("null-control")]
    if failed:
        return _final(v, "incorrect", f"{failed[0].name}: {failed[0].detail}"[:400], compiled=True)
    v.correct = True
    weak = [name for name, passes in ready.get("nulls", {}).items() if passes]
    if weak:
        return _final(v, "weak_task", f"null control(s) {', '.join(weak)} pass the task's check on every trial: "
                                      "the task cannot tell a real kernel from a fake; not credited",
                      compiled=True, correct=True)
    n = sum(1 for c in v.checks if c.name.startswith("compare"))
    if n == 0:       # never credit a candidate whose output nobody compared
        return _final(v, "incorrect", "no output was compared with the reference", compiled=True)
    return _final(v, "correct", f"matches the reference on {n} trials", compiled=True, correct=True, ok=True)


def _trial_checks(v: Verdict, s: Any, result: dict, static: Any) -> None:
    ready = s.ready or {}
    plan = {t["id"]: t for t in ready.get("trials", [])}
    compared = (s.compare or {}).get("trials", {})
    worst = None
    for tid, entry in result.get("trials", {}).items():
        trial = plan.get(tid, {})
        label = f"{tid} {trial.get('dist', '')}".strip()
        if entry.get("problems"):
            v.checks.append(Check(f"output[{label}]", False, "; ".join(entry["problems"])))
        else:
            v.checks.append(Check(f"output[{label}]", True, "plain tensor, expected shape/dtype/device"))
        changed = entry.get("inputs_changed") or []
        v.checks.append(Check(f"inputs-unchanged[{label}]", not changed,
                              f"input(s) {changed} were modified by forward; never write to inputs"
                              if changed else "inputs unchanged"))
        if not entry.get("launches") and not static.uses_cuda_extension:
            v.findings.append(Finding("no-launch", None, f"no Triton kernel launched during trial {tid}: the "
                                                         "output was not computed by a kernel", True))
        cmp = compared.get(tid)
        if cmp is None:
            if "output" in entry:
                v.checks.append(Check(f"compare[{label}]", False, "the output was not compared: the reference "
                                                                  "process did not answer"))
            continue
        comps = cmp.get("comparisons", [])
        detail = cmp.get("problem") or "; ".join(
            (f"output {i}: " if len(comps) > 1 else "") + _describe(c) for i, c in enumerate(comps))
        v.checks.append(Check(f"compare[{label}]", bool(cmp.get("passed")), detail))
        for c in comps:
            if worst is None or (not c["passed"], c["mismatch_count"], c["rel_norm_err"]) > (
                    not worst["passed"], worst["mismatch_count"], worst["rel_norm_err"]):
                worst = c
        for c in comps:
            v.max_abs_err = max(v.max_abs_err or 0.0, c["max_abs_err"])
            v.max_rel_err = max(v.max_rel_err or 0.0, c["max_rel_err"])
            v.rel_norm_err = max(v.rel_norm_err or 0.0, c["rel_norm_err"])
    if worst is not None:
        v.mismatch_count = worst["mismatch_count"]
        v.first_bad_indices = worst["first_bad_indices"]
        v.nonfinite_mismatch = worst["nonfinite_mismatch"]
    det = (s.compare or {}).get("determinism")
    if det is not None:
        v.checks.append(Check("determinism", bool(det["passed"]),
                              "two calls on the same inputs agree" if det["passed"] else
                              "two calls on the same inputs differ: " + "; ".join(
                                  _describe(c) for c in det["comparisons"])))
    for name, passes in ready.get("nulls", {}).items():
        v.checks.append(Check(f"null-control[{name}]", not passes,
                              f"a {name} output fails the comparison, as it should" if not passes else
                              f"a {name} output passes the comparison on every trial: the task is weak"))


def _describe(c: dict) -> str:
    if c.get("problem"):
        return c["problem"]
    text = f"{c['mismatch_count']}/{c['numel']} out of tolerance"
    if c.get("nonfinite_mismatch"):
        text += f", NaN/Inf disagree at {c['nonfinite_mismatch']} (unwritten outputs read as NaN); among the rest"
    text += f", max abs {c['max_abs_err']:.3g}, max rel {c['max_rel_err']:.3g}, rel-norm {c['rel_norm_err']:.3g}"
    if c.get("first_bad_indices"):
        text += f", first bad {c['first_bad_indices'][:3]}"
    return text


def _timing(v: Verdict, result: dict, baseline: dict | None = None) -> None:
    timing = result.get("timing")
    if not timing:
        return
    v.kernel_ms = Timing.from_any(timing.get("kernel"))
    v.eager_ms = Timing.from_any(timing.get("eager"))
    v.compile_ms = Timing.from_any(timing.get("compile"))
    if v.compile_ms is not None:
        v.compile_source = f"interleaved with the candidate and eager ({v.compile_ms.trials} calls each)"
    elif baseline is not None:
        _cached_compile(v, baseline)
    v.timed = v.kernel_ms is not None
    blocking = list(timing.get("blocking", []))
    v.findings += [Finding("timing-integrity", None, m, True) for m in blocking]
    v.warnings += [w for w in timing.get("warnings", []) if w not in blocking]
    if v.kernel_ms and v.kernel_ms.median_ms > 0:
        if v.eager_ms:
            v.speedup_vs_eager = v.eager_ms.median_ms / v.kernel_ms.median_ms
        if v.compile_ms:
            v.speedup_vs_compile = v.compile_ms.median_ms / v.kernel_ms.median_ms
    roof = result.get("roofline") or {}
    for ours, theirs in (("achieved_gbps", "achieved_gbps"), ("achieved_tflops", "achieved_tflops"),
                         ("frac_bandwidth", "frac_bandwidth"), ("frac_compute", "frac_compute"),
                         ("roofline_floor_ms", "floor_ms"), ("frac_roofline", "frac_roofline"),
                         ("ceiling", "ceiling"), ("memory_ceiling", "memory_ceiling")):
        setattr(v, ours, roof.get(theirs))
    v.warnings += list(roof.get("warnings", []))
    v.warnings += [f for f in v.review_flags() if f not in v.warnings]
    ceilings = result.get("ceilings") or {}
    v.gpu = ceilings.get("gpu") or v.gpu
    v.driver = ceilings.get("driver") or v.driver
    proof = result.get("launch")
    if proof:
        v.warnings += list(proof.get("warnings", []))
        v.findings += [Finding("launch-proof", None, m, True) for m in proof.get("blocking", [])]


def _sizes(v: Verdict, ready: dict) -> None:
    primary, second = ready.get("primary") or {}, ready.get("second") or {}
    sizes: dict[str, list[int]] = {}
    for name, (orig, new) in (primary.get("sizes") or {}).items():
        sizes[name] = [orig, new]
    for name, (orig, new) in (second.get("sizes") or {}).items():
        sizes.setdefault(name, [orig, orig]).append(new)
    v.shrunk_sizes = sizes or None
    if sizes:
        v.warnings.append("sizes were shrunk for this check (see shrunk_sizes)")


def _first_line(text: str | None, default: str) -> str:
    if not text:
        return default
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else default


def _final(v: Verdict, status: str, reason: str, *, compiled: bool, checkable: bool = True,
           correct: bool = False, ok: bool = False, error: str | None = None) -> Verdict:
    v.status, v.reason, v.compiled, v.checkable, v.correct, v.ok = status, reason, compiled, checkable, correct, ok
    if error:
        v.error = error[-4000:]
    return v


def _cached_compile(v: Verdict, baseline: dict) -> None:
    """The task's torch.compile time from the session's baseline, scaled by eager's drift:
    compile/eager was measured side by side then, eager/kernel side by side now."""
    compile_ms, eager_then = Timing.from_any(baseline.get("compile")), Timing.from_any(baseline.get("eager"))
    if compile_ms is None or eager_then is None or v.eager_ms is None or eager_then.median_ms <= 0:
        if baseline.get("error"):
            v.warnings.append(f"torch.compile baseline failed: {baseline['error']}"[:300])
            if out_of_memory(str(baseline["error"])):
                v.untimed_cause = "gpu_memory"     # a session verifies the candidate once more
        return
    drift = v.eager_ms.median_ms / eager_then.median_ms
    v.compile_ms = Timing(median_ms=compile_ms.median_ms * drift, iqr_ms=compile_ms.iqr_ms * drift,
                          trials=compile_ms.trials)
    v.compile_source = (f"cached: measured once for this task in a reference process ({compile_ms.trials} calls "
                        f"interleaved with eager, {compile_ms.median_ms:.4g} ms vs eager {eager_then.median_ms:.4g} ms), "
                        f"scaled by eager's drift since (x{drift:.3f})")
    stages = baseline.get("stages_s") or {}
    if isinstance(stages, dict) and isinstance(baseline.get("measured_s"), (int, float)):
        parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in stages.items() if isinstance(v, (int, float)))
        v.compile_source += f"; the baseline took {baseline['measured_s']:.1f} s ({parts})"
    if (baseline.get("compile_cache") or {}).get("hit"):
        v.compile_source += "; its compiled code came from an earlier session's cache (timed afresh)"
    if abs(drift - 1.0) > 0.1:
        v.warnings.append(f"eager PyTorch ran x{drift:.2f} its time at the torch.compile baseline's measurement: "
                          "the GPU's state changed; the compile speedup is less certain")


def phases(s: Any, given: Phases | None = None) -> Phases:
    """Per-phase wall seconds from the run's clocks (see ``Phases``). The candidate process
    writes its own clock, so anything in it that is not a known phase and a number is
    ignored: timing information never turns into an error."""
    ph = given or Phases()
    result = s.result or s.phase1 or {}
    clock, parent = _numbers(result.get("clock")), _numbers(s.clock)
    ready = s.ready or {}
    result = dict(result, durations={k: v for k, v in _numbers(result.get("durations")).items()
                                     if k in PHASES})

    def span(a: str, b: str) -> float | None:
        return clock[b] - clock[a] if a in clock and b in clock else None

    if "main" in clock and "spawn" in parent:
        ph.add("process_start", clock["main"] - parent["spawn"])
    ph.add("imports", span("main", "imports") if "imports" in clock else span("main", "ready"))
    if "imports" in clock:
        ph.add("setup", span("job", "ready"))
    ph.add("candidate_import", span("ready", "imported"))
    gate = result.get("gate") if isinstance(result.get("gate"), dict) else {}
    waits = _numbers(gate.get("waited_s"))       # the candidate's waits for its share back after compiles
    trials = span("plan", "trials")
    ph.add("correctness", None if trials is None else max(0.0, trials - waits.get("correctness", 0.0)))
    ph.add("gpu_wait", sum(waits.values()) or None)
    yielded = _numbers(gate).get("compiles_yielded")
    if yielded:
        ph.yielded = int(yielded)
    if clock.get("forked"):
        ph.reused.append("zygote-fork")
    if clock.get("warm"):
        ph.reused.append("warm-process")
    builds = _numbers(result.get("native_builds"))
    if builds.get("served"):           # Triton launchers a trusted build shared (verify.triton_seed)
        ph.reused.append(f"native-builds ({int(builds['served'])} served, {int(builds.get('built', 0))} built)")
    build = (ready.get("seconds") or {}).get("reference_build")
    ph.add("reference_build", build)
    waited = span("imported", "plan")
    if waited is not None:
        ph.add("plan_wait", max(0.0, waited - (build or 0.0)))
    if "result" in parent and "ended" in parent:
        ph.add("teardown", parent["ended"] - parent["result"])
    if ready.get("reused"):
        ph.reused.append("reference")
    ph.add("comparison", ((s.compare or {}).get("seconds") or {}).get("comparison"))
    ph.add("gpu_wait", parent.get("gpu_wait"))
    base = s.baseline or {}
    if base:                            # one figure per task and session, shared by its candidates
        ph.add("baseline", base.get("waited_s") or 0.0)
        ph.reused.append("compile-baseline")
    ph.add("ceilings", parent.get("ceilings"))
    for name, seconds in (result.get("durations") or {}).items():
        ph.add(name, max(0.0, seconds - waits.get(name, 0.0)))
    return ph


def _numbers(data: Any) -> dict[str, float]:
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(k, str) and isinstance(v, (int, float))
            and not isinstance(v, bool) and v == v and abs(v) != float("inf")}
