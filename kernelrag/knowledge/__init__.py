"""The knowledge store: documents chunked by heading, embedded offline, kept in Chroma,
searched by dense + BM25 retrieval fused by reciprocal rank.

    from kernelrag.knowledge import KnowledgeStore
    store = KnowledgeStore(load_settings())
    report = store.ingest(["corpus/"])           # IngestReport
    hits = store.search("bank conflicts", k=5)   # list[SearchHit]; hits[0].citation()

Importing this package is cheap; chromadb, llama-index and the model load on first use.
"""
from __future__ import annotations

from kernelrag.knowledge.models import KINDS, MODES, Chunk, FileError, IngestReport, SearchHit, SourceInfo

__all__ = ["KINDS", "MODES", "Chunk", "FileError", "IngestReport", "KnowledgeStore", "SearchHit",
           "SourceInfo", "search"]


def __getattr__(name: str):
    if name == "KnowledgeStore":
        from kernelrag.knowledge.store import KnowledgeStore

        return KnowledgeStore
    if name == "search":
        from kernelrag.knowledge.store import search

        return search
    raise AttributeError(f"module 'kernelrag.knowledge' has no attribute {name!r}")
