"""BM25 over the collection's chunks (bm25s), cached on disk per collection revision.

The index text of a chunk is its title, heading path and text, so a query that
names a document's subject finds its chunks. Tokens: lower-case words and
numbers; ``snake_case`` and dotted names (``ld.global.nc``) also count by part;
English stop words dropped; plural ``-s`` folded.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kernelrag.knowledge.models import INTERNAL_KEYS

_WORD = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STOP: frozenset[str] | None = None


def _stopwords() -> frozenset[str]:
    global _STOP
    if _STOP is None:
        from bm25s.stopwords import STOPWORDS_EN

        _STOP = frozenset(STOPWORDS_EN)
    return _STOP


def _fold(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """Index/query tokens of ``text`` (same function for both)."""
    stop = _stopwords()
    out: list[str] = []
    for word in _WORD.findall(_CAMEL.sub("_", text).lower()):
        parts = word.split("_")
        for token in ([word.replace("_", "")] if len(parts) > 1 else []) + parts:
            if (len(token) > 1 or token.isdigit()) and token not in stop:
                out.append(_fold(token))
    return out


def index_text(document: str, meta: dict) -> str:
    return f"{meta.get('title', '')}\n{meta.get('section', '')}\n{document}"


@dataclass
class Bm25Index:
    """A bm25s retriever plus the records it ranks (ids, texts, metadata)."""

    retriever: object | None       # bm25s.BM25, None for an empty collection
    ids: list[str]
    documents: list[str]
    metadatas: list[dict]
    masks: dict = field(default_factory=dict)     # kind -> 0/1 weights, built on first use

    def mask(self, kind: str):
        import numpy as np

        if kind not in self.masks:
            self.masks[kind] = np.array([m.get("kind") == kind for m in self.metadatas], dtype=np.float32)
        return self.masks[kind]

    def top(self, query: str, n: int, kind: str | None = None) -> list[tuple[int, float]]:
        """``(record index, score)`` of the best ``n`` records with a positive score."""
        import numpy as np

        if self.retriever is None or not self.ids:
            return []
        token_ids = self.retriever.get_tokens_ids(tokenize(query))
        if not token_ids:
            return []
        scores = self.retriever.get_scores(token_ids)
        if kind is not None:
            scores = scores * self.mask(kind)
        n = min(n, len(scores))
        best = np.argpartition(-scores, n - 1)[:n]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(i), float(scores[i])) for i in best if scores[i] > 0]


def build(ids: list[str], documents: list[str], metadatas: list[dict]) -> Bm25Index:
    import bm25s

    if not ids:
        return Bm25Index(None, [], [], [])
    retriever = bm25s.BM25()
    corpus = [tokenize(index_text(doc or "", meta)) or [""] for doc, meta in zip(documents, metadatas)]
    retriever.index(corpus, show_progress=False)
    return Bm25Index(retriever, ids, documents, metadatas)


def _clean(meta: dict) -> dict:
    return {k: v for k, v in (meta or {}).items() if k not in INTERNAL_KEYS}


def load_or_build(store, fingerprint: str) -> Bm25Index:
    """The index for ``fingerprint``: from ``cache_dir/bm25/<store>/<fingerprint>`` or built and saved there."""
    import bm25s

    base = Path(store.settings.cache_dir) / "bm25" / store.store_key
    folder = base / fingerprint
    records_path = folder / "records.json"
    if records_path.is_file():
        try:
            records = json.loads(records_path.read_text())
            retriever = bm25s.BM25.load(str(folder / "index"), show_progress=False) if records["ids"] else None
            return Bm25Index(retriever, records["ids"], records["documents"], records["metadatas"])
        except (OSError, ValueError, KeyError):
            shutil.rmtree(folder, ignore_errors=True)     # a damaged cache is rebuilt
    got = store.records()
    index = build(got["ids"], got["documents"], [_clean(m) for m in got["metadatas"]])
    if base.is_dir():
        for old in base.iterdir():
            shutil.rmtree(old, ignore_errors=True)
    tmp = base / f".{fingerprint}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if index.retriever is not None:
        index.retriever.save(str(tmp / "index"), show_progress=False)
    (tmp / "records.json").write_text(json.dumps(
        {"ids": index.ids, "documents": index.documents, "metadatas": index.metadatas}))
    try:
        tmp.rename(folder)
    except OSError:       # another process saved the same revision first
        shutil.rmtree(tmp, ignore_errors=True)
    return index
