"""kernelrag's tools over the Model Context Protocol (the official ``mcp`` SDK).

    kernelrag mcp                        # stdio: an agent starts it as a subprocess
    kernelrag mcp --transport http       # streamable HTTP at http://127.0.0.1:8765/mcp

Seven tools, each a thin call into the facade (``kernelrag.api.KernelRAG``) with
typed arguments and a typed result (pydantic models, sent as structured content
with an output schema): search_docs, suggest_transformations, find_skills,
get_skill, verify_kernel, generate_kernel, record_outcome. A failure (a missing
task file, an unknown skill, an empty store) comes back as a tool error whose text
says what to do; the server keeps serving. A bad kernel is not a failure: it gets
a verdict with ``ok = false``.

Inputs are untrusted: string and list arguments are capped (sources 1 MB, names 200
characters), an argument a tool does not take is an error, and a path is read only
under ``input_roots`` (default: the working directory; ``read_input``).

This is the only module that imports ``mcp``.
"""
from __future__ import annotations

import functools
import inspect
import logging
import threading
from typing import Annotated, Any, Callable, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from kernelrag import __version__
from kernelrag.api import KernelRAG
from kernelrag.errors import ConfigError, KernelRAGError

log = logging.getLogger("kernelrag.mcp")
T = TypeVar("T")

Device = Literal["auto", "cpu", "cuda"]
Kind = Literal["guide", "isa", "note", "log", "skill"]
Outcome = Literal["success", "slower", "compile_error", "incorrect", "timeout", "rejected", "crashed"]
MAX_SOURCE = 1_048_576        # characters of a source argument (kernelrag.config.MAX_SOURCE_BYTES: bytes)
MAX_NAME = 200               # characters of a name (skill, GPU, dtype, transformation id)
MAX_TEXT = 2_000             # characters of a query or an op pattern
TaskText = Annotated[str, Field(max_length=MAX_SOURCE,
                                description="a KernelBench task (class Model, get_inputs, get_init_inputs): "
                                            "the Python source itself, or the path of a file under the "
                                            "server's input folders (KERNELRAG_INPUT_ROOTS, default: its "
                                            "working directory); at most 1 MB")]
Name = Annotated[str, Field(max_length=MAX_NAME)]

INSTRUCTIONS = """kernelrag: a GPU-kernel assistant with a verified skill memory.
Typical use: search_docs for background; suggest_transformations and find_skills for a task;
write a ModelNew kernel (Triton) and check it with verify_kernel (it cannot be fooled: read
verdict.feedback when ok is false); or let generate_kernel draft, verify and iterate for you.
After trying a transformation yourself, record_outcome stores the evidence for the next run."""


# --- results ---------------------------------------------------------------------------
class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Source(_Out):
    number: int
    source: str
    title: str = ""
    section: str = ""
    start_line: int | None = None
    end_line: int | None = None
    page: int | None = None
    kind: str = ""
    label: str = Field("", description="'[n] file § section, lines a-b': cite the passage with it")


class DocPassage(_Out):
    citation: Source
    text: str
    score: float


class SearchDocsResult(_Out):
    query: str
    passages: list[DocPassage]


class TransformationOut(_Out):
    id: str
    score: float
    evidence: list[str] = Field(description="one line each, with attempts, successes and speedups")
    rationale: str = ""


class SuggestResult(_Out):
    pattern: str = Field(description="the canonical op pattern the suggestions are for")
    transformations: list[TransformationOut]


class SkillSummary(_Out):
    name: str
    pattern: str
    category: str
    backend: str
    state: str = Field(description="draft | verified | approved | retired | needs_review")
    summary: str = ""
    similarity: float = 0.0
    transformations: list[str] = []
    speedup_vs_eager: float | None = None
    gpu: str | None = None


class FindSkillsResult(_Out):
    skills: list[SkillSummary]


class SkillDetail(SkillSummary):
    source: str = Field(description="seed (shipped) or learned (written by a generate run)")
    dtypes: list[str] = []
    shapes: dict[str, Any] = {}
    provenance: dict[str, Any] = Field(default_factory=dict, description="measured numbers and where")
    stale: str | None = Field(None, description="why the measured numbers do not hold here, or null")
    kernel_source: str
    reference_source: str


class CheckOut(_Out):
    name: str
    passed: bool
    detail: str = ""


class FindingOut(_Out):
    rule: str
    line: int | None = None
    message: str
    blocking: bool = True


class TimingOut(_Out):
    median_ms: float
    iqr_ms: float
    trials: int


class VerdictOut(_Out):
    ok: bool = Field(description="compiled, correct and no blocking finding")
    status: str
    reason: str = ""
    compiled: bool = False
    correct: bool = False
    checkable: bool = True
    error: str | None = None
    checks: list[CheckOut] = []
    findings: list[FindingOut] = []
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_norm_err: float | None = None
    mismatch_count: int | None = None
    device: str = "cpu"
    shrunk_sizes: dict[str, list[int]] | None = None
    timed: bool = False
    kernel_ms: TimingOut | None = None
    eager_ms: TimingOut | None = None
    compile_ms: TimingOut | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    achieved_gbps: float | None = None
    achieved_tflops: float | None = None
    frac_roofline: float | None = None
    roofline_floor_ms: float | None = None
    gpu: str | None = None
    warnings: list[str] = []
    summary: str = Field("", description="one line for a person")
    feedback: str = Field("", description="what to fix, most important first (for the next draft)")


class RoundOut(_Out):
    index: int
    drafter: str
    draft: str
    verdict: VerdictOut | None = None
    feedback: str = ""
    transformations: list[str] = []
    skill: str | None = None
    error: str | None = None


class GenerateOut(_Out):
    ok: bool
    pattern: str
    backend: str
    reason: str
    from_memory: bool = False
    source: str = Field(description="the final kernel source ('' when no round produced one)")
    verdict: VerdictOut | None = None
    rounds: list[RoundOut]
    citations: list[Source] = []
    write_back: dict[str, Any] = Field(default_factory=dict, description="skill, graph records and log written")
    cost: dict[str, Any] = Field(default_factory=dict)


class RecordOut(_Out):
    rid: str
    pattern: str
    transformations: list[str]
    gpu: str
    outcome: str
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    date: str = ""


# --- conversion ------------------------------------------------------------------------
def source_out(citation: Any) -> Source:
    return Source.model_validate({**citation.to_dict(), "label": citation.label()})


def verdict_out(verdict: Any) -> VerdictOut | None:
    if verdict is None:
        return None
    return VerdictOut.model_validate({**verdict.to_dict(), "summary": verdict.summary(),
                                      "feedback": verdict.feedback()})


def skill_summary(ref: Any) -> SkillSummary:
    return SkillSummary.model_validate(ref.to_dict())


def generate_out(result: Any) -> GenerateOut:
    rounds = [RoundOut.model_validate({**r.to_dict(), "verdict": verdict_out(r.verdict)}) for r in result.rounds]
    return GenerateOut(ok=result.ok, pattern=result.pattern, backend=result.backend, reason=result.reason,
                       from_memory=result.from_memory, source=result.source, verdict=verdict_out(result.verdict),
                       rounds=rounds, citations=[source_out(c) for c in result.citations],
                       write_back=result.write_back.to_dict(), cost=result.cost.to_dict())


# --- the facade, one per server process -------------------------------------------------------
_api: KernelRAG | None = None
_api_lock = threading.Lock()


def facade() -> KernelRAG:
    global _api
    with _api_lock:
        if _api is None:
            _api = KernelRAG()
        return _api


def guarded(tool: str, work: Callable[[], T]) -> T:
    """Run a tool body; any failure becomes a tool error whose text says what went wrong."""
    try:
        return work()
    except ToolError:
        raise
    except KernelRAGError as exc:
        raise ToolError(str(exc)) from exc
    except Exception as exc:
        log.exception("tool %s failed", tool)
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


def _source_of(api: Any, value: str, what: str) -> Any:
    """Source text as given, or a file under the input folders as its path (see ``read_input``)."""
    from kernelrag.config import read_input

    source, path = read_input(value, api.settings, what)
    return path if path is not None else source


def _pattern_of(api: Any, task_or_pattern: str) -> Any:
    """An op pattern from a signature, a task's source, or a task file under the input folders;
    a path that names no file is an error, not an empty pattern."""
    from kernelrag.patterns import from_signature

    text = task_or_pattern.strip()
    if "\n" in text or "class " in text or text.endswith(".py") or "/" in text or "\\" in text:
        return api.pattern(_source_of(api, text, "task"))
    return from_signature(text)


# --- the tools -------------------------------------------------------------------------
def search_docs(query: Annotated[str, Field(max_length=MAX_TEXT, description="what to look for, in words")],
                k: Annotated[int, Field(ge=1, le=50)] = 5,
                kind: Annotated[Kind | None, Field(description="only this kind of document")] = None,
                ) -> SearchDocsResult:
    """Hybrid (dense + BM25) search of the knowledge store; each passage carries a citation."""
    def work() -> SearchDocsResult:
        passages = facade().search(query, k=k, kind=kind)
        return SearchDocsResult(query=query, passages=[
            DocPassage(citation=source_out(p.citation), text=p.text, score=p.score) for p in passages])
    return guarded("search_docs", work)


def suggest_transformations(
        task_or_pattern: Annotated[str, Field(max_length=MAX_SOURCE,
                                              description="an op pattern such as 'softmax[dim=-1]', or a "
                                                          "KernelBench task (source, or a file path under "
                                                          "the input folders)")],
        gpu: Annotated[str | None, Field(max_length=MAX_NAME,
                                         description="prefer evidence from this GPU, e.g. 'NVIDIA H200'")] = None,
        k: Annotated[int, Field(ge=1, le=30)] = 8) -> SuggestResult:
    """Transformations the reasoning graph ranks for a pattern, with the evidence behind each rank."""
    def work() -> SuggestResult:
        api = facade()
        pattern = _pattern_of(api, task_or_pattern)
        found = api.suggest(pattern, gpu=gpu, k=k)
        return SuggestResult(pattern=getattr(pattern, "signature", str(pattern)),
                             transformations=[TransformationOut.model_validate(t.to_dict()) for t in found])
    return guarded("suggest_transformations", work)


def find_skills(query: Annotated[str, Field(max_length=MAX_TEXT,
                                            description="words to match (name, summary, transformations)")] = "",
                task_or_pattern: Annotated[str | None, Field(max_length=MAX_SOURCE,
                                                             description="rank by similarity to this op "
                                                                         "pattern or task")] = None,
                k: Annotated[int, Field(ge=1, le=50)] = 5) -> FindSkillsResult:
    """Skills (verified kernels) ranked by pattern similarity and word overlap; retired ones are left out."""
    def work() -> FindSkillsResult:
        api = facade()
        pattern = _pattern_of(api, task_or_pattern) if task_or_pattern else None
        if pattern is not None and not getattr(pattern, "known", True):
            raise ToolError(f"op pattern unknown: {getattr(pattern, 'reason', '')}; pass a pattern such as "
                            "'softmax[dim=-1]' or a KernelBench task")
        refs = api.find_skills(pattern, text=query or None, k=k)
        return FindSkillsResult(skills=[skill_summary(ref) for ref in refs])
    return guarded("find_skills", work)


def get_skill(name: Annotated[str, Field(max_length=MAX_NAME,
                                         description="the skill's name, e.g. 'softmax_online'")]) -> SkillDetail:
    """One skill: its kernel and reference source, state and measured provenance."""
    def work() -> SkillDetail:
        api = facade()
        s = api.skill(name)
        return SkillDetail.model_validate({
            **s.to_ref().to_dict(), "source": s.source, "dtypes": s.dtypes, "shapes": s.shapes,
            "provenance": s.provenance, "stale": api.is_stale(s),
            "kernel_source": s.kernel_source(), "reference_source": s.reference_source()})
    return guarded("get_skill", work)


def verify_kernel(task: TaskText,
                  candidate: Annotated[str, Field(max_length=MAX_SOURCE,
                                                  description="Python source defining class ModelNew, or the "
                                                              "path of a file under the input folders; at "
                                                              "most 1 MB")],
                  device: Device = "auto") -> VerdictOut:
    """Verify a candidate kernel against a task: correctness on adversarial inputs, rule checks, timing on a GPU."""
    def work() -> VerdictOut:
        api = facade()
        task_src = _source_of(api, task, "task")
        cand_src = _source_of(api, candidate, "candidate")
        return verdict_out(api.verify(task_src, cand_src, device=device))
    return guarded("verify_kernel", work)


async def generate_kernel(task: TaskText, ctx: Context,
                          backend: Literal["triton", "cuda"] = "triton",
                          max_rounds: Annotated[int | None, Field(ge=1, le=10)] = None,
                          device: Device | None = None,
                          use_memory: bool = True) -> GenerateOut:
    """Draft, verify and iterate a kernel for a task (memory first; LLM if configured, else offline)."""
    def work() -> GenerateOut:
        api = facade()
        total = max_rounds or api.settings.max_rounds

        def on_round(r: Any) -> None:
            status = getattr(r.verdict, "status", None) or r.error or "no verdict"
            try:
                anyio.from_thread.run(ctx.report_progress, r.index, total,
                                      f"round {r.index} [{r.drafter}]: {status}")
            except Exception as exc:       # a client that went away must not stop the run
                log.debug("progress not sent: %s", exc)

        return generate_out(api.generate(_source_of(api, task, "task"), backend=backend, max_rounds=max_rounds,
                                         device=device,
                                         on_round=on_round, use_memory=use_memory))
    return await anyio.to_thread.run_sync(functools.partial(guarded, "generate_kernel", work))


def record_outcome(pattern: Annotated[str, Field(max_length=MAX_TEXT, description="op pattern, e.g. 'softmax[dim=-1]'")],
                   transformations: Annotated[list[Name], Field(min_length=1, max_length=20,
                                                                description="transformation ids")],
                   gpu: Annotated[str, Field(max_length=MAX_NAME,
                                             description="GPU name, e.g. 'NVIDIA H200', or 'cpu'")],
                   outcome: Outcome,
                   speedup_vs_eager: Annotated[float | None, Field(gt=0)] = None,
                   speedup_vs_compile: Annotated[float | None, Field(gt=0)] = None,
                   kernel_ms: Annotated[float | None, Field(gt=0)] = None,
                   dtype: Annotated[str | None, Field(max_length=MAX_NAME)] = None,
                   detail: Annotated[str | None, Field(max_length=300)] = None) -> RecordOut:
    """Record one attempt (a transformation set on a pattern and GPU) as evidence in the reasoning graph."""
    def work() -> RecordOut:
        record = facade().record_outcome(pattern, transformations, gpu, outcome, speedup_vs_eager=speedup_vs_eager,
                                         speedup_vs_compile=speedup_vs_compile, kernel_ms=kernel_ms,
                                         dtype=dtype, detail=detail)
        return RecordOut.model_validate(record)
    return guarded("record_outcome", work)


TOOLS = (search_docs, suggest_transformations, find_skills, get_skill, verify_kernel, generate_kernel,
         record_outcome)


PARAMETERS = {fn.__name__: [n for n, p in inspect.signature(fn).parameters.items()
                            if p.annotation not in (Context, "Context")] for fn in TOOLS}


class StrictServer(MCPServer):
    """An MCPServer whose tools refuse arguments they do not take (instead of dropping them)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        known = PARAMETERS.get(name)
        unknown = sorted(set(arguments or {}) - set(known or ())) if known is not None else []
        if unknown:
            raise ToolError(f"{name} does not take argument(s) {', '.join(map(repr, unknown))}; "
                            f"its arguments are: {', '.join(known)}")
        return await super().call_tool(name, arguments, context)


def build_server(api: KernelRAG | None = None) -> MCPServer:
    """The MCP server; ``api`` (a KernelRAG) is created on first use when not given."""
    global _api
    if api is not None:
        _api = api
    server = StrictServer("kernelrag", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    for fn in TOOLS:
        server.add_tool(fn, structured_output=True)
    return server


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve until the client disconnects (stdio) or the process is stopped (http)."""
    server = build_server()
    if transport == "stdio":
        server.run("stdio")
    elif transport == "http":
        server.run("streamable-http", host=host, port=port)
    else:
        raise ConfigError(f"transport {transport!r} is not one of stdio, http")
