"""kernelrag inside a llama-index pipeline: a retriever and function tools.

    kr = KernelRAG()
    retriever = kr.as_retriever(k=5)                      # a llama_index BaseRetriever
    nodes = retriever.retrieve("how do I avoid shared memory bank conflicts")
    nodes[0].node.metadata["citation"]                    # '[1] corpus/bank-conflicts-swizzling.md §Padding L12-40'
    tools = kr.as_tools()                                 # FunctionTools for an agent
    tools[0].call(query="online softmax").content         # JSON text

Each node is one chunk of the knowledge store: its id is the chunk id, its text the
chunk, its score the retrieval score, and its metadata kernelrag's citation (the
numbered label and its parts: source, section, line or page span, kind, title).
The tools are search_docs, suggest_transformations, find_skills, verify_kernel and
generate_kernel; each answers with JSON text, and a task or kernel named by path is
read only under ``input_roots`` (``kernelrag.config.read_input``), as over MCP.

Only this module imports llama-index for these adapters (the store's own writes use
it in ``ingest``/``search``).
"""
from __future__ import annotations

import json
from typing import Any

from kernelrag.config import MAX_SOURCE_BYTES, check_size, read_input


def _retriever_class():
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    class KernelRAGRetriever(BaseRetriever):
        """Hybrid (dense + BM25) retrieval from a kernelrag knowledge store."""

        def __init__(self, store: Any, k: int = 5, kind: str | None = None, mode: str = "hybrid",
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.store, self.k, self.kind, self.mode = store, k, kind, mode

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            hits = self.store.search(query_bundle.query_str, k=self.k, kind=self.kind, mode=self.mode)
            return [NodeWithScore(node=TextNode(id_=hit.chunk_id or f"hit-{n}", text=hit.text,
                                                metadata=citation_metadata(hit, n)),
                                  score=hit.score) for n, hit in enumerate(hits, 1)]

    return KernelRAGRetriever


def citation_metadata(hit: Any, number: int) -> dict[str, Any]:
    """A node's metadata: the numbered citation label and its parts (flat, as llama-index wants)."""
    meta = {"citation": f"[{number}] {hit.citation()}", "number": number, "source": hit.source,
            "section": hit.section, "kind": hit.kind, "title": hit.title, "chunk_id": hit.chunk_id}
    for key in ("start_line", "end_line", "page", "end_page"):
        value = getattr(hit, key, None)
        if value is not None:
            meta[key] = value
    return meta


def retriever(store: Any, k: int = 5, kind: str | None = None, mode: str = "hybrid") -> Any:
    """A llama-index ``BaseRetriever`` over ``store`` (a KnowledgeStore)."""
    from kernelrag.knowledge.search import run_search

    run_search(store, "", k=k, kind=kind, mode=mode)     # bad k, kind or mode: an error now, not at query time
    return _retriever_class()(store, k=k, kind=kind, mode=mode)


def _json(data: Any) -> str:
    from kernelrag.types import plain

    return json.dumps(plain(data), indent=1, default=str)


def function_tools(api: Any) -> list[Any]:
    """llama-index ``FunctionTool``s over ``api`` (a ``kernelrag.KernelRAG``)."""
    from llama_index.core.tools import FunctionTool

    def source_of(value: str, what: str) -> Any:
        source, path = read_input(value, api.settings, what)
        return path if path is not None else source

    def pattern_of(value: str) -> Any:
        from kernelrag.patterns import from_signature

        looks_like_task = "\n" in value or "class " in value or "/" in value or value.endswith(".py")
        return api.pattern(source_of(value, "task")) if looks_like_task else from_signature(check_size(
            "pattern", value, 2000))

    def search_docs(query: str, k: int = 5) -> str:
        """Hybrid search of kernelrag's knowledge base (CUDA, PTX, Triton, optimization logs).
        Returns JSON: numbered passages, each with its citation label and text."""
        check_size("query", query, 2000)
        return _json([{"citation": p.citation.label(), "text": p.text, "score": p.score}
                      for p in api.search(query, k=max(1, min(int(k), 50)))])

    def suggest_transformations(task_or_pattern: str, gpu: str = "", k: int = 8) -> str:
        """Transformations ranked by evidence for an op pattern ('softmax[dim=-1]') or a
        KernelBench task (source text or a file path). Returns JSON with the evidence lines."""
        pattern = pattern_of(task_or_pattern)
        return _json({"pattern": pattern.signature, "transformations": [
            t.to_dict() for t in api.suggest(pattern, gpu=gpu or None, k=max(1, min(int(k), 30)))]})

    def find_skills(query: str = "", task_or_pattern: str = "", k: int = 5) -> str:
        """Verified kernels in the skill library, ranked by op-pattern similarity and word overlap."""
        check_size("query", query, 2000)
        pattern = pattern_of(task_or_pattern) if task_or_pattern else None
        matches = api.library.find(pattern, text=query or None, k=max(1, min(int(k), 50)))
        return _json([m.skill.to_ref(m.score).to_dict() for m in matches])

    def verify_kernel(task: str, candidate: str, device: str = "auto") -> str:
        """Verify a ModelNew kernel (source or path) against a KernelBench task (source or path):
        correctness on adversarial inputs, rule checks, timing on a GPU. Returns the verdict as JSON
        with a one-line summary and the feedback to act on."""
        verdict = api.verify(source_of(task, "task"), source_of(candidate, "candidate"), device=device)
        return _json({**verdict.to_dict(), "summary": verdict.summary(), "feedback": verdict.feedback()})

    def generate_kernel(task: str, max_rounds: int = 0, device: str = "") -> str:
        """Draft, verify and iterate a kernel for a KernelBench task (memory first; an LLM when one
        is configured, else offline). Returns JSON: ok, reason, the final source and a summary."""
        result = api.generate(source_of(task, "task"), max_rounds=int(max_rounds) or None, device=device or None)
        return _json({"ok": result.ok, "reason": result.reason, "summary": result.summary(),
                      "source": check_size("kernel", result.source, MAX_SOURCE_BYTES),
                      "write_back": result.write_back.to_dict()})

    return [FunctionTool.from_defaults(fn=fn) for fn in
            (search_docs, suggest_transformations, find_skills, verify_kernel, generate_kernel)]
