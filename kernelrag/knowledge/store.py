"""KnowledgeStore: one persistent Chroma collection, written and queried through llama-index.

Two modes: embedded ``chromadb.PersistentClient`` at ``settings.chroma_dir``
(default) or a Chroma server when ``settings.chroma_url`` is set. Embeddings are
always computed here and passed to Chroma (never ``query_texts``, which would
make Chroma fetch its own ONNX model). Telemetry is off.

The collection's metadata carries a revision token that every write changes;
the BM25 index (``bm25``) is cached in memory and on disk under that token.
Hold one instance per process: the embedding model, the client and the BM25
index stay warm in it.
"""
from __future__ import annotations

import hashlib
import os
import threading
import uuid
from pathlib import Path
from urllib.parse import urlparse

from kernelrag.config import Settings
from kernelrag.errors import StoreError
from kernelrag.knowledge.bm25 import load_or_build
from kernelrag.knowledge.ingest import ingest_paths
from kernelrag.knowledge.models import IngestReport, SearchHit, SourceInfo
from kernelrag.knowledge.search import run_search

_REVISION_KEY = "kernelrag_revision"
_EMBED_KEY = "kernelrag_embed"
# the llama-index bookkeeping keys that ChromaVectorStore adds to each record's metadata


def _embed_id(settings: Settings) -> str:
    return str(Path(settings.embed_model).expanduser().resolve()) if settings.embed_model else "all-MiniLM-L6-v2"


class KnowledgeStore:
    """The knowledge store of one settings object (one collection)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._chroma = None          # the chromadb client
        self._collection = None
        self._vector_store = None
        self._bm25 = None            # (fingerprint, Bm25Index)
        self._lock = threading.RLock()

    # --- identity ---------------------------------------------------------------
    @property
    def location(self) -> str:
        return self.settings.chroma_url or str(self.settings.chroma_dir)

    @property
    def store_key(self) -> str:
        digest = hashlib.sha1(f"{self.location}|{self.settings.collection}".encode()).hexdigest()[:12]
        return f"{self.settings.collection}-{digest}"

    @property
    def embed_id(self) -> str:
        return _embed_id(self.settings)

    # --- opening ----------------------------------------------------------------
    def _client(self):
        os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        chroma_settings = ChromaSettings(anonymized_telemetry=False)
        url = self.settings.chroma_url
        if url:
            parsed = urlparse(url if "://" in url else f"http://{url}")
            if not parsed.hostname:
                raise StoreError(f"chroma_url={url!r} has no host; use http://HOST:PORT")
            port = parsed.port or (443 if parsed.scheme == "https" else 8000)
            try:
                client = chromadb.HttpClient(host=parsed.hostname, port=port, ssl=parsed.scheme == "https",
                                             settings=chroma_settings)
                client.heartbeat()
            except Exception as exc:   # chromadb raises transport errors of several types
                raise StoreError(f"cannot reach the Chroma server at {url} ({type(exc).__name__}: {exc}); "
                                 "start it with `chroma run --path DIR --port PORT` or unset "
                                 "KERNELRAG_CHROMA_URL to use the embedded store") from None
            return client
        path = self.settings.chroma_dir
        try:
            path.mkdir(parents=True, exist_ok=True)
            return chromadb.PersistentClient(path=str(path), settings=chroma_settings)
        except Exception as exc:
            raise StoreError(f"cannot open the Chroma store at {path} ({type(exc).__name__}: {exc}); "
                             "check the directory is writable, or move KERNELRAG_HOME") from None

    @property
    def collection(self):
        with self._lock:
            if self._collection is None:
                client = self._chroma = self._client()
                try:
                    col = client.get_or_create_collection(
                        self.settings.collection, embedding_function=None,
                        configuration={"hnsw": {"space": "cosine"}},
                        metadata={_REVISION_KEY: uuid.uuid4().hex, _EMBED_KEY: self.embed_id})
                except Exception as exc:
                    raise StoreError(f"cannot open collection {self.settings.collection!r} at {self.location} "
                                     f"({type(exc).__name__}: {exc}); names are 3-512 characters of "
                                     "[a-zA-Z0-9._-]; set KERNELRAG_COLLECTION") from None
                stored = (col.metadata or {}).get(_EMBED_KEY)
                if stored and stored != self.embed_id:
                    raise StoreError(f"collection {self.settings.collection!r} was embedded with {stored!r}, "
                                     f"not {self.embed_id!r}; use another KERNELRAG_COLLECTION or the same "
                                     "KERNELRAG_EMBED_MODEL")
                self._collection = col
            return self._collection

    @property
    def vector_store(self):
        """The llama-index ``ChromaVectorStore`` over the collection."""
        with self._lock:
            if self._vector_store is None:
                from llama_index.vector_stores.chroma import ChromaVectorStore

                self._vector_store = ChromaVectorStore(chroma_collection=self.collection)
            return self._vector_store

    # --- state ------------------------------------------------------------------
    def count(self) -> int:
        """Chunks in the collection."""
        return int(self.collection.count())

    def fingerprint(self) -> str:
        """Changes whenever the collection changes (revision token + count)."""
        col = self.collection
        try:
            meta = self._chroma.get_collection(col.name, embedding_function=None).metadata or {}
        except Exception as exc:
            raise StoreError(f"cannot read collection {col.name!r} at {self.location} "
                             f"({type(exc).__name__}: {exc}); check the Chroma server is up, or re-run "
                             "kernelrag ingest if the collection was deleted") from None
        return f"{meta.get(_REVISION_KEY, '')}-{col.count()}"

    def bump_revision(self) -> None:
        """Record that the collection changed (invalidates cached BM25 indexes everywhere)."""
        self.collection.modify(metadata={_REVISION_KEY: uuid.uuid4().hex, _EMBED_KEY: self.embed_id})

    def records(self, where: dict | None = None, include: tuple[str, ...] = ("documents", "metadatas"),
                ids: list[str] | None = None) -> dict:
        """``collection.get`` in pages (large collections exceed one request)."""
        out: dict = {"ids": [], **{key: [] for key in include}}
        if ids is not None:
            for start in range(0, len(ids), 2000):
                got = self.collection.get(ids=ids[start:start + 2000], where=where, include=list(include))
                for key in out:
                    out[key].extend(got[key] if got.get(key) is not None else [])
            return out
        offset = 0
        while True:
            got = self.collection.get(where=where, include=list(include), limit=5000, offset=offset)
            for key in out:
                out[key].extend(got[key] if got.get(key) is not None else [])
            if len(got["ids"]) < 5000:
                return out
            offset += 5000

    def sources(self) -> list[SourceInfo]:
        """Every ingested file: source path, kind, title, chunk count."""
        counts: dict[str, list] = {}
        for meta in self.records(include=("metadatas",))["metadatas"]:
            entry = counts.setdefault(meta.get("source", ""), [meta.get("kind", ""), meta.get("title", ""), 0])
            entry[2] += 1
        return [SourceInfo(src, kind, title, n) for src, (kind, title, n) in sorted(counts.items())]

    def delete_source(self, source: str) -> int:
        """Delete every chunk of one source; returns how many were deleted."""
        ids = self.records(where={"source": source}, include=())["ids"]
        if ids:
            self.vector_store.delete(ref_doc_id=source)
        return len(ids)

    # --- work -------------------------------------------------------------------
    def ingest(self, paths, prune: bool = False, progress: bool = True, kind: str | None = None) -> IngestReport:
        """Ingest files and folders (see ``kernelrag.knowledge.ingest``)."""
        with self._lock:
            return ingest_paths(self, [Path(p) for p in paths], prune=prune, progress=progress, kind=kind)

    def bm25(self):
        """The BM25 index of the current collection, rebuilt or reloaded when it changed."""
        with self._lock:
            fp = self.fingerprint()
            if self._bm25 is None or self._bm25[0] != fp:
                self._bm25 = (fp, load_or_build(self, fp))
            return self._bm25[1]

    def search(self, query: str, k: int | None = None, kind: str | None = None,
               mode: str = "hybrid") -> list[SearchHit]:
        """Top ``k`` chunks for ``query``: hybrid (dense + BM25, RRF), dense or bm25."""
        return run_search(self, query, k=k or self.settings.search_k, kind=kind, mode=mode)


_STORES: dict[tuple, "KnowledgeStore"] = {}
_STORES_LOCK = threading.Lock()


def store_for(settings: Settings) -> "KnowledgeStore":
    """The process's warm KnowledgeStore for these settings' store."""
    key = (settings.chroma_url, str(settings.chroma_dir), settings.collection, settings.embed_model,
           str(settings.cache_dir))
    with _STORES_LOCK:
        if key not in _STORES:
            _STORES[key] = KnowledgeStore(settings)
        return _STORES[key]


def search(query: str, settings: Settings, k: int = 5, kind: str | None = None,
           mode: str = "hybrid") -> list[SearchHit]:
    """Top ``k`` chunks for ``query`` with citation fields; ``mode`` is hybrid, dense or bm25."""
    return store_for(settings).search(query, k=k, kind=kind, mode=mode)
