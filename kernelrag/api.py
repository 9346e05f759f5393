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
from typing import Any, Callable

from kernelrag.config import Settings, load_settings, replace
from kernelrag.types import OFFLINE_LABEL, AskResult, Cost, ExportResult, GenerateResult, Passage, \
    RetrievedContext, Round, SkillRef, Transformation

# Op names that are also everyday words: not taken as ops when they appear in a question.
_COMMON_WORDS = {"all", "any", "where", "round", "sign", "floor", "ceil", "max", "min", "norm", "add",
                 "sub", "mul", "div", "neg", "abs", "log", "exp", "pow", "prod", "threshold", "mean"}


def _question_ops(question: str) -> list[str]:
    """Op names a question mentions, in order ("fuse softmax after matmul" -> softmax, matmul)."""
    from kernelrag.patterns import category_of

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
    def library(self):
        with self._lock:
            if self._library is None:
                from kernelrag.memory.skills import SkillLibrary

                self._library = SkillLibrary(self.settings)
            return self._library

    @property
    def graph(self):
        with self._lock:
            if self._graph is None:
                from kernelrag.memory.graph import ReasoningGraph

                self._graph = ReasoningGraph(self.settings)
            return self._graph

    @property
    def store(self):
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
    def llm(self):
        """The LLM client, or None when no endpoint is configured (offline)."""
        with self._lock:
            if self._llm is None and self.settings.llm_enabled:
                from kernelrag.draft.llm import LLMClient

                self._llm = LLMClient(self.settings)
            return self._llm

    def _graph_or_note(self, notes: list[str]):
        try:
            return self.graph
        except Exception as exc:        # a corrupt graph file must not stop retrieval
            notes.append(f"reasoning graph not consulted: {exc}")
            return None

    def _retriever(self, notes: list[str] | None = None):
        from kernelrag.retrieve import Retriever

        notes = notes if notes is not None else []
        graph = self._graph_or_note(notes)
        store = self.store
        return Retriever(self.settings, library=self.library, graph=graph, store=store,
                         notes=notes + self.notes)

    # --- retrieval -----------------------------------------------------------------
    def search(self, query: str, k: int | None = None, kind: str | None = None,
               mode: str = "hybrid") -> list[Passage]:
        """Hybrid search of the knowledge store; passages numbered [1].. with citations."""
        from kernelrag.errors import StoreError
        from kernelrag.retrieve import passages_from_hits

        if self.store is None:
            raise StoreError("; ".join(self.notes) + "; search where the knowledge store is installed")
        return passages_from_hits(self.store.search(query, k=k or self.settings.search_k, kind=kind, mode=mode))

    def retrieve(self, task: "str | Path", k: int | None = None) -> RetrievedContext:
        """Passages, op pattern, ranked transformations with evidence, failures, similar skills."""
        return self._retriever().context(task, k=k)

    def pattern(self, task: "str | Path"):
        from kernelrag.patterns import op_pattern
        from kernelrag.retrieve import resolve_task

        source, path = resolve_task(task)
        return op_pattern(path or source)

    def _as_pattern(self, task_or_pattern: Any):
        from kernelrag.patterns import OpPattern, from_signature

        if isinstance(task_or_pattern, OpPattern):
            return task_or_pattern
        text = str(task_or_pattern)
        if isinstance(task_or_pattern, Path) or "\n" in text or text.endswith(".py") \
                or Path(text).expanduser().is_file():
            return self.pattern(task_or_pattern)
        return from_signature(text)

    def suggest(self, task_or_pattern: Any, gpu: str | None = None, k: int = 8) -> list[Transformation]:
        """Transformations ranked by evidence for a task, an OpPattern or a signature string."""
        from kernelrag.retrieve import transformation_from

        return [transformation_from(s) for s in self.graph.suggest(self._as_pattern(task_or_pattern), gpu=gpu, k=k)]

    def why(self, task_or_pattern: Any, transformation: str):
        return self.graph.why(self._as_pattern(task_or_pattern), transformation)

    def failures(self, task_or_pattern: Any, gpu: str | None = None) -> list:
        return self.graph.failures(self._as_pattern(task_or_pattern), gpu=gpu)

    def record_outcome(self, pattern: Any, transformations: "list[str] | str", gpu: str, outcome: str,
                       **fields: Any) -> dict[str, Any]:
        return self.graph.record_outcome(self._as_pattern(pattern), transformations, gpu, outcome, **fields)

    def skills(self, include_retired: bool = False) -> list[SkillRef]:
        return [s.to_ref() for s in self.library.list(include_retired=include_retired)]

    def skill(self, name: str):
        """One skill (kernelrag.memory.skills.Skill): its files, state and provenance."""
        return self.library.get(name)

    # --- ask -----------------------------------------------------------------------
    def _ask_context(self, question: str, k: int):
        notes: list[str] = []
        retriever = self._retriever(notes)
        passages: list[Passage] = []
        if retriever.store is not None:
            try:
                passages = retriever.search(question, k=k)
            except Exception as exc:
                notes.append(f"knowledge store not searched: {exc}")
        ops = _question_ops(question)
        transformations = []
        if ops and retriever.graph is not None:
            from kernelrag.patterns import from_signature

            transformations = retriever.transformations(from_signature(">".join(ops)), k=5)
        skills = retriever.skills(text=question, k=3)
        return passages, transformations, skills, retriever.notes

    def ask(self, question: str, k: int = 5) -> AskResult:
        """An answer citing retrieved passages as [n]; offline, the labelled evidence itself."""
        from kernelrag.errors import LLMError

        passages, transformations, skills, notes = self._ask_context(question, k)
        result = AskResult(question=question, answer="", mode="retrieved", citations=[p.citation for p in passages],
                           passages=passages, transformations=transformations, skills=skills, notes=notes)
        if self.llm is not None:
            from kernelrag.draft.prompts import ask_messages

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
            from kernelrag.draft.prompts import ask_messages

            yield from self.llm.stream(ask_messages(question, passages, transformations, skills))
            return
        for block in offline_answer(question, passages, transformations, skills, notes).split("\n\n"):
            yield block + "\n\n"

    # --- generate and verify ----------------------------------------------------------
    def generate(self, task: "str | Path", backend: str = "triton", max_rounds: int | None = None,
                 device: str | None = None, on_round: Callable[[Round], None] | None = None,
                 use_memory: bool = True) -> GenerateResult:
        """Memory first, else draft -> verify -> feedback rounds; writes back what it learned."""
        from kernelrag.generate import Loop, Parts

        retriever = self._retriever()
        parts = Parts(settings=self.settings, library=self.library, retriever=retriever, graph=retriever.graph,
                      llm=self.llm, store=self.store, notes=[])
        result = Loop(parts, task, backend=backend, max_rounds=max_rounds, device=device,
                      on_round=on_round, use_memory=use_memory).run()
        self.library.refresh()
        return result

    def verify(self, task: "str | Path", candidate: "str | Path", device: str | None = None, **options: Any):
        """Verify a candidate (path or source) against a task (path or source): a Verdict."""
        from kernelrag.retrieve import resolve_task
        from kernelrag.verify import verify_source

        task_src, _ = resolve_task(task)
        cand = str(candidate)
        if isinstance(candidate, Path) or ("\n" not in cand and Path(cand).expanduser().is_file()):
            cand = Path(cand).expanduser().read_text()
        options.setdefault("timeout_s", self.settings.verify_timeout_s)
        options.setdefault("cache_dir", self.settings.cache_dir)
        return verify_source(task_src, cand, device=device or self.settings.device, **options)

    def export(self, out: "str | Path | None" = None, include_failed: bool = False) -> ExportResult:
        """Verified optimization trajectories as a JSONL dataset (SFT pairs + transcripts)."""
        from kernelrag.export import export_jsonl

        return export_jsonl(self.settings, out, include_failed=include_failed)
