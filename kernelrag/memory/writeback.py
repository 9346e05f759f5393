"""Write-back: what a verifier run leaves in memory, written in one place.

Every writer goes through here: the generate loop (a learned skill and graph
evidence), the seed-skill measurement, the benchmark's negative evidence,
``kernelrag skills verify`` and MCP ``record_outcome``.

- ``provenance(verdict)``: skill.toml ``[provenance]``, numbers only from the verifier.
- ``review_state(current, verdict)``: "verified", or "needs_review" with the reasons
  when VERIFY.md rule 18 flags the result (a speedup over 10x, a time within 10% of
  the roofline floor); an approval a person already gave stands.
- ``evidence_record(...)``: one record in the reasoning graph's format.
- ``append_evidence(path, records)`` / ``record_evidence(graph, records)``: the appends.

A verdict is a ``kernelrag.verify.Verdict`` or its ``to_dict()``.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelrag.memory.graph import kernel_hash
from kernelrag.memory.graph_query import outcome_from_verdict
from kernelrag.memory.skills import current_environment
from kernelrag.memory.storage import atomic_write_text, file_lock, now_utc
from kernelrag.types import GenerateResult, RetrievedContext, Round, WriteBack
from kernelrag.verify.profile import evidence_fields
from kernelrag.verify.roofline import review_flags

if TYPE_CHECKING:
    from kernelrag.memory.graph import ReasoningGraph
    from kernelrag.memory.skills import Skill, SkillLibrary
    from kernelrag.patterns import OpPattern
    from kernelrag.verify import Verdict

MEMORY_STATES = ("approved", "verified")      # states a skill may be served from memory in
PROVENANCE_KEYS = ("gpu", "driver", "torch", "triton", "date", "device", "trials", "timed", "kernel_ms",
                   "eager_ms", "compile_ms", "iqr_ms", "speedup_vs_eager", "speedup_vs_compile",
                   "frac_roofline", "achieved_gbps", "achieved_tflops", "size_class", "log_id")


def value_of(v: Any, key: str, default: Any = None) -> Any:
    """A verdict field, from a Verdict or its dict."""
    return v.get(key, default) if isinstance(v, dict) else getattr(v, key, default)


def median_ms(v: Any, key: str) -> float | None:
    t = value_of(v, key)
    return None if t is None else float(value_of(t, "median_ms"))


def _round(x: Any, nd: int = 4) -> Any:
    """``x`` to ``nd`` decimals; a nonzero value too small for them is kept as it is (a speedup
    must stay positive)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return x
    rounded = round(float(x), nd)
    return rounded if rounded or not x else float(x)


# --- provenance and review ---------------------------------------------------------------
def provenance(v: "Verdict | dict", date: str | None = None, *, log_id: str | None = None,
               size_class: str | None = None) -> dict[str, Any]:
    """skill.toml [provenance] from a real verifier run (None values are left out)."""
    kernel = value_of(v, "kernel_ms")
    env = current_environment()
    prov = {"gpu": value_of(v, "gpu"), "driver": value_of(v, "driver"),
            "torch": value_of(v, "torch_version") or env.get("torch"),
            "triton": value_of(v, "triton_version") or env.get("triton"), "date": date or now_utc(),
            "device": value_of(v, "device"),
            "trials": value_of(kernel, "trials") if kernel is not None else value_of(v, "trials"),
            "timed": value_of(v, "timed"),
            "kernel_ms": _round(median_ms(v, "kernel_ms"), 6), "eager_ms": _round(median_ms(v, "eager_ms"), 6),
            "compile_ms": _round(median_ms(v, "compile_ms"), 6),
            "iqr_ms": _round(value_of(kernel, "iqr_ms"), 6) if kernel is not None else None,
            "speedup_vs_eager": _round(value_of(v, "speedup_vs_eager")),
            "speedup_vs_compile": _round(value_of(v, "speedup_vs_compile")),
            "frac_roofline": _round(value_of(v, "frac_roofline")),
            "achieved_gbps": _round(value_of(v, "achieved_gbps"), 2),
            "achieved_tflops": _round(value_of(v, "achieved_tflops"), 3), "size_class": size_class, "log_id": log_id}
    return {k: prov[k] for k in PROVENANCE_KEYS if prov.get(k) is not None}


def review_state(current: str | None, v: "Verdict | dict") -> dict[str, Any]:
    """The state a correct measurement earns: "verified", or "needs_review" with the reasons
    when VERIFY.md 18 flags it (speedup over 10x, time within 10% of the roofline floor).
    An approval a person already gave stands."""
    flags = review_flags(value_of(v, "speedup_vs_eager"), value_of(v, "speedup_vs_compile"),
                         value_of(v, "frac_roofline"))
    if current == "approved":
        return {"state": "approved", "flags": flags}
    return {"state": "needs_review" if flags else "verified", "flags": flags}


def record_verification(library: "SkillLibrary", skill: "Skill", v: "Verdict") -> str:
    """Record a re-verification of a learned skill in its skill.toml; returns a note ("" when
    nothing was recorded). A timed, correct run updates the provenance and earns the review
    state of ``review_state``; a failure on a GPU sends the skill to review."""
    if v.ok and v.timed:
        review = review_state(skill.review_state, v)
        library.record_measurement(skill.name, provenance(v), review["state"], review["flags"])
        flags = f" ({'; '.join(review['flags'])})" if review["flags"] else ""
        return f"recorded: state {review['state']}{flags}, provenance updated"
    if not v.ok and v.status not in ("not_checkable",):
        library.record_measurement(skill.name, None, "needs_review", [f"{v.status}: {v.reason}"[:300]])
        return "recorded: state needs_review"
    return ""


# --- evidence ------------------------------------------------------------------------------
def evidence_record(v: "Verdict | dict", *, pattern: str, transformations: list[str], outcome: str,
                    log_id: str, gpu: str | None = None, skill: str | None = None, dtype: str | None = None,
                    regime: dict[str, Any] | None = None, detail: str = "", date: str | None = None,
                    variant: str | None = None, kernel_ms: float | None = None,
                    kernel_hash: str | None = None) -> dict[str, Any]:
    """One evidence record in the reasoning graph's format, its numbers from the verdict.
    ``kernel_hash`` (of the kernel source) makes re-verifications of one kernel in one
    environment update one record (``kernelrag.memory.graph.evidence_key``)."""
    rec = {"pattern": pattern, "transformations": list(transformations),
           "gpu": gpu or value_of(v, "gpu") or value_of(v, "device") or "unknown", "outcome": outcome,
           "speedup_vs_eager": _round(value_of(v, "speedup_vs_eager")),
           "speedup_vs_compile": _round(value_of(v, "speedup_vs_compile")),
           "dtype": dtype or value_of(v, "dtype") or "unknown", "regime": dict(regime or {}), "log_id": log_id,
           "skill": skill, "versions": {"torch": value_of(v, "torch_version"), "triton": value_of(v, "triton_version"),
                                        "driver": value_of(v, "driver")},
           "date": date or now_utc(), "detail": (detail or "")[:300],
           "kernel_ms": _round(kernel_ms if kernel_ms is not None else median_ms(v, "kernel_ms"), 6),
           "frac_roofline": _round(value_of(v, "frac_roofline"))}
    if variant is not None:
        rec["variant"] = variant
    if kernel_hash:
        rec["kernel_hash"] = kernel_hash
    rec.update(evidence_fields(value_of(v, "profile")))   # the profiler's limiter and counters, when run
    return rec


def append_evidence(path: Path, records: list[dict[str, Any]]) -> None:
    """Add records to an evidence JSONL, replacing earlier ones of the same (log id, gpu, variant)."""
    if not records:
        return
    keys = {(r["log_id"], r["gpu"], r.get("variant")) for r in records}
    with file_lock(path):
        kept = []
        if path.is_file():
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                try:
                    old = json.loads(line)
                except ValueError:
                    kept.append(line)
                    continue
                if (old.get("log_id"), old.get("gpu"), old.get("variant")) not in keys:
                    kept.append(line)
        kept += [json.dumps(r, sort_keys=True) for r in records]
        atomic_write_text(path, "\n".join(kept) + "\n")


def record_evidence(graph: "ReasoningGraph", records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add records to the reasoning graph (one locked read-modify-write); returns what was stored."""
    return graph.record_many(records) if records else []


def record_outcome(graph: "ReasoningGraph", pattern: Any, transformations: "list[str] | str", gpu: str,
                   outcome: str, **fields: Any) -> dict[str, Any]:
    """One attempt reported from outside (MCP, the API) as graph evidence."""
    return graph.record_outcome(pattern, transformations, gpu, outcome, **fields)


# --- what a generate run writes --------------------------------------------------------------
def float_dtypes(pattern: "OpPattern") -> list[str]:
    """The task's floating-point dtypes, sorted (index inputs such as int64 targets left out)."""
    dtypes = {str(d).replace("torch.", "") for d in (getattr(pattern, "regime", None) or {}).get("dtypes") or []}
    return sorted(d for d in dtypes if d.startswith(("float", "bfloat", "half", "double")))


def size_class(pattern: "OpPattern") -> str | None:
    return (getattr(pattern, "regime", None) or {}).get("size_class")


def learned_name(signature: str, backend: str) -> str:
    """``relu>mul>add`` -> ``learned_relu_mul_add``; attributes kept (``softmax[dim=-1]`` ->
    ``learned_softmax_dim_m1``) so variants of one op never overwrite each other."""
    base = re.sub(r"[^a-z0-9]+", "_", signature.lower().replace("-", "m")).strip("_") or "pattern"
    if len(base) > 60:
        base = base[:52].strip("_") + "_" + hashlib.sha1(signature.encode()).hexdigest()[:7]
    return f"learned_{base}" + ("_cuda" if backend == "cuda" else "")


def task_shapes(source: str) -> dict[str, int]:
    """Module-level int constants of the task (its size constants)."""
    shapes = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            shapes[node.targets[0].id] = node.value.value
    return shapes


def learn_skill(library: "SkillLibrary", graph: "ReasoningGraph | None", ctx: RetrievedContext,
                result: GenerateResult, final: Round, log_id: str, wb: WriteBack) -> None:
    """Store the verified kernel of ``final`` as a learned skill (``needs_review`` when the
    verdict is flagged), unless a seed skill whose measurement holds already answers it."""
    pattern = ctx.pattern
    if not getattr(pattern, "known", False):
        wb.notes.append("no skill written: the task's op pattern is unknown")
        return
    used = None
    if final.skill:
        try:
            used = library.get(final.skill)
        except Exception:
            used = None
    if used is not None and used.source == "seed" and used.pattern == pattern.signature:
        stale = library.is_stale(used)
        if used.review_state in MEMORY_STATES and not stale:
            wb.notes.append(f"seed skill {used.name} verified on this task; no new skill written")
            return
        # The seed's own measurement does not hold here (never measured, or measured under
        # another torch/triton/GPU): keep this verification as a learned skill, so the next
        # request for this pattern and regime is answered from memory.
        wb.notes.append(f"seed skill {used.name} re-verified here ({stale or used.review_state}); "
                        "stored as a learned skill with this verdict")
    review = review_state(None, final.verdict)
    state, flags = review["state"], review["flags"]
    name = used.name if (used is not None and used.source == "learned" and used.pattern == pattern.signature) \
        else learned_name(pattern.signature, result.backend)
    how = f"skill {final.skill}" if final.skill else final.drafter
    meta = {"category": pattern.category, "backend": result.backend,
            "transformations": list(final.transformations), "dtypes": float_dtypes(pattern) or ["float32"],
            "summary": f"{pattern.signature}, drafted by {how} and verified ({final.verdict.summary()[:160]})",
            "shapes": task_shapes(ctx.task_source), "review_state": state,
            "provenance": provenance(final.verdict, log_id=log_id, size_class=size_class(pattern))}
    try:
        skill = library.write_learned(name, pattern, final.draft, ctx.task_source, meta, overwrite=True)
    except Exception as exc:      # a write-back failure must not lose the verified kernel
        wb.notes.append(f"learned skill {name} not written: {exc}")
        wb.failed.append("skill")
        return
    wb.skill, wb.skill_path, wb.skill_state = skill.name, str(skill.path), state
    if flags:
        wb.notes.append(f"skill {skill.name} stored as needs_review: " + "; ".join(flags))
    if graph is not None:
        try:
            graph.add_skill(skill.name, pattern.signature, list(skill.transformations), "learned")
        except Exception as exc:
            wb.notes.append(f"skill {skill.name} not added to the graph: {exc}")


def round_records(ctx: RetrievedContext, result: GenerateResult, log_id: str, wb: WriteBack) -> list[dict]:
    """One evidence record per verified round of a run that named its transformations."""
    pattern = ctx.pattern
    records = []
    dtypes = float_dtypes(pattern)
    for r in result.rounds:
        if r.verdict is None:
            continue
        outcome = outcome_from_verdict(r.verdict)
        if outcome is None:
            continue
        if not r.transformations:
            wb.notes.append(f"round {r.index}: the draft named no transformations; no graph evidence")
            continue
        v = r.verdict
        records.append(evidence_record(
            v, pattern=pattern.signature, transformations=list(r.transformations),
            gpu=v.gpu or v.device or "cpu", outcome=outcome, dtype=dtypes[0] if dtypes else None,
            regime=dict(getattr(pattern, "regime", {}) or {}), log_id=log_id,
            skill=wb.skill if (r.ok and wb.skill) else r.skill,
            detail=f"round {r.index} [{r.drafter}]: {v.status}: {v.reason}", kernel_hash=kernel_hash(r.draft)))
    return records


def kept_round(rounds: list) -> Any:
    """The verified round a run keeps: the fastest against eager PyTorch (each measured side
    by side with it) when every verified round was timed, else the last verified one."""
    ok = [r for r in rounds if r.ok]
    speeds = [getattr(r.verdict, "speedup_vs_eager", None) for r in ok]
    if not ok or any(x is None for x in speeds):
        return ok[-1] if ok else None
    return max(zip(ok, speeds), key=lambda pair: pair[1])[0]     # a tie keeps the earlier round


def write_run(library: "SkillLibrary", graph: "ReasoningGraph | None", ctx: RetrievedContext,
              result: GenerateResult, log_id: str, wb: WriteBack, *, learn: bool = True) -> None:
    """A run's skill (on success, when ``learn``) and its graph evidence, into ``wb``."""
    final = kept_round(result.rounds)
    if learn and final is not None and not result.from_memory:
        learn_skill(library, graph, ctx, result, final, log_id, wb)
    if graph is None:
        wb.notes.append("graph evidence not recorded: the reasoning graph is unavailable")
    elif getattr(ctx.pattern, "known", False):
        records = round_records(ctx, result, log_id, wb)
        if records:
            try:
                wb.graph_records = len(record_evidence(graph, records))
            except Exception as exc:
                wb.notes.append(f"graph evidence not recorded: {exc}")
                wb.failed.append("graph")
