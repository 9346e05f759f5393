"""The generate loop: memory first, then draft -> verify -> feedback rounds, then write-back.

1. Memory: a verified (or approved), non-stale skill for exactly this pattern, whose
   dtypes and size class fit the task, is re-verified on this task; if its verdict
   holds the answer comes from memory: no LLM call, one verification.
2. Rounds until a verdict is ok (on a GPU, an offline kernel slower than torch.compile
   hands the rounds left to the next draft the graph ranks, and the faster verified
   round is kept) or ``max_rounds`` is reached: draft (the LLM when
   one is configured, its prompt carrying the lowering's composed draft of the task
   as a starting point; else the offline drafter), verify, and hand the verdict's
   ``feedback()`` to the next round. On a GPU a verified kernel with a ``CONFIGS``
   list then goes through the configuration search (``memory.config_search``, up to
   ``tune_top_k`` more verifications, or one when memory holds the winner); a faster
   pinned configuration becomes a last round (drafter "tune").
3. Write-back (``kernelrag.memory.writeback``): graph evidence for every
   transformation tried (successes and failures with reasons), an optimization log
   (JSONL) ingested into the knowledge store when it is importable, and on success a
   learned skill whose provenance is the verdict; a verdict flagged for review is
   stored as ``needs_review``. ``write_back="evidence"`` (the benchmark) writes the
   graph evidence only.

The task is one value (``kernelrag.task.Task``) for the whole run: read, executed
and traced once; the offline drafter plans once per run.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kernelrag.draft.llm import extract_code
from kernelrag.draft.lower.lowering import lower, variant_choices
from kernelrag.draft.lower.rank import lower_order
from kernelrag.draft.offline import OfflineDrafter, constructor_mismatch
from kernelrag.draft.prompts import declared_transformations, kernel_messages
from kernelrag.errors import ConfigError, KernelRAGError, LLMError
from kernelrag.export import new_log_id, write_log
from kernelrag.memory import writeback
from kernelrag.memory.config_search import TRANSFORMATION, faster_than, search_configs, tunable_round
from kernelrag.memory.tuning import TuningStore
from kernelrag.memory.writeback import MEMORY_STATES, kept_round
from kernelrag.task import Task
from kernelrag.types import Cost, DraftResult, GenerateResult, GpuFigures, RetrievedContext, Round, WriteBack
from kernelrag.verify import verify_source
from kernelrag.verify.ceilings import cache_path

if TYPE_CHECKING:
    from kernelrag.config import Settings
    from kernelrag.draft.llm import LLMClient
    from kernelrag.knowledge import KnowledgeStore
    from kernelrag.memory.graph import ReasoningGraph
    from kernelrag.memory.skills import Skill, SkillLibrary
    from kernelrag.patterns import OpPattern
    from kernelrag.retrieve import Retriever
    from kernelrag.verify import Verdict
    from kernelrag.verify.session import VerifySession

log = logging.getLogger("kernelrag.generate")
EXAMPLES = 2
WRITE_BACK = ("all", "evidence")


@dataclass
class Parts:
    """What the loop works with; the facade (or the benchmark) builds and keeps these."""

    settings: "Settings"
    library: "SkillLibrary"
    retriever: "Retriever | None"
    graph: "ReasoningGraph | None" = None      # None when unavailable
    llm: "LLMClient | None" = None             # None = offline
    store: "KnowledgeStore | None" = None      # None when unavailable
    verifier: "VerifySession | None" = None    # warm processes and cached baselines across runs
    notes: list[str] = field(default_factory=list)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gpu_figures(settings: "Settings", device: str) -> GpuFigures:
    """The device as the prompt describes it: name, SMs, measured ceilings when cached."""
    if resolve_device(device) != "cuda":
        return GpuFigures(name="CPU only (Triton interpreter: correctness checked, no time measured)",
                          source="no GPU on this machine")
    import torch

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


def memory_skill(parts: Parts, pattern: "OpPattern", backend: str, task: "Task | None" = None) -> "Skill | None":
    """The best verified, non-stale skill for exactly this pattern and regime, or None
    (approved before verified, then the fastest measured). With ``task``, a skill whose
    ``ModelNew`` does not accept the task's ``get_init_inputs()`` is passed over (a
    cross-entropy with class weights is the pattern of one without)."""
    if not getattr(pattern, "known", False):
        return None
    init_inputs = task.init_inputs() if task is not None else None
    wanted = set(writeback.float_dtypes(pattern))
    size = writeback.size_class(pattern)
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
        if init_inputs is not None and constructor_mismatch(skill.kernel_source(), init_inputs):
            continue
        fits.append(skill)
    fits.sort(key=lambda s: (MEMORY_STATES.index(s.review_state), -(s.provenance.get("speedup_vs_eager") or 0.0)))
    return fits[0] if fits else None


def explores_after(r: Round) -> bool:
    """A correct offline kernel that lost to torch.compile on a GPU: the next draft the graph
    ranks (another template variant, another skill) gets the rounds left, and the faster of
    the two is kept (``kept_round``); both are written back as evidence."""
    sc = getattr(r.verdict, "speedup_vs_compile", None)
    return r.drafter == "offline" and sc is not None and sc < 1.0


def missed_tolerance(verdict: Any) -> bool:
    """The candidate ran to the end and some outputs were out of the task's tolerance (not a
    crash, a broken rule or NaNs never written): an accuracy failure, which the next offline
    round answers with a more accurate dot path (``OfflineDrafter.draft(missed=...)``)."""
    return (getattr(verdict, "status", None) == "incorrect" and not getattr(verdict, "error", None)
            and (getattr(verdict, "mismatch_count", None) or 0) > 0
            and not (getattr(verdict, "nonfinite_mismatch", None) or 0))


class Loop:
    """One generate run; ``run()`` returns the GenerateResult."""

    def __init__(self, parts: Parts, task: "Task | str | Path", *, backend: str = "triton",
                 max_rounds: int | None = None, device: str | None = None,
                 on_round: Callable[[Round], None] | None = None, use_memory: bool = True,
                 write_back: str = "all", log_id: str | None = None):
        if backend not in ("triton", "cuda"):
            raise ConfigError(f"backend={backend!r} is not one of triton, cuda")
        if write_back not in WRITE_BACK:
            raise ConfigError(f"write_back={write_back!r} is not one of {', '.join(WRITE_BACK)}")
        self.parts, self.settings = parts, parts.settings
        self.backend = backend
        self.max_rounds = max_rounds or self.settings.max_rounds
        if self.max_rounds < 1:
            raise ConfigError(f"max_rounds={self.max_rounds} must be at least 1")
        self.device = device or self.settings.device
        self.on_round = on_round
        self.use_memory = use_memory
        self.write_back, self.log_id = write_back, log_id
        self.task = Task.of(task)                # read once; executed and traced on first use
        self.drafter = OfflineDrafter(parts.library, parts.graph)   # plans once for this run
        self.cost = Cost()
        self.rounds: list[Round] = []
        self.extra: list[dict] = []          # per round: LLM messages and raw answer, for the log
        self.notes: list[str] = list(parts.notes)
        self.composed: DraftResult | None = None      # the LLM prompt's starting point (see _composed)

    # --- steps -------------------------------------------------------------------
    def _verify_options(self) -> dict[str, Any]:
        required = self.settings.require_isolation
        return dict(device=self.device, timeout_s=self.settings.verify_timeout_s, cache_dir=self.settings.cache_dir,
                    require_isolation=self.parts.llm is not None if required is None else required,
                    profile=self.settings.profile)

    def _verify(self, candidate: str) -> "Verdict":
        self.cost.verify_calls += 1
        if self.parts.verifier is not None:
            return self.parts.verifier.verify_source(self.task.source, candidate, **self._verify_options())
        return verify_source(self.task.source, candidate, **self._verify_options())

    def _verify_all(self, candidates: list[str]) -> list["Verdict"]:
        """Several candidates of this task: side by side through a session's workers (each
        still timed alone), one after another without one."""
        verifier = self.parts.verifier
        if verifier is None or not hasattr(verifier, "verify_sources"):
            return [self._verify(c) for c in candidates]
        self.cost.verify_calls += len(candidates)
        return verifier.verify_sources(self.task.source, candidates, **self._verify_options())

    def _add_round(self, r: Round, extra: dict | None = None) -> Round:
        self.rounds.append(r)
        self.extra.append(extra or {})
        log.info("round %d [%s]: %s", r.index, r.drafter,
                 getattr(r.verdict, "status", None) or r.error or "no verdict")
        if self.on_round is not None:
            self.on_round(r)
        return r

    def _memory_round(self) -> Round | None:
        skill = memory_skill(self.parts, self.ctx.pattern, self.backend, self.task)
        if skill is None:
            return None
        start = time.perf_counter()
        d = self.drafter.instantiate(skill, self.task)
        verdict = self._verify(d.source)
        return self._add_round(Round(index=1, drafter="memory", draft=d.source, verdict=verdict,
                                     feedback=verdict.feedback(), transformations=d.transformations,
                                     skill=skill.name, seconds=time.perf_counter() - start))

    def _composed(self) -> DraftResult | None:
        """The lowering's best draft of the task (the variants the graph's evidence ranks first), its
        unplaced ops left in PyTorch: the LLM's starting point."""
        if self.backend != "triton":
            return None
        try:
            best = lower_order(variant_choices(self.task, partial=True), self.ctx.pattern, self.parts.graph)[0]
        except Exception:          # Unsupported, or the task failing on the meta device: lower says why
            best = None
        draft = lower(self.task, getattr(self.ctx.pattern, "signature", ""), best, partial=True)
        if not draft.ok:
            self.notes.append(f"no composed starting point for the prompt: {draft.reason}")
        return draft

    def _llm_round(self, index: int, examples: list, gpu: GpuFigures) -> Round:
        prev = self.rounds[-1] if self.rounds else None
        prev_answer = self.extra[-1].get("answer") if prev is not None else None
        if prev is not None and not prev_answer:
            prev_answer = f"```python\n{prev.draft}\n```" if prev.draft else None
        messages = kernel_messages(self.ctx, gpu, backend=self.backend, examples=examples,
                                   previous_answer=prev_answer, feedback=prev.feedback if prev else None,
                                   composed=self.composed)
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

    def _offline_round(self, index: int, tried: set[str]) -> Round:
        start = time.perf_counter()
        last = self.rounds[-1] if self.rounds else None
        missed = self.extra[-1].get("method") if last is not None and missed_tolerance(last.verdict) else None
        d = self.drafter.draft(self.task, self.ctx.pattern, self.backend, exclude=tried,
                               device=resolve_device(self.device), missed=missed)
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
            self.composed = self._composed() if use_llm else None
            tried: set[str] = set()
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
                    r = self._offline_round(index, tried)
                    if r.verdict is None:        # nothing left to draft offline
                        break
                if r.ok and not explores_after(r):
                    break
        final = kept_round(self.rounds)
        if final is not None:
            self._tune(final)
            final = kept_round(self.rounds)
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
        result.write_back = write_back(self.parts, self.ctx, result, self.extra, notes=self.notes,
                                       mode=self.write_back, log_id=self.log_id)
        self.cost.seconds = time.perf_counter() - t0
        return result

    def _tune(self, final: Round) -> None:
        """On a GPU, search the configurations of a verified tunable kernel through the
        verifier (``memory.config_search``): the kept round's, or where it has none the
        fastest round that has (``tunable_round``). A pinned winner faster than the kept
        kernel becomes the last round."""
        top_k = self.settings.tune_top_k
        base = tunable_round(self.rounds, final)
        if top_k < 1 or base is None:
            return
        start = time.perf_counter()
        try:
            found = search_configs(base.draft, base.verdict, self._verify, TuningStore(self.settings.cache_dir),
                                   verify_all=self._verify_all,
                                   regime=getattr(self.ctx.pattern, "regime", None) or {}, graph=self.parts.graph,
                                   pattern=self.ctx.signature or None, transformations=base.transformations,
                                   top_k=top_k, log_id=self.log_id or "", skill=base.skill)
        except KernelRAGError as exc:       # an unreadable tuning memory must not lose the kernel
            self.notes.append(f"configuration search skipped: {exc}")
            return
        where = "" if base is final else f" of round {base.index} (round {final.index}, kept, has no configurations)"
        self.notes.append(f"configuration search{where}: {found.note}")
        won = found.winner_verdict
        if won is None or not won.ok or not faster_than(won, final.verdict):
            self.notes.append(f"configuration search: the kernel of round {final.index} stays")
            return
        self._add_round(Round(index=len(self.rounds) + 1, drafter="tune", draft=found.winner_source, verdict=won,
                              feedback=won.feedback(), skill=base.skill, seconds=time.perf_counter() - start,
                              transformations=list(dict.fromkeys([*base.transformations, TRANSFORMATION]))),
                        {"method": "configuration search", "plan": found.note})

    def _examples(self) -> list:
        out = []
        for ref in self.ctx.skills[:EXAMPLES]:
            try:
                out.append((ref, self.parts.library.get(ref.name).kernel_source()))
            except Exception as exc:   # a skill folder broken since it was listed
                self.notes.append(f"example skill {ref.name} skipped: {exc}")
        return out


# --- write-back ------------------------------------------------------------------------
def write_back(parts: Parts, ctx: RetrievedContext, result: GenerateResult, extra: list[dict],
               notes: list[str], *, mode: str = "all", log_id: str | None = None) -> WriteBack:
    """Skill (on success), graph evidence, optimization log, ingest of the log;
    ``mode="evidence"``: the graph evidence only."""
    wb = WriteBack(notes=list(notes))
    log_id = log_id or new_log_id(result.pattern, ctx.task_source)
    writeback.write_run(parts.library, parts.graph, ctx, result, log_id, wb, learn=mode == "all")
    result.write_back = wb                   # the log records what was written back
    if mode != "all":
        return wb
    gpu = next((r.verdict.gpu for r in result.rounds if r.verdict is not None and r.verdict.gpu), None)
    device = next((r.verdict.device for r in result.rounds if r.verdict is not None), parts.settings.device)
    try:
        path = write_log(parts.settings, result, task_source=ctx.task_source, gpu=gpu or "cpu", device=device,
                         llm_model=parts.settings.llm_model if parts.llm is not None else None,
                         rounds_extra=extra, log_id=log_id)
    except OSError as exc:        # a read-only or full KERNELRAG_HOME must not lose the kernel
        wb.notes.append(f"optimization log not written to {parts.settings.logs_dir}: "
                        f"{exc.strerror or exc}; check that KERNELRAG_HOME is writable")
        wb.failed.append("log")
        return wb
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
