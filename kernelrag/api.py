"""The facade (layer L5): the one Python API that the CLI, the UI and MCP sit on.

    from kernelrag import KernelRAG
    kr = KernelRAG()                                   # settings from the usual layers
    kr.ask("how do I avoid shared-memory bank conflicts?").answer
    kr.generate("bench/tasks/softmax.py", max_rounds=3).summary()

Every method returns a typed result. The knowledge store, reasoning graph, skill
library and LLM client are created on first use and kept warm. A part that cannot
be used here (the GPU machine has no knowledge store) is skipped with a note in
the result, never a silent gap.
"""
from __future__ import annotations

import importlib.util
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Union

from kernelrag.config import Settings, load_settings, replace
from kernelrag.draft.llm import LLMClient
from kernelrag.draft.prompts import ask_messages
from kernelrag.errors import LLMError, StoreError
from kernelrag.export import export_jsonl
from kernelrag.generate import Loop, Parts
from kernelrag.knowledge.models import KINDS, MODES  # noqa: F401  (the interfaces' choices)
from kernelrag.memory import writeback
from kernelrag.memory.graph import ReasoningGraph
from kernelrag.memory.skills import SkillLibrary
from kernelrag.patterns import OpPattern, category_of, from_signature, op_pattern
from kernelrag.retrieve import Retriever, passages_from_hits, transformation_from
from kernelrag.task import Task, names_task, read_source
from kernelrag.types import OFFLINE_LABEL, AskResult, Cost, ExportResult, GenerateResult, Passage, \
    RetrievedContext, Round, SkillRef, Transformation
from kernelrag.verify import VerifySession, verify, verify_source

if TYPE_CHECKING:
    from kernelrag.knowledge import IngestReport, KnowledgeStore, SearchHit
    from kernelrag.memory.graph_query import Evidence, Failure, Suggestion
    from kernelrag.memory.skills import Skill
    from kernelrag.verify import Verdict

TaskOrPattern = Union[OpPattern, Task, str, Path]      # a task (path or source), a pattern or a signature

STORE_FAILED = "knowledge store not searched"      # the note when the store could not be opened or read
# Op names that are also everyday words: not taken as ops when they appear in a question.
_COMMON_WORDS = {"all", "any", "where", "round", "sign", "floor", "ceil", "max", "min", "norm", "add",
                 "sub", "mul", "div", "neg", "abs", "log", "exp", "pow", "prod", "threshold", "mean"}


def _question_ops(question: str) -> list[str]:
    """Op names a question mentions, in order ("fuse softmax after matmul" -> softmax, matmul)."""
    out = []
    for word in re.findall(r"[a-z][a-z0-9_]*", question.lower()):
        word = {"layernorm": "layer_norm", "rmsnorm": "rms_norm", "gemm": "matmul", "attention":
                "scaled_dot_product_attention", "crossentropy": "cross_entropy"}.get(word, word)
        if word in _COMMON_WORDS or word in out:
            continue
        if category_of([word]) != "fused":
            out.append(word)
    return out


def offline_answer(question: str, passages: list[Passage], transformations: list[Transformation],
                   skills: list[SkillRef], notes: list[str]) -> str:
    """The answer when no LLM is configured: the best evidence, clearly labelled."""
    lines = [f"[{OFFLINE_LABEL}]", ""]
    if passages:
        lines.append(f"The {len(passages)} passages that best match \"{question.strip()}\":")
        for p in passages:
            text = " ".join(p.text.split())
            lines += ["", f"{p.citation.label()}", text[:700] + (" ..." if len(text) > 700 else "")]
    elif any(n.startswith(STORE_FAILED) for n in notes):
        lines.append("No passages: the knowledge store could not be searched ("
                     + "; ".join(n[len(STORE_FAILED) + 2:] for n in notes if n.startswith(STORE_FAILED)) + ").")
    else:
        lines.append("No passages found" + (" (" + "; ".join(notes) + ")" if notes else "") + ".")
    if transformations:
        lines += ["", "Transformations the reasoning graph ranks for the ops in the question:"]
        lines += [f"- {t.id} (score {t.score:.2f}): {t.evidence[0] if t.evidence else ''}" for t in transformations]
    if skills:
        lines += ["", "Skills in the library that may help:"]
        lines += [f"- {s.name} ({s.pattern}, {s.state}): {s.summary}" for s in skills]
    return "\n".join(lines)


class KernelRAG:
    """Ask, retrieve, generate, verify; plus the helpers the UI and MCP need."""

    def __init__(self, settings: Settings | None = None, **overrides: Any):
        if settings is None:
            settings = load_settings(**overrides)
        elif overrides:
            settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
        self.settings = settings
        self._lock = threading.RLock()
        self._library = self._graph = self._store = self._llm = None
        self._store_checked = False
        self.notes: list[str] = []          # parts that could not be created, and why

    # --- parts, created on first use ----------------------------------------------
    @property
    def library(self) -> SkillLibrary:
        with self._lock:
            if self._library is None:
                self._library = SkillLibrary(self.settings)
            return self._library

    @property
    def graph(self) -> ReasoningGraph:
        with self._lock:
            if self._graph is None:
                self._graph = ReasoningGraph(self.settings)
            return self._graph

    @property
    def store(self) -> "KnowledgeStore | None":
        """The knowledge store, or None where it cannot be imported (see ``notes``)."""
        with self._lock:
            if not self._store_checked:
                self._store_checked = True
                try:
                    missing = importlib.util.find_spec("chromadb") is None
                except (ImportError, ValueError):     # blocked or half-installed
                    missing = True
                if missing:
                    self.notes.append("knowledge store not available here (chromadb is not installed)")
                else:
                    from kernelrag.knowledge import KnowledgeStore

                    self._store = KnowledgeStore(self.settings)
            return self._store

    @property
    def llm(self) -> LLMClient | None:
        """The LLM client, or None when no endpoint is configured (offline)."""
        with self._lock:
            if self._llm is None and self.settings.llm_enabled:
                self._llm = LLMClient(self.settings)
            return self._llm

    def _graph_or_note(self, notes: list[str]) -> ReasoningGraph | None:
        try:
            return self.graph
        except Exception as exc:        # a corrupt graph file must not stop retrieval
            notes.append(f"reasoning graph not consulted: {exc}")
            return None

    def _retriever(self, notes: list[str] | None = None) -> Retriever:
        notes = notes if notes is not None else []
        graph = self._graph_or_note(notes)
        store = self.store
        return Retriever(self.settings, library=self.library, graph=graph, store=store,
                         notes=notes + self.notes)

    # --- retrieval -----------------------------------------------------------------
    def search(self, query: str, k: int | None = None, kind: str | None = None,
               mode: str = "hybrid") -> list[Passage]:
        """Hybrid search of the knowledge store; passages numbered [1].. with citations."""
        return passages_from_hits(self.hits(query, k=k, kind=kind, mode=mode))

    def hits(self, query: str, k: int | None = None, kind: str | None = None,
             mode: str = "hybrid") -> "list[SearchHit]":
        """The knowledge store's own hits (chunk, score, citation fields), best first."""
        if self.store is None:
            raise StoreError("; ".join(self.notes) + "; search where the knowledge store is installed")
        return self.store.search(query, k=k or self.settings.search_k, kind=kind, mode=mode)

    def ingest(self, paths: "list[str | Path]", *, prune: bool = False, progress: bool = True,
               kind: str | None = None) -> "IngestReport":
        """Add files or folders to the knowledge store (incremental; ``prune`` drops deleted files)."""
        if self.store is None:
            raise StoreError("; ".join(self.notes) + "; ingest where the knowledge store is installed")
        return self.store.ingest(paths, prune=prune, progress=progress, kind=kind)

    def retrieve(self, task: "Task | str | Path", k: int | None = None) -> RetrievedContext:
        """Passages, op pattern, ranked transformations with evidence, failures, similar skills."""
        return self._retriever().context(task, k=k)

    # --- tasks, patterns and the reasoning graph ---------------------------------------
    def task(self, task: "Task | str | Path") -> Task:
        """The task value of a file path or source (TaskError when the file does not exist)."""
        return Task.of(task)

    def pattern(self, task: "Task | str | Path") -> OpPattern:
        return op_pattern(Task.of(task))

    def as_pattern(self, task_or_pattern: TaskOrPattern) -> OpPattern:
        """An OpPattern from an OpPattern, a task (path or source) or a signature string."""
        if isinstance(task_or_pattern, OpPattern):
            return task_or_pattern
        if names_task(task_or_pattern):
            return self.pattern(task_or_pattern)
        return from_signature(str(task_or_pattern))

    _as_pattern = as_pattern

    @property
    def graph_warnings(self) -> list[str]:
        """What was wrong with the graph file when it was loaded (a corrupt file is backed up)."""
        return list(self.graph.warnings)

    def suggest(self, task_or_pattern: TaskOrPattern, gpu: str | None = None,
                k: int = 8) -> list[Transformation]:
        """Transformations ranked by evidence for a task, an OpPattern or a signature string."""
        return [transformation_from(s) for s in self.graph.suggest(self.as_pattern(task_or_pattern), gpu=gpu, k=k)]

    def suggestions(self, task_or_pattern: TaskOrPattern, gpu: str | None = None,
                    k: int = 8) -> "list[Suggestion]":
        """The graph's own ranked suggestions (with counts and log ids)."""
        return self.graph.suggest(self.as_pattern(task_or_pattern), gpu=gpu, k=k)

    def why(self, task_or_pattern: TaskOrPattern, transformation: str) -> "Evidence":
        return self.graph.why(self.as_pattern(task_or_pattern), transformation)

    def failures(self, task_or_pattern: TaskOrPattern, gpu: str | None = None) -> "list[Failure]":
        return self.graph.failures(self.as_pattern(task_or_pattern), gpu=gpu)

    def borrowed_failures(self, task_or_pattern: TaskOrPattern,
                          gpu: str | None = None) -> "list[tuple[str | None, Failure]]":
        """What lost on this pattern ((None, failure) pairs); when nothing is recorded for it,
        what lost on patterns of the same category ((that pattern, failure) pairs)."""
        pattern = self.as_pattern(task_or_pattern)
        lost: list[tuple[str | None, Failure]] = [(None, f) for f in self.graph.failures(pattern, gpu=gpu)]
        if not lost:
            lost = [(other, f) for other in self.graph.patterns()
                    if other != pattern.signature and category_of(other) == pattern.category
                    for f in self.graph.failures(other, gpu=gpu)]
        return lost

    def graph_table(self, task_or_pattern: TaskOrPattern, gpu: str | None = None) -> "list[Suggestion]":
        """Every transformation with evidence on one pattern."""
        return self.graph.table(self.as_pattern(task_or_pattern), gpu=gpu)

    def skills_for(self, task_or_pattern: TaskOrPattern) -> list[str]:
        return self.graph.skills_for(self.as_pattern(task_or_pattern))

    def graph_overview(self, gpu: str | None = None) -> dict[str, Any]:
        """Every pattern in the graph with its evidence counts, best transformation and skills."""
        graph = self.graph
        patterns = []
        for sig in graph.patterns():
            rows = graph.table(sig, gpu=gpu)
            patterns.append({"pattern": sig, "transformations": len(rows),
                             "attempts": sum(r.attempts for r in rows),
                             "best": rows[0].transformation if rows and rows[0].successes else None,
                             "skills": graph.skills_for(sig)})
        return {"path": str(graph.path), "written": graph.path.exists(), "patterns": patterns}

    def export_graph(self, path: "str | Path", format: str | None = None) -> tuple[Path, str]:
        """Write the graph as GraphML, DOT or JSON (default: from the suffix, else GraphML)."""
        fmt = format or {".dot": "dot", ".gv": "dot", ".json": "json"}.get(Path(path).suffix, "graphml")
        return self.graph.export(path, fmt), fmt

    def record_outcome(self, pattern: TaskOrPattern, transformations: "list[str] | str", gpu: str,
                       outcome: str, **fields: Any) -> dict[str, Any]:
        """One attempt as graph evidence (through ``memory.writeback``)."""
        return writeback.record_outcome(self.graph, self.as_pattern(pattern), transformations, gpu, outcome,
                                        **fields)

    # --- skills ------------------------------------------------------------------------
    def skills(self, include_retired: bool = False) -> list[SkillRef]:
        return [s.to_ref() for s in self.library.list(include_retired=include_retired)]

    def skill(self, name: str) -> "Skill":
        """One skill: its files, state and provenance."""
        return self.library.get(name)

    def find_skills(self, task_or_pattern: "TaskOrPattern | None" = None, text: str | None = None,
                    k: int = 3) -> list[SkillRef]:
        """Skills ranked by pattern similarity and word overlap (retired ones left out)."""
        pattern = None if task_or_pattern is None else self.as_pattern(task_or_pattern)
        return [m.skill.to_ref(m.score) for m in self.library.find(pattern, text=text, k=k)]

    def skill_rows(self, include_retired: bool = True) -> list[dict[str, Any]]:
        """One row per skill: name, pattern, backend, state, source, staleness, best speedups, GPU."""
        rows = []
        for s in self.library.list(include_retired=include_retired):
            prov, status = s.provenance, self.library.status(s)
            rows.append({"name": s.name, "pattern": s.pattern, "backend": s.backend, "state": s.review_state,
                         "source": s.source, "stale": self.library.is_stale(s), "evidence": status.evidence,
                         "freshness": status.freshness, "status": status.label(),
                         "speedup_vs_eager": prov.get("speedup_vs_eager"),
                         "speedup_vs_compile": prov.get("speedup_vs_compile"), "gpu": prov.get("gpu")})
        return rows

    def is_stale(self, skill: "Skill | str") -> str | None:
        """Why a skill's measurement does not hold here (another GPU, torch or triton), or None."""
        return self.library.is_stale(self.skill(skill) if isinstance(skill, str) else skill)

    def skill_status(self, skill: "Skill | str"):
        """State, evidence and freshness of a skill (``kernelrag.memory.skill_status``)."""
        return self.library.status(self.skill(skill) if isinstance(skill, str) else skill)

    def skill_detail(self, name: str) -> dict[str, Any]:
        """A skill's metadata, staleness and alternatives, as plain data."""
        s = self.skill(name)
        data = s.to_dict()
        data["stale"] = self.library.is_stale(s)
        data["alternatives"] = [str(p) for p in s.alternatives()]
        return data

    @property
    def skill_problems(self) -> list[str]:
        """Skill folders that could not be read, and why."""
        return list(self.library.problems)

    def approve(self, name: str) -> "Skill":
        return self.library.approve(name)

    def retire(self, name: str) -> "Skill":
        return self.library.retire(name)

    def promote(self, name: str, dest: "str | Path | None" = None) -> Path:
        """Copy a learned skill into the seed skills folder (or ``dest``)."""
        return self.library.promote(name, dest=dest)

    def verify_skill(self, name: str, device: str | None = None, write: bool = True) -> "tuple[Verdict, str]":
        """Run the verifier on a skill's kernel; for a learned skill (unless ``write`` is False)
        record the result through ``memory.writeback`` (review state by VERIFY.md 18)."""
        s = self.skill(name)
        options = {"tolerance": dict(s.tolerance)} if s.tolerance else {}
        v = verify(str(s.reference_path), str(s.kernel_path), device=device or self.settings.device,
                   timeout_s=self.settings.verify_timeout_s, **options)
        note = ""
        if s.source == "learned" and write:
            note = writeback.record_verification(self.library, s, v)
        elif s.source == "seed":
            note = "seed skill: numbers are recorded by `python3 -m kernelrag.bench.measure_skills --write` on a GPU"
        return v, note

    # --- ask -----------------------------------------------------------------------
    def _ask_context(self, question: str, k: int):
        notes: list[str] = []
        retriever = self._retriever(notes)
        passages: list[Passage] = []
        if retriever.store is not None:
            try:
                passages = retriever.search(question, k=k)
            except Exception as exc:
                retriever.notes.append(f"{STORE_FAILED}: {exc}")
        ops = _question_ops(question)
        transformations = []
        if ops and retriever.graph is not None:
            transformations = retriever.transformations(from_signature(">".join(ops)), k=5)
        skills = retriever.skills(text=question, k=3)
        return passages, transformations, skills, retriever.notes

    def ask(self, question: str, k: int = 5) -> AskResult:
        """An answer citing retrieved passages as [n]; offline, the labelled evidence itself."""
        passages, transformations, skills, notes = self._ask_context(question, k)
        result = AskResult(question=question, answer="", mode="retrieved", citations=[p.citation for p in passages],
                           passages=passages, transformations=transformations, skills=skills, notes=notes)
        if self.llm is not None:
            try:
                done = self.llm.chat(ask_messages(question, passages, transformations, skills))
                result.answer, result.mode = done.text, "llm"
                result.cost = Cost(llm_calls=1, prompt_tokens=done.prompt_tokens,
                                   completion_tokens=done.completion_tokens, seconds=done.seconds)
                cited = {int(n) for n in re.findall(r"\[(\d+)\]", done.text)}
                unknown = sorted(n for n in cited if not 1 <= n <= len(passages))
                if unknown:
                    result.notes.append(f"the answer cites {unknown}, which are not among the {len(passages)} passages")
                return result
            except LLMError as exc:
                result.notes.append(f"LLM failed, showing retrieved evidence instead: {exc}")
        result.answer = offline_answer(question, passages, transformations, skills, result.notes)
        return result

    def ask_stream(self, question: str, k: int = 5) -> Iterator[str]:
        """The answer as text chunks (for the UI). Its [n] are the passages that
        ``search(question, k)`` returns, which the UI shows beside the answer."""
        passages, transformations, skills, notes = self._ask_context(question, k)
        if self.llm is not None:
            yield from self.llm.stream(ask_messages(question, passages, transformations, skills))
            return
        for block in offline_answer(question, passages, transformations, skills, notes).split("\n\n"):
            yield block + "\n\n"

    # --- generate and verify ----------------------------------------------------------
    def generate(self, task: "Task | str | Path", backend: str = "triton", max_rounds: int | None = None,
                 device: str | None = None, on_round: Callable[[Round], None] | None = None,
                 use_memory: bool = True) -> GenerateResult:
        """Memory first, else draft -> verify -> feedback rounds; writes back what it learned."""
        retriever = self._retriever()
        parts = Parts(settings=self.settings, library=self.library, retriever=retriever, graph=retriever.graph,
                      llm=self.llm, store=self.store, notes=[])
        result = Loop(parts, task, backend=backend, max_rounds=max_rounds, device=device,
                      on_round=on_round, use_memory=use_memory).run()
        self.library.refresh()
        return result

    def verify(self, task: "Task | str | Path", candidate: "str | Path", device: str | None = None,
               **options: Any) -> "Verdict":
        """Verify a candidate (path or source) against a task (path or source): a Verdict."""
        task_src = Task.of(task).source
        cand = read_source(candidate)
        options.setdefault("timeout_s", self.settings.verify_timeout_s)
        options.setdefault("profile", self.settings.profile)
        options.setdefault("cache_dir", self.settings.cache_dir)
        return verify_source(task_src, cand, device=device or self.settings.device, **options)

    def verify_many(self, task: "Task | str | Path", candidates: "list[str | Path]", device: str | None = None,
                    **options: Any) -> "list[Verdict]":
        """Verify several candidates (paths or sources) against one task in one session: the
        trial seeds, references and torch.compile baseline are shared (see verify.session)."""
        task_src = Task.of(task).source
        sources = [read_source(c) for c in candidates]
        options.setdefault("timeout_s", self.settings.verify_timeout_s)
        options.setdefault("cache_dir", self.settings.cache_dir)
        with VerifySession(device=device or self.settings.device, **options) as session:
            return session.verify_sources(task_src, sources)

    def with_settings(self, **changes: Any) -> "KernelRAG":
        """A new facade whose settings are these with ``changes`` (None values kept)."""
        return KernelRAG(settings=replace(self.settings, **changes))

    # --- llama-index ---------------------------------------------------------------------
    def as_retriever(self, k: int | None = None, kind: str | None = None, mode: str = "hybrid"):
        """A llama-index ``BaseRetriever`` over the knowledge store; its nodes carry kernelrag's citations."""
        from kernelrag.errors import StoreError
        from kernelrag.knowledge.llamaindex import retriever

        if self.store is None:
            raise StoreError("; ".join(self.notes) + "; a retriever needs the knowledge store")
        return retriever(self.store, k=k or self.settings.search_k, kind=kind, mode=mode)

    def as_tools(self) -> list:
        """llama-index ``FunctionTool``s: search_docs, suggest_transformations, find_skills,
        verify_kernel, generate_kernel (see ``kernelrag.knowledge.llamaindex``)."""
        from kernelrag.knowledge.llamaindex import function_tools

        return function_tools(self)

    def export(self, out: "str | Path | None" = None, include_failed: bool = False) -> ExportResult:
        """Verified optimization trajectories as a JSONL dataset (SFT pairs + transcripts)."""
        return export_jsonl(self.settings, out, include_failed=include_failed)
