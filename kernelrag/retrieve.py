"""Retrieval (layer L2): what the stores know about a task or a question.

Combines the knowledge store (passages with citations), the reasoning graph
(ranked transformations with evidence, known failures) and the skill library
(similar verified kernels). No LLM, no GPU. Any store may be missing (the GPU
machine has no knowledge store): the context then says what was not consulted.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelrag.errors import KernelRAGError
from kernelrag.patterns import op_pattern
from kernelrag.task import Task
from kernelrag.types import Citation, Passage, RetrievedContext, SkillRef, Transformation

if TYPE_CHECKING:
    from kernelrag.config import Settings
    from kernelrag.knowledge import KnowledgeStore
    from kernelrag.memory.graph import ReasoningGraph
    from kernelrag.memory.skills import SkillLibrary
    from kernelrag.patterns import OpPattern

LOG_PASSAGES = 2          # extra passages from optimization logs of the same pattern


def passages_from_hits(hits: list[Any], start: int = 1) -> list[Passage]:
    """Knowledge-store hits as numbered passages ([start], [start+1], ...)."""
    out = []
    for i, h in enumerate(hits, start):
        cite = Citation(number=i, source=h.source, title=getattr(h, "title", "") or "",
                        section=getattr(h, "section", "") or "", start_line=getattr(h, "start_line", None),
                        end_line=getattr(h, "end_line", None), page=getattr(h, "page", None),
                        kind=getattr(h, "kind", "") or "")
        out.append(Passage(citation=cite, text=h.text, score=float(h.score)))
    return out


def transformation_from(s: Any) -> Transformation:
    """A graph Suggestion as a typed Transformation (the evidence line keeps its numbers)."""
    line = s.line() if hasattr(s, "line") else str(s)
    evidence = [re.sub(r"\s{2,}", "; ", line.strip())]
    if getattr(s, "log_ids", None):
        evidence.append("logs: " + ", ".join(s.log_ids[:3]))
    return Transformation(id=s.transformation, score=float(s.score), evidence=evidence,
                          rationale=getattr(s, "description", "") or "")


def _task_query(source: str, pattern: "OpPattern") -> str:
    doc = re.search(r'^\s*(?:"""|\'\'\')(.*?)(?:"""|\'\'\')', source, re.DOTALL)
    words = [pattern.signature, pattern.category, " ".join(pattern.ops)] if pattern.known else []
    if doc:
        words.append(" ".join(doc.group(1).split())[:300])
    words.append("Triton kernel optimization")
    return " ".join(w for w in words if w)


class Retriever:
    """Reads the stores the facade holds; ``store`` and ``graph`` may be None."""

    def __init__(self, settings: "Settings", *, library: "SkillLibrary", graph: "ReasoningGraph | None" = None,
                 store: "KnowledgeStore | None" = None,
                 notes: list[str] | None = None):
        self.settings = settings
        self.library = library
        self.graph = graph
        self.store = store
        self.notes = list(notes or [])

    # --- the parts --------------------------------------------------------------
    def search(self, query: str, k: int | None = None, kind: str | None = None,
               start: int = 1) -> list[Passage]:
        if self.store is None:
            return []
        return passages_from_hits(self.store.search(query, k=k or self.settings.search_k, kind=kind), start)

    def transformations(self, pattern: "OpPattern", gpu: str | None = None, k: int = 8) -> list[Transformation]:
        if self.graph is None or not getattr(pattern, "known", True):
            return []
        return [transformation_from(s) for s in self.graph.suggest(pattern, gpu=gpu, k=k)]

    def failures(self, pattern: "OpPattern", gpu: str | None = None, k: int = 8) -> list[str]:
        if self.graph is None or not getattr(pattern, "known", True):
            return []
        return [f.line() for f in self.graph.failures(pattern, gpu=gpu)[:k]]

    def skills(self, pattern: "OpPattern | None" = None, text: str | None = None, k: int = 3) -> list[SkillRef]:
        if pattern is not None and not getattr(pattern, "known", True):
            pattern = None
        if pattern is None and not text:
            return []
        return [m.skill.to_ref(m.score) for m in self.library.find(pattern, text=text, k=k)]

    # --- a task -----------------------------------------------------------------
    def context(self, task: "Task | str | Path", *, k: int | None = None, passages: bool = True,
                gpu: str | None = None) -> RetrievedContext:
        """Everything known about a task: pattern, passages, transformations, failures, skills."""
        task = Task.of(task)
        pattern = op_pattern(task)
        ctx = RetrievedContext(task_source=task.source, task_path=task.path, pattern=pattern,
                               notes=list(self.notes))
        if not pattern.known:
            ctx.notes.append(f"op pattern unknown ({pattern.reason}): no graph evidence or skill match")
        if passages and self.store is not None:
            ctx.passages = self._task_passages(ctx, k or self.settings.search_k)
        ctx.transformations = self.transformations(pattern, gpu=gpu)
        ctx.failures = self.failures(pattern, gpu=gpu)
        ctx.skills = self.skills(pattern, k=3) if pattern.known else []
        return ctx

    def _task_passages(self, ctx: RetrievedContext, k: int) -> list[Passage]:
        pattern = ctx.pattern
        try:
            hits = list(self.store.search(_task_query(ctx.task_source, pattern), k=k))
            if pattern.known:      # what earlier runs on this pattern learned
                seen = {(h.source, h.start_line) for h in hits}
                for h in self.store.search(pattern.signature, k=LOG_PASSAGES, kind="log"):
                    if (h.source, h.start_line) not in seen:
                        hits.append(h)
        except (KernelRAGError, ImportError) as exc:
            ctx.notes.append(f"knowledge store not searched: {exc}")
            return []
        return passages_from_hits(hits)
