"""The generate loop: memory first, then draft -> verify -> feedback rounds, then write-back.

1. Memory: a verified (or approved), non-stale skill for exactly this pattern, whose
   dtypes and size class fit the task, is re-verified on this task; if its verdict
   holds the answer comes from memory: no LLM call, one verification.
2. Rounds until a verdict is ok or ``max_rounds`` is reached: draft (the LLM when
   one is configured, else the offline drafter), verify, and hand the verdict's
   ``feedback()`` to the next round.
3. Write-back: graph evidence for every transformation tried (successes and
   failures with reasons), an optimization log (JSONL) ingested into the knowledge
   store when it is importable, and on success a learned skill whose provenance is
   the verdict; a verdict flagged for review is stored as ``needs_review``.
"""
from __future__ import annotations

import datetime
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kernelrag.types import Cost, GenerateResult, GpuFigures, Round, WriteBack

log = logging.getLogger("kernelrag.generate")
MEMORY_STATES = ("approved", "verified")
EXAMPLES = 2


@dataclass
class Parts:
    """What the loop works with; the facade builds and keeps these."""

    settings: Any
    library: Any                      # kernelrag.memory.skills.SkillLibrary
    retriever: Any                    # kernelrag.retrieve.Retriever
    graph: Any = None                 # kernelrag.memory.graph.ReasoningGraph, None when unavailable
    llm: Any = None                   # kernelrag.draft.llm.LLMClient, None = offline
    store: Any = None                 # kernelrag.knowledge.KnowledgeStore, None when unavailable
    notes: list[str] = field(default_factory=list)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gpu_figures(settings: Any, device: str) -> GpuFigures:
    """The device as the prompt describes it: name, SMs, measured ceilings when cached."""
    if resolve_device(device) != "cuda":
        return GpuFigures(name="CPU only (Triton interpreter: correctness checked, no time measured)",
                          source="no GPU on this machine")
    import torch

    from kernelrag.verify.ceilings import cache_path

    name = torch.cuda.get_device_name()
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    path = cache_path(settings.cache_dir, name)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return GpuFigures(name=name, sms=sms, source="ceilings not measured yet")
    return GpuFigures(name=name, sms=sms, bandwidth_gbps=data.get("copy_gbps"),
                      fp32_tflops=data.get("fp32_tflops"), bf16_tflops=data.get("bf16_tflops"),
                      source=f"{path} ({data.get('measured_at', 'date unknown')})")


def _size_class(pattern: Any) -> str | None:
    return (getattr(pattern, "regime", None) or {}).get("size_class")


def _dtypes(pattern: Any) -> list[str]:
    """The task's floating-point dtypes, sorted (index inputs such as int64 targets left out)."""
    from kernelrag.draft.offline import float_dtypes

    return sorted(float_dtypes(pattern))


def memory_skill(parts: Parts, pattern: Any, backend: str) -> Any | None:
    """The best verified, non-stale skill for exactly this pattern and regime, or None
    (approved before verified, then the fastest measured)."""
    if not getattr(pattern, "known", False):
        return None
    wanted = set(_dtypes(pattern))
    size = _size_class(pattern)
    fits = []
    for skill in parts.library.list(include_retired=False):
        if skill.pattern != pattern.signature or skill.backend != backend:
            continue
        if skill.review_state not in MEMORY_STATES or parts.library.is_stale(skill):
            continue
        if wanted and not wanted <= set(skill.dtypes):
            continue
        learned_size = skill.provenance.get("size_class")
        if size and learned_size and learned_size != size:
            continue
        fits.append(skill)
    fits.sort(key=lambda s: (MEMORY_STATES.index(s.review_state), -(s.provenance.get("speedup_vs_eager") or 0.0)))
    return fits[0] if fits else None


class Loop:
    """One generate run; ``run()`` returns the GenerateResult."""

    def __init__(self, parts: Parts, task: Any, *, backend: str = "triton", max_rounds: int | None = None,
                 device: str | None = None, on_round: Callable[[Round], None] | None = None,
                 use_memory: bool = True):
        from kernelrag.errors import ConfigError

        if backend not in ("triton", "cuda"):
            raise ConfigError(f"backend={backend!r} is not one of triton, cuda")
        self.parts, self.settings = parts, parts.settings
        self.backend = backend
        self.max_rounds = max_rounds or self.settings.max_rounds
        if self.max_rounds < 1:
            raise ConfigError(f"max_rounds={self.max_rounds} must be at least 1")
        self.device = device or self.settings.device
        self.on_round = on_round
        self.use_memory = use_memory
        self.task = task
        self.cost = Cost()
        self.rounds: list[Round] = []
        self.extra: list[dict] = []          # per round: LLM messages and raw answer, for the log
        self.notes: list[str] = list(parts.notes)

    # --- steps -------------------------------------------------------------------
    def _verify(self, candidate: str) -> Any:
        from kernelrag.verify import verify_source

        self.cost.verify_calls += 1
        return verify_source(self.ctx.task_source, candidate, device=self.device,
                             timeout_s=self.settings.verify_timeout_s, cache_dir=self.settings.cache_dir)

    def _add_round(self, r: Round, extra: dict | None = None) -> Round:
        self.rounds.append(r)
        self.extra.append(extra or {})
        log.info("round %d [%s]: %s", r.index, r.drafter,
                 getattr(r.verdict, "status", None) or r.error or "no verdict")
        if self.on_round is not None:
            self.on_round(r)
        return r

    def _memory_round(self) -> Round | None:
        skill = memory_skill(self.parts, self.ctx.pattern, self.backend)
        if skill is None:
            return None
        from kernelrag.draft.offline import OfflineDrafter

        start = time.perf_counter()
        d = OfflineDrafter(self.parts.library).instantiate(skill, self.ctx.task_source)
        verdict = self._verify(d.source)
        return self._add_round(Round(index=1, drafter="memory", draft=d.source, verdict=verdict,
                                     feedback=verdict.feedback(), transformations=d.transformations,
                                     skill=skill.name, seconds=time.perf_counter() - start))

    def _llm_round(self, index: int, examples: list, gpu: GpuFigures) -> Round:
        from kernelrag.errors import LLMError
        from kernelrag.draft.llm import extract_code
        from kernelrag.draft.prompts import declared_transformations, kernel_messages

        prev = self.rounds[-1] if self.rounds else None
        prev_answer = self.extra[-1].get("answer") if prev is not None else None
        if prev is not None and not prev_answer:
            prev_answer = f"```python\n{prev.draft}\n```" if prev.draft else None
        messages = kernel_messages(self.ctx, gpu, backend=self.backend, examples=examples,
                                   previous_answer=prev_answer, feedback=prev.feedback if prev else None)
        start = time.perf_counter()
        done = self.parts.llm.chat(messages)       # an endpoint failure raises LLMError: the run stops
        self.cost.llm_calls += 1
        self.cost.prompt_tokens += done.prompt_tokens
        self.cost.completion_tokens += done.completion_tokens
        extra = {"messages": messages, "answer": done.text}
        try:
            code = extract_code(done.text)
        except LLMError as exc:
            return self._add_round(Round(index=index, drafter="llm", draft="", verdict=None,
                                         feedback=str(exc), error=str(exc),
                                         seconds=time.perf_counter() - start), extra)
        verdict = self._verify(code)
        return self._add_round(Round(index=index, drafter="llm", draft=code, verdict=verdict,
                                     feedback=verdict.feedback(), transformations=declared_transformations(code),
                                     seconds=time.perf_counter() - start), extra)

    def _offline_round(self, index: int, drafter: Any, tried: set[str]) -> Round:
        start = time.perf_counter()
        d = drafter.draft(self.ctx.task_source, self.ctx.pattern, self.backend, exclude=tried,
                          device=resolve_device(self.device))
        if not d.ok:
            return self._add_round(Round(index=index, drafter="offline", draft="", verdict=None,
                                         feedback=d.reason, error=d.reason, seconds=time.perf_counter() - start))
        tried.add(d.skill or d.method)
        verdict = self._verify(d.source)
        return self._add_round(Round(index=index, drafter="offline", draft=d.source, verdict=verdict,
                                     feedback=verdict.feedback(), transformations=d.transformations,
                                     skill=d.skill, seconds=time.perf_counter() - start),
                               {"method": d.method, "plan": d.reason})

    # --- the run -----------------------------------------------------------------
    def run(self) -> GenerateResult:
        from kernelrag.errors import LLMError

        t0 = time.perf_counter()
        use_llm = self.parts.llm is not None
        self.ctx = self.parts.retriever.context(self.task, passages=use_llm)
        self.notes += self.ctx.notes
        reason = ""
        from_memory = False
        if self.use_memory and self._memory_round() is not None:
            from_memory = self.rounds[-1].ok
            if not from_memory:
                self.notes.append(f"memory skill {self.rounds[-1].skill} failed on this task: "
                                  f"{self.rounds[-1].verdict.reason}")
        if not from_memory:
            examples = self._examples() if use_llm else []
            gpu = gpu_figures(self.settings, self.device) if use_llm else None
            from kernelrag.draft.offline import OfflineDrafter

            drafter, tried = OfflineDrafter(self.parts.library), set()
            if self.rounds and self.rounds[-1].skill:
                tried.add(self.rounds[-1].skill)
            while len(self.rounds) < self.max_rounds:
                index = len(self.rounds) + 1
                if use_llm:
                    try:
                        r = self._llm_round(index, examples, gpu)
                    except LLMError as exc:
                        reason = f"LLM failed in round {index}: {exc}"
                        break
                else:
                    r = self._offline_round(index, drafter, tried)
                    if r.verdict is None:        # nothing left to draft offline
                        break
                if r.ok:
                    break
        final = next((r for r in reversed(self.rounds) if r.ok), None)
        last = final or next((r for r in reversed(self.rounds) if r.verdict is not None), None)
        if not reason:
            if final is not None:
                reason = (f"skill {final.skill} from memory verified on this task" if from_memory else
                          f"verified in round {final.index} of {len(self.rounds)}")
            else:
                reason = f"no correct kernel in {len(self.rounds)} round(s)"
                if last is not None:
                    reason += f"; last verdict {last.verdict.status}: {last.verdict.reason}"
                if self.rounds and self.rounds[-1].verdict is None:
                    reason += f"; then: {self.rounds[-1].error or 'no draft'}"
        result = GenerateResult(
            task_path=self.ctx.task_path, pattern=self.ctx.signature or "unknown", backend=self.backend,
            ok=final is not None, source=(final or last).draft if (final or last) else "",
            verdict=last.verdict if last else None, rounds=self.rounds,
            citations=self.ctx.citations if use_llm else [], cost=self.cost,
            from_memory=from_memory, reason=reason)
        self.cost.seconds = time.perf_counter() - t0
        result.write_back = write_back(self.parts, self.ctx, result, self.extra, notes=self.notes)
        self.cost.seconds = time.perf_counter() - t0
        return result

    def _examples(self) -> list:
        out = []
        for ref in self.ctx.skills[:EXAMPLES]:
            try:
                out.append((ref, self.parts.library.get(ref.name).kernel_source()))
            except Exception as exc:   # a skill folder broken since it was listed
                self.notes.append(f"example skill {ref.name} skipped: {exc}")
        return out


# --- write-back ------------------------------------------------------------------------
def _learned_name(signature: str, backend: str) -> str:
    """``relu>mul>add`` -> ``learned_relu_mul_add``; attributes kept (``softmax[dim=-1]`` ->
    ``learned_softmax_dim_m1``) so variants of one op never overwrite each other."""
    import hashlib

    base = re.sub(r"[^a-z0-9]+", "_", signature.lower().replace("-", "m")).strip("_") or "pattern"
    if len(base) > 60:
        base = base[:52].strip("_") + "_" + hashlib.sha1(signature.encode()).hexdigest()[:7]
    return f"learned_{base}" + ("_cuda" if backend == "cuda" else "")


def _task_shapes(source: str) -> dict[str, int]:
    """Module-level int constants of the task (its size constants)."""
    import ast

    shapes = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            shapes[node.targets[0].id] = node.value.value
    return shapes


def provenance(verdict: Any, log_id: str, size_class: str | None) -> dict[str, Any]:
    """skill.toml [provenance] from a real verifier run (None values are left out)."""
    from kernelrag.memory.skills import current_environment

    env = current_environment()
    k = verdict.kernel_ms
    return {"gpu": verdict.gpu, "driver": verdict.driver, "torch": verdict.torch_version or env.get("torch"),
            "triton": verdict.triton_version or env.get("triton"),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": verdict.device, "trials": verdict.trials, "timed": verdict.timed,
            "kernel_ms": k.median_ms if k else None, "iqr_ms": k.iqr_ms if k else None,
            "eager_ms": verdict.eager_ms.median_ms if verdict.eager_ms else None,
            "compile_ms": verdict.compile_ms.median_ms if verdict.compile_ms else None,
            "speedup_vs_eager": verdict.speedup_vs_eager, "speedup_vs_compile": verdict.speedup_vs_compile,
            "frac_roofline": verdict.frac_roofline, "achieved_gbps": verdict.achieved_gbps,
            "achieved_tflops": verdict.achieved_tflops, "size_class": size_class, "log_id": log_id}


def _write_skill(parts: Parts, ctx: Any, result: GenerateResult, final: Round, log_id: str, wb: WriteBack) -> None:
    pattern = ctx.pattern
    if not getattr(pattern, "known", False):
        wb.notes.append("no skill written: the task's op pattern is unknown")
        return
    lib = parts.library
    used = None
    if final.skill:
        try:
            used = lib.get(final.skill)
        except Exception:
            used = None
    if used is not None and used.source == "seed" and used.pattern == pattern.signature:
        stale = lib.is_stale(used)
        if used.review_state in MEMORY_STATES and not stale:
            wb.notes.append(f"seed skill {used.name} verified on this task; no new skill written")
            return
        # The seed's own measurement does not hold here (never measured, or measured under
        # another torch/triton/GPU): keep this verification as a learned skill, so the next
        # request for this pattern and regime is answered from memory.
        wb.notes.append(f"seed skill {used.name} re-verified here ({stale or used.review_state}); "
                        "stored as a learned skill with this verdict")
    flags = final.verdict.review_flags()
    state = "needs_review" if flags else "verified"
    name = used.name if (used is not None and used.source == "learned" and used.pattern == pattern.signature) \
        else _learned_name(pattern.signature, result.backend)
    how = f"skill {final.skill}" if final.skill else final.drafter
    meta = {"category": pattern.category, "backend": result.backend,
            "transformations": list(final.transformations), "dtypes": _dtypes(pattern) or ["float32"],
            "summary": f"{pattern.signature}, drafted by {how} and verified ({final.verdict.summary()[:160]})",
            "shapes": _task_shapes(ctx.task_source), "review_state": state,
            "provenance": provenance(final.verdict, log_id, _size_class(pattern))}
    try:
        skill = lib.write_learned(name, pattern, final.draft, ctx.task_source, meta, overwrite=True)
    except Exception as exc:      # a write-back failure must not lose the verified kernel
        wb.notes.append(f"learned skill {name} not written: {exc}")
        return
    wb.skill, wb.skill_path, wb.skill_state = skill.name, str(skill.path), state
    if flags:
        wb.notes.append(f"skill {skill.name} stored as needs_review: " + "; ".join(flags))
    if parts.graph is not None:
        try:
            parts.graph.add_skill(skill.name, pattern.signature, list(skill.transformations), "learned")
        except Exception as exc:
            wb.notes.append(f"skill {skill.name} not added to the graph: {exc}")


def _graph_records(ctx: Any, result: GenerateResult, log_id: str, wb: WriteBack) -> list[dict]:
    from kernelrag.memory.graph import outcome_from_verdict

    pattern = ctx.pattern
    records = []
    dtypes = _dtypes(pattern)
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
        skill = wb.skill if (r.ok and wb.skill) else r.skill
        records.append(dict(
            pattern=pattern, transformations=list(r.transformations), gpu=v.gpu or v.device or "cpu",
            outcome=outcome, speedup_vs_eager=v.speedup_vs_eager, speedup_vs_compile=v.speedup_vs_compile,
            dtype=dtypes[0] if dtypes else None, regime=dict(getattr(pattern, "regime", {}) or {}),
            log_id=log_id, skill=skill, versions={"torch": v.torch_version, "triton": v.triton_version},
            detail=f"round {r.index} [{r.drafter}]: {v.status}: {v.reason}",
            kernel_ms=v.kernel_ms.median_ms if v.kernel_ms else None))
    return records


def write_back(parts: Parts, ctx: Any, result: GenerateResult, extra: list[dict],
               notes: list[str]) -> WriteBack:
    """Skill (on success), graph evidence, optimization log, ingest of the log."""
    from kernelrag.export import new_log_id, write_log

    wb = WriteBack(notes=list(notes))
    log_id = new_log_id(result.pattern, ctx.task_source)
    final = next((r for r in reversed(result.rounds) if r.ok), None)
    if final is not None and not result.from_memory:
        _write_skill(parts, ctx, result, final, log_id, wb)
    if parts.graph is None:
        wb.notes.append("graph evidence not recorded: the reasoning graph is unavailable")
    elif getattr(ctx.pattern, "known", False):
        records = _graph_records(ctx, result, log_id, wb)
        if records:
            try:
                wb.graph_records = len(parts.graph.record_many(records))
            except Exception as exc:
                wb.notes.append(f"graph evidence not recorded: {exc}")
    result.write_back = wb                   # the log records what was written back
    gpu = next((r.verdict.gpu for r in result.rounds if r.verdict is not None and r.verdict.gpu), None)
    device = next((r.verdict.device for r in result.rounds if r.verdict is not None), parts.settings.device)
    path = write_log(parts.settings, result, task_source=ctx.task_source, gpu=gpu or "cpu", device=device,
                     llm_model=parts.settings.llm_model if parts.llm is not None else None,
                     rounds_extra=extra, log_id=log_id)
    wb.log_path = str(path)
    if parts.store is None:
        wb.notes.append("log not ingested: the knowledge store is not available here "
                        "(ingest it later with: kernelrag ingest " + str(path) + ")")
    else:
        try:
            report = parts.store.ingest([path], progress=False, kind="log")
            wb.ingested = report.ok and (report.files_ingested + report.files_unchanged) > 0
            if not report.ok:
                wb.notes.append("log not ingested: " + "; ".join(e.line() for e in report.errors))
        except Exception as exc:
            wb.notes.append(f"log not ingested: {exc}")
    return wb
