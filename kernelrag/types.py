"""Typed results shared by retrieval, drafting, the generate loop and the facade.

Standard library only (layer L0). Fields that hold objects from higher layers
(a verifier ``Verdict``, a ``OpPattern``) are typed ``Any`` here and turned into
plain data by ``to_dict``, which calls their own ``to_dict`` when they have one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

OFFLINE_LABEL = "retrieved, not written by an LLM"


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as plain data (its own ``to_dict`` builds on this)."""
    return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def plain(value: Any) -> Any:
    """Turn a result (dataclasses, verdicts, paths, lists of them) into JSON-ready data."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    return str(value)


@dataclass(frozen=True)
class Citation:
    """Where a retrieved passage came from; ``number`` is its [n] in an answer."""

    number: int
    source: str
    title: str = ""
    section: str = ""
    start_line: int | None = None
    end_line: int | None = None
    page: int | None = None
    kind: str = ""

    def label(self) -> str:
        """``[2] corpus/bank-conflicts.md § Swizzling, lines 10-31``."""
        where = self.source
        if self.section:
            where += f" § {self.section}"
        if self.page is not None:
            where += f", page {self.page}"
        if self.start_line is not None:
            end = self.end_line if self.end_line is not None else self.start_line
            where += f", lines {self.start_line}-{end}"
        return f"[{self.number}] {where}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk of text with its citation and retrieval score."""

    citation: Citation
    text: str
    score: float

    @property
    def number(self) -> int:
        return self.citation.number

    def to_dict(self) -> dict[str, Any]:
        return {"citation": self.citation.to_dict(), "text": self.text, "score": self.score}


@dataclass(frozen=True)
class Transformation:
    """A transformation the reasoning graph ranks for a pattern, with its evidence."""

    id: str
    score: float
    evidence: list[str] = field(default_factory=list)   # one line each, numbers included
    rationale: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SkillRef:
    """A skill found for a task: enough to show it and to fetch its kernel."""

    name: str
    pattern: str
    category: str
    backend: str
    state: str
    summary: str = ""
    path: str = ""
    similarity: float = 0.0
    transformations: list[str] = field(default_factory=list)
    speedup_vs_eager: float | None = None
    gpu: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RetrievedContext:
    """Everything retrieval knows about a task, before any drafting."""

    task_source: str
    task_path: str | None
    pattern: Any                                   # kernelrag.patterns.OpPattern or None
    passages: list[Passage] = field(default_factory=list)
    transformations: list[Transformation] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    skills: list[SkillRef] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be consulted, and why

    @property
    def citations(self) -> list[Citation]:
        return [p.citation for p in self.passages]

    @property
    def signature(self) -> str:
        return getattr(self.pattern, "signature", "") or ""

    def to_dict(self) -> dict[str, Any]:
        out = _fields(self)
        out["citations"] = [c.to_dict() for c in self.citations]
        return out


@dataclass
class DraftResult:
    """One drafted candidate, or why none could be drafted (``ok=False``)."""

    ok: bool
    source: str = ""
    method: str = ""                  # "skill" | "codegen" | "llm"
    skill: str | None = None          # the skill it was instantiated from
    transformations: list[str] = field(default_factory=list)
    reason: str = ""                  # one line: what was done, or why nothing was
    pattern: str = ""                 # the op pattern the drafter saw
    closest: list[str] = field(default_factory=list)   # nearest skills when nothing matched
    messages: list[dict[str, str]] = field(default_factory=list)  # LLM prompt, when one was sent
    unplaced: list[str] = field(default_factory=list)  # ops a partial lowering left in PyTorch, with why

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)


@dataclass(frozen=True)
class GpuFigures:
    """The target device as the prompt describes it; None = unknown (never guessed)."""

    name: str
    sms: int | None = None
    bandwidth_gbps: float | None = None     # measured device-to-device copy
    fp32_tflops: float | None = None        # measured fp32 matmul (no TF32)
    bf16_tflops: float | None = None        # measured bf16 matmul (tensor cores)
    source: str = ""                        # where the figures came from

    def describe(self) -> str:
        def fig(value, unit):
            return f"{value:.4g} {unit}" if value is not None else "unknown"
        return (f"{self.name}; SMs: {self.sms if self.sms is not None else 'unknown'}; "
                f"measured bandwidth: {fig(self.bandwidth_gbps, 'GB/s')}; "
                f"measured fp32 compute: {fig(self.fp32_tflops, 'TFLOP/s')}; "
                f"measured bf16 compute: {fig(self.bf16_tflops, 'TFLOP/s')}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Cost:
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    verify_calls: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Round:
    """One draft -> verify -> feedback step of the generate loop."""

    index: int                        # 1-based
    drafter: str                      # "llm" | "offline" | "memory" | "tune" (configuration search)
    draft: str                        # candidate source; "" when the drafter produced none
    verdict: Any | None               # kernelrag.verify.Verdict, None when nothing was verified
    feedback: str                     # what the next round is told
    transformations: list[str] = field(default_factory=list)
    skill: str | None = None
    error: str | None = None          # drafting error (no code block, wrong class name...)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.verdict is not None and getattr(self.verdict, "ok", False))

    def to_dict(self) -> dict[str, Any]:
        out = _fields(self)
        out["ok"] = self.ok
        return out


@dataclass
class WriteBack:
    """What a generate run left behind for the next one."""

    skill: str | None = None          # learned skill written or updated
    skill_path: str | None = None
    skill_state: str | None = None    # "verified" | "needs_review"
    graph_records: int = 0            # outcomes recorded in the reasoning graph
    log_path: str | None = None       # optimization log (JSONL)
    ingested: bool = False            # the log is searchable in the knowledge store
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)   # parts that could not be written: skill, graph, log

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class GenerateResult:
    task_path: str | None
    pattern: str
    backend: str
    ok: bool
    source: str                       # final kernel source ("" when no round produced one)
    verdict: Any | None               # verdict of the final kernel
    rounds: list[Round] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    write_back: WriteBack = field(default_factory=WriteBack)
    from_memory: bool = False
    reason: str = ""                  # one line: how it ended

    def summary(self) -> str:
        head = "OK" if self.ok else "FAILED"
        where = " (from memory)" if self.from_memory else ""
        lines = [f"{head}{where}: {self.pattern or 'unknown pattern'} -> {self.reason}"]
        for r in self.rounds:
            status = getattr(r.verdict, "status", None) or ("draft error" if r.error else "not verified")
            extra = f" skill={r.skill}" if r.skill else ""
            lines.append(f"  round {r.index} [{r.drafter}{extra}]: {status}")
        recommend = getattr(self.verdict, "recommendation", None)
        if callable(recommend):
            lines.append(f"  recommendation: {recommend()}")
        c = self.cost
        lines.append(f"  cost: {c.llm_calls} LLM calls, {c.prompt_tokens}+{c.completion_tokens} tokens, "
                     f"{c.verify_calls} verifications, {c.seconds:.1f} s")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)


@dataclass
class AskResult:
    question: str
    answer: str                       # with [n] citations to ``citations``
    mode: str                         # "llm" | "retrieved"
    citations: list[Citation] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    transformations: list[Transformation] = field(default_factory=list)
    skills: list[SkillRef] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _fields(self)


@dataclass
class ExportResult:
    path: str
    sft_pairs: int
    transcripts: int
    runs_read: int
    runs_skipped: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
