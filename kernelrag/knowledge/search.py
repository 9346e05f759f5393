"""Search: dense (Chroma, query embedded here) + BM25 (bm25s), fused by reciprocal rank fusion.

No torch and no llama-index on this path (see ``dense_hits`` and ``embed.query_encoder``).

    from kernelrag.knowledge.store import search
    hits = search("how do I avoid shared memory bank conflicts", settings, k=5)
    hits[0].citation()   # 'corpus/bank-conflicts.md §Swizzling L12-40'

``search`` keeps one warm ``KnowledgeStore`` per store location, so the model,
the client and the BM25 index load once per process.
"""
from __future__ import annotations


from kernelrag.errors import ConfigError
from kernelrag.knowledge.models import KINDS, MODES, SearchHit

RRF_K = 60            # reciprocal rank fusion constant (Cormack et al. 2009)
MIN_CANDIDATES = 30   # each retriever's list length before fusion



def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and value >= 0 else None


def hit_from(chunk_id: str, text: str, meta: dict, score: float) -> SearchHit:
    return SearchHit(
        text=text or "", score=float(score), source=str(meta.get("source", "")),
        section=str(meta.get("section", "")), start_line=_int(meta.get("start_line")),
        end_line=_int(meta.get("end_line")), page=_int(meta.get("start_page")),
        end_page=_int(meta.get("end_page")), kind=str(meta.get("kind", "")),
        title=str(meta.get("title", "")), chunk_id=chunk_id,
    )


def dense_hits(store, query: str, n: int, kind: str | None) -> list[SearchHit]:
    """Nearest chunks by cosine similarity: one ``collection.query`` with the query's embedding.

    The records are those llama-index's ChromaVectorStore wrote (``ingest``); reading them
    back needs no llama-index, so a search does not pay its import."""
    from kernelrag.knowledge.embed import embed_query

    vector = embed_query(query, store.settings.embed_model)
    got = store.collection.query(query_embeddings=[vector], n_results=n, where={"kind": kind} if kind else None,
                                 include=["documents", "metadatas", "distances"])
    ids, docs = (got.get("ids") or [[]])[0], (got.get("documents") or [[]])[0]
    metas, distances = (got.get("metadatas") or [[]])[0], (got.get("distances") or [[]])[0]
    return [hit_from(cid, doc, meta or {}, 1.0 - float(dist))        # cosine distance -> similarity
            for cid, doc, meta, dist in zip(ids, docs, metas, distances)]


def bm25_hits(store, query: str, n: int, kind: str | None) -> list[SearchHit]:
    index = store.bm25()
    return [hit_from(index.ids[i], index.documents[i], index.metadatas[i], score)
            for i, score in index.top(query, n, kind)]


def fuse(rankings: list[list[SearchHit]], k: int) -> list[SearchHit]:
    """Reciprocal rank fusion: score = sum over lists of 1 / (RRF_K + rank)."""
    scores: dict[str, float] = {}
    first: dict[str, SearchHit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, 1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(hit.chunk_id, hit)
    best = sorted(scores, key=lambda cid: -scores[cid])[:k]
    return [_rescore(first[cid], scores[cid]) for cid in best]


def _rescore(hit: SearchHit, score: float) -> SearchHit:
    from dataclasses import replace

    return replace(hit, score=round(score, 6))


def run_search(store, query: str, k: int = 5, kind: str | None = None, mode: str = "hybrid") -> list[SearchHit]:
    """The top ``k`` hits of ``store`` for ``query``; see ``search``."""
    if mode not in MODES:
        raise ConfigError(f"search mode {mode!r} is not one of {', '.join(MODES)}")
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if k < 1:
        raise ConfigError(f"k={k} must be at least 1")
    if not query.strip() or store.count() == 0:
        return []
    n = max(4 * k, MIN_CANDIDATES)
    if mode == "dense":
        return dense_hits(store, query, k, kind)
    if mode == "bm25":
        return bm25_hits(store, query, k, kind)
    return fuse([dense_hits(store, query, n, kind), bm25_hits(store, query, n, kind)], k)
