"""GPU measurement inside the candidate process, after its outputs were found correct.

Calls the GPU part of the verifier (``timing``, ``launch``, ``ceilings``, ``roofline``)
at the task's original sizes, then runs the candidate once more on the first trial's
inputs and checks the output still matches what it returned before timing (a kernel
whose results change once it has been called many times, e.g. a replay cache, fails).

The candidate's first call at the timed size (``first_call``) is made before the
parent's "go", while the GPU is shared, outside the timer: if it fails, that is the
candidate's failure (``timing_error``), and no timing follows. When the correctness
trials ran at smaller sizes (memory budget), that call's output is also compared with
the task's eager output (``full-size`` check). ``measure`` then times, with the GPU alone.
Failures of the measurement itself are warnings. Results go into the worker's result
dict; nothing here raises.
"""
from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from kernelrag.verify import correctness as C
from kernelrag.verify.faults import classify, error_text, gpu_memory_short
from kernelrag.verify.tolerances import Tolerance, compare_outputs


class Prepared:
    """What the first call at the timed size leaves for the measurement: the models, the
    input maker, the output dtype and the tightest relative-norm tolerance."""

    def __init__(self, reference_model: Any, model: Any, make_inputs: Any, dtype: str,
                 rel_norm_tol: float | None):
        self.reference_model, self.model, self.make_inputs = reference_model, model, make_inputs
        self.dtype, self.rel_norm_tol = dtype, rel_norm_tol


def first_call(run: Any, model_cls: Any, plan: dict[str, Any]) -> Prepared | None:
    """The candidate's first call at the timed size, with the full-size check; run before
    the parent's "go", while the GPU is shared (its compiles hold nothing: ``yielding``).
    None when it failed (``timing_error``: the candidate's failure) or the timing modules
    are missing (a warning)."""
    res, torch, device = run.result, run.torch, run.device
    try:
        from kernelrag.verify import ceilings, launch, roofline, timing  # noqa: F401
    except ImportError as exc:
        res["warnings"].append(f"GPU timing modules unavailable ({exc}); no time measured")
        return None
    torch.set_grad_enabled(False)
    spent = res.setdefault("durations", {})     # seconds per phase, for the verdict
    t0 = time.monotonic()
    variants = plan["variants"]
    timing_variant = variants.get("timing") or variants["primary"]
    mod = C.load_task(timing_variant["source"], "timing")
    seed = plan["timing_seed"]
    reference_model = C.build_model(mod, seed, device)
    model = model_cls(*mod.get_init_inputs()).to(device)
    C.load_reference_state(model, reference_model.state_dict())
    counter = itertools.count(1)

    def make_inputs() -> list:
        return C.make_inputs(mod, seed + next(counter), "task", device)

    # the candidate's first call at the timed size: its failures are the candidate's
    inputs = make_inputs()
    try:
        outs, problem = C.flatten_outputs(model(*inputs))
        torch.cuda.synchronize()
    except Exception as exc:   # noqa: BLE001 - reported as the candidate failing at full size
        del inputs
        late_failure(run, exc, "the first call at the timed size")
        return None
    if timing_variant["source"] != variants["primary"]["source"]:
        _full_size_check(run, plan, outs, problem, reference_model(*inputs))
    # the task's dtype and tolerance pick the compute ceiling (an fp32 task: the fastest
    # precision path that passes its tolerance, not bf16 tensor cores)
    dtype = next((str(o.dtype) for o in outs if getattr(o, "is_floating_point", lambda: False)()), "float32")
    rel_norm_tol = min((t["rel_norm"] for t in plan["tolerances"]), default=None)
    del inputs, outs
    run.guard.stop_counting_launches()
    spent["first_call"] = time.monotonic() - t0
    return Prepared(reference_model, model, make_inputs, dtype, rel_norm_tol)


def measure(run: Any, prepared: Prepared, plan: dict[str, Any], *, after_timing: Any = None) -> None:
    """Time the prepared candidate against eager (and torch.compile, when the plan says
    "interleaved"), prove its launches, place it on the roofline, then re-check the first
    trial's output. ``after_timing()``: called once the GPU is no longer needed alone (the
    worker gives the parent back its exclusive hold there)."""
    from kernelrag.verify.ceilings import get_ceilings
    from kernelrag.verify.launch import launch_proof
    from kernelrag.verify.roofline import roofline
    from kernelrag.verify.timing import time_against_baselines

    res, torch = run.result, run.torch
    spent = res.setdefault("durations", {})
    reference_model, model, make_inputs = prepared.reference_model, prepared.model, prepared.make_inputs
    dtype, rel_norm_tol = prepared.dtype, prepared.rel_norm_tol
    try:
        compiled = None
        if plan.get("compile", "interleaved") == "interleaved":
            t0 = time.monotonic()
            compiled = _compiled(torch, reference_model, make_inputs, res)
            spent["compile"] = time.monotonic() - t0
        # outputs produced while timed are re-checked against eager's (both in the task's
        # precision, so twice the table's relative-norm bound)
        rel_norm = 2 * max(t["rel_norm"] for t in plan["tolerances"])
        try:
            timing = time_against_baselines(model, reference_model, compiled, make_inputs, iters=100,
                                            rel_norm_tol=rel_norm)
        except Exception as exc:   # noqa: BLE001 - other processes' memory: once more, lean
            if not gpu_memory_short(exc, torch):
                raise
            torch.cuda.empty_cache()
            timing = time_against_baselines(model, reference_model, compiled, make_inputs, iters=100,
                                            rel_norm_tol=rel_norm, lean=True)
        spent.update((timing or {}).get("phases") or {})
        t0 = time.monotonic()
        proof = launch_proof(model, make_inputs(), source=Path(run.job["candidate_path"]).read_text())
        spent["launch_proof"] = time.monotonic() - t0
        cache_dir = Path(run.job["cache_dir"]) if run.job.get("cache_dir") else None
        t0 = time.monotonic()
        given = getattr(run, "ceilings", None)
        ceilings = given if given and given.get("gpu") == torch.cuda.get_device_name() else get_ceilings(cache_dir)
        spent["ceilings"] = time.monotonic() - t0
        counts = plan.get("counts") or {}
        kernel = (timing or {}).get("kernel") or {}
        roof = None
        if kernel.get("median_ms") and counts.get("bytes_moved"):
            # counts from before the split (no bytes_read / bytes_written) price every byte at copy
            roof = roofline(counts.get("flops") or 0, counts["bytes_moved"], kernel["median_ms"], ceilings,
                            dtype=dtype, rel_norm_tol=rel_norm_tol, bytes_read=counts.get("bytes_read"),
                            bytes_written=counts.get("bytes_written"))
    except Exception as exc:   # noqa: BLE001 - a failure of the measurement, not of the candidate
        short = gpu_memory_short(exc, torch)
        if short:
            torch.cuda.empty_cache()
            _untimed(res, f"{short}; the measurement ran out of it (timing is retried once with the fewest "
                          "input copies), no time measured")
            return
        res["warnings"].append(f"timing failed, no time measured: {type(exc).__name__}: {exc}"[:400])
        return
    res.update(timing=timing, launch=proof, ceilings=ceilings, roofline=roof)
    res["findings"] += [f.__dict__ for f in run.guard.check("timing", threads=False)]
    if after_timing is not None:
        after_timing()
    t0 = time.monotonic()
    _recheck(run, plan)
    spent["recheck"] = time.monotonic() - t0


def _compiled(torch: Any, reference_model: Any, make_inputs: Any, res: dict) -> Any:
    """torch.compile of the reference, or None (with a warning) when it does not compile."""
    try:
        compiled = torch.compile(reference_model)
        compiled(*make_inputs())
        return compiled
    except Exception as exc:   # noqa: BLE001 - no torch.compile baseline, said in the verdict
        res["warnings"].append(f"torch.compile baseline failed: {type(exc).__name__}: {exc}"[:300])
        if gpu_memory_short(exc, torch):
            torch.cuda.empty_cache()
            res["untimed_cause"] = "gpu_memory"     # a session verifies the candidate once more
        return None


def _full_size_check(run: Any, plan: dict, outs: list, problem: str, reference_out: Any) -> None:
    """At the timed size (larger than the checked ones), compare with the task's own eager output."""
    refs, _ = C.flatten_outputs(reference_out)
    tols = [Tolerance(**t) for t in plan["tolerances"]]
    if problem:
        run.check("full-size", False, problem)
        return
    comps = compare_outputs(outs, refs, [_loosened(t) for t in tols])
    run.check("full-size", all(c.passed for c in comps),
              "; ".join(c.describe() for c in comps) + " (vs the task's eager output at the timed size)")


def _loosened(tol: Tolerance) -> Tolerance:
    """Eager fp32 is itself ~1e-6 off the exact result: allow for both errors."""
    return Tolerance(atol=2 * tol.atol, rtol=2 * tol.rtol, rel_norm=2 * tol.rel_norm, key=tol.key)


def _recheck(run: Any, plan: dict[str, Any]) -> None:
    """The first trial again, after timing: the output must not have changed."""
    kept = run.kept
    if not kept:
        return
    torch = run.torch
    trial = kept["trial"]
    inputs = C.make_inputs(kept["mod"], trial["seed"], trial["dist"], run.device)
    reference_model = C.build_model(kept["mod"], trial["seed"], run.device)
    model = run.model_cls(*kept["mod"].get_init_inputs()).to(run.device)
    C.load_reference_state(model, reference_model.state_dict())
    outs, problem = C.flatten_outputs(model(*inputs))
    torch.cuda.synchronize()
    tols = [Tolerance(**t) for t in plan["tolerances"]]
    comps = compare_outputs(outs, kept["outs"], tols) if not problem else []
    passed = bool(comps) and all(c.passed for c in comps)
    detail = problem or "; ".join(c.describe() for c in comps if not c.passed)
    run.check("after-timing", passed, detail or "output after timing matches the output before")


def late_failure(run: Any, exc: BaseException, where: str) -> None:
    """An exception at the timed size, outside the correctness trials: the candidate's failure
    (``timing_error``), unless other processes held the GPU's memory (``faults.classify``
    says "gpu_memory"): then the candidate stays correct but untimed."""
    res, torch = run.result, run.torch
    kind = classify(exc, torch)
    if kind != "gpu_memory":
        res["timing_error"] = {"kind": kind, "error": error_text(exc, run.job["candidate_path"])}
        return
    torch.cuda.empty_cache()
    _untimed(res, f"{gpu_memory_short(exc, torch)}; {where} could not run, no time measured")


def _untimed(res: dict[str, Any], why: str) -> None:
    """No time measured because the GPU's memory was held by others: the verdict says so
    (``Verdict.untimed_cause``) and a session verifies the candidate once more."""
    res["warnings"].append(why[:400])
    res["untimed_cause"] = "gpu_memory"
