"""The knowledge store end to end: ingest, re-ingest, prune, search; embedded and server Chroma."""
from __future__ import annotations

import gzip
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelrag.config import load_settings
from kernelrag.errors import StoreError
from kernelrag.knowledge.store import KnowledgeStore
from test_knowledge_formats import make_pdf

DOCS = Path(__file__).parent / "fixtures" / "knowledge" / "docs"
CHROMA_CLI = Path(sys.executable).parent / "chroma"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory):
    """A real ``chroma run`` server on a free loopback port, for the whole session."""
    if not CHROMA_CLI.exists():
        pytest.skip(f"the chroma CLI is not installed next to {sys.executable}; server mode untested")
    port = _free_port()
    path = tmp_path_factory.mktemp("chroma-server")
    log = open(path / "server.log", "wb")
    proc = subprocess.Popen([str(CHROMA_CLI), "run", "--path", str(path / "data"), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"chroma server did not start: {(path / 'server.log').read_text()[-2000:]}")
            time.sleep(0.25)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


_VECTORS: dict[tuple, list[float]] = {}


@pytest.fixture(autouse=True)
def reuse_embeddings(monkeypatch):
    """The real model, but each distinct text is embedded once per test session (keeps the file fast)."""
    import kernelrag.knowledge.embed as embed_module

    real = embed_module.embed

    def embed(texts, embed_model=None, batch_size=64):
        missing = list(dict.fromkeys(t for t in texts if (t, embed_model) not in _VECTORS))
        for text, vector in zip(missing, real(missing, embed_model, batch_size)):
            _VECTORS[(text, embed_model)] = vector
        return [_VECTORS[(t, embed_model)] for t in texts]

    monkeypatch.setattr(embed_module, "embed", embed)


@pytest.fixture(params=["embedded", "server"])
def settings(request, tmp_path):
    home = tmp_path / "home"
    if request.param == "server":
        url = request.getfixturevalue("chroma_server")
        return load_settings(home=home, chroma_url=url, collection=f"t-{uuid.uuid4().hex[:12]}")
    return load_settings(home=home, chroma_url="")


@pytest.fixture
def docs(tmp_path) -> Path:
    """A writable copy of the fixture tree, plus a gzip-compressed note and a PDF."""
    root = tmp_path / "docs"
    shutil.copytree(DOCS, root)
    (root / "packed").mkdir()
    (root / "packed" / "vector-loads.md.gz").write_bytes(gzip.compress(
        b"# Vector loads\n\nA float4 load moves 16 bytes per thread and quarters the instruction count.\n"))
    (root / "shuffle.pdf").write_bytes(make_pdf([["Warp shuffles exchange registers between lanes."],
                                                 ["The butterfly pattern uses shfl xor."]]))
    return root


def test_ingest_reads_every_format_and_counts_skips(settings, docs):
    store = KnowledgeStore(settings)
    report = store.ingest([docs], progress=False)
    assert report.errors == []
    assert report.files_ingested == 12
    assert report.skipped == {"image": 1, "stylesheet": 1, "search index or build data": 2,
                              "JSONL that is not an optimization log": 1}
    assert report.files_skipped == 5 and report.files_seen == 17
    assert report.chunks_added == report.chunks_total == store.count() > 0
    kinds = {s.source.rsplit("/", 1)[-1]: s.kind for s in store.sources()}
    assert kinds["bank-conflicts.md"] == "guide" and kinds["index.html"] == "guide"
    assert kinds["reduce.cu"] == "note" and kinds["opt-log.jsonl"] == "log"
    assert kinds["skill.toml"] == kinds["kernel.py"] == kinds["reference.py"] == "skill"
    assert kinds["vector-loads.md.gz"] == "guide" and kinds["shuffle.pdf"] == "guide"


def test_reingest_unchanged_embeds_nothing(settings, docs, monkeypatch):
    store = KnowledgeStore(settings)
    first = store.ingest([docs], progress=False)

    def no_embedding(*args, **kwargs):
        raise AssertionError("an unchanged file was embedded again")

    monkeypatch.setattr("kernelrag.knowledge.embed.embed", no_embedding)
    again = store.ingest([docs], progress=False)
    assert (again.files_ingested, again.chunks_added, again.chunks_replaced) == (0, 0, 0)
    assert again.files_unchanged == first.files_ingested
    for manifest in (Path(settings.home) / "manifests").glob("*.json"):
        manifest.unlink()                              # the store itself is the truth
    third = KnowledgeStore(settings).ingest([docs], progress=False)
    assert third.chunks_added == 0 and third.chunks_skipped == first.chunks_added
    assert store.count() == first.chunks_total


def test_changed_file_replaces_only_changed_chunks(settings, docs):
    store = KnowledgeStore(settings)
    before = store.ingest([docs], progress=False).chunks_total
    note = docs / "bank-conflicts.md"
    note.write_text(note.read_text().replace("XOR the column index", "Exclusive-or the column index"))
    report = store.ingest([docs], progress=False)
    assert (report.files_ingested, report.chunks_added, report.chunks_replaced, report.chunks_skipped) == (1, 1, 1, 2)
    assert store.count() == before
    texts = [h.text for h in store.search("column index swizzle", k=20, mode="bm25")]
    assert any("Exclusive-or the column index" in t for t in texts)
    assert not any("XOR the column index" in t for t in texts)


def test_prune_removes_chunks_of_deleted_files(settings, docs):
    store = KnowledgeStore(settings)
    store.ingest([docs], progress=False)
    gone = next(s for s in store.sources() if s.source.endswith("coalescing.rst"))
    (docs / "coalescing.rst").unlink()
    kept = store.ingest([docs], progress=False)
    assert kept.files_removed == 0 and any(s.source == gone.source for s in store.sources())
    report = store.ingest([docs], prune=True, progress=False)
    assert report.files_removed == 1 and report.chunks_removed == gone.chunks
    assert all(s.source != gone.source for s in store.sources())


def test_hits_carry_citation_fields(settings, docs):
    store = KnowledgeStore(settings)
    store.ingest([docs], progress=False)
    hits = store.search("XOR the column index with the row index", k=3)
    top = hits[0]
    assert top.source.endswith("bank-conflicts.md")
    assert (top.section, top.start_line, top.end_line) == ("Bank conflicts > Swizzling", 24, 27)
    assert (top.kind, top.title) == ("guide", "Shared-memory bank conflicts")
    assert top.citation() == f"{top.source} §Swizzling L24-27"
    assert len(top.chunk_id) == 32 and top.page is None
    pdf = store.search("butterfly pattern shfl xor", k=1, mode="bm25")[0]
    assert pdf.source.endswith("shuffle.pdf") and (pdf.page, pdf.end_page, pdf.start_line) == (1, 2, None)
    assert pdf.citation().endswith("shuffle.pdf p1-2")
    logs = store.search("softmax rows truncated mask the tail", k=5, kind="log")
    assert logs and all(h.kind == "log" for h in logs)
    assert any("Round 1" in h.section for h in logs)


def test_hybrid_covers_what_one_retriever_misses(settings, docs):
    store = KnowledgeStore(settings)
    store.ingest([docs], progress=False)
    # no word of this paraphrase occurs in the fixture notes: BM25 has nothing, embeddings do
    paraphrase = "on-chip scratchpad slot collisions"
    assert store.search(paraphrase, k=5, mode="bm25") == []
    assert store.search(paraphrase, k=1, mode="dense")[0].source.endswith("bank-conflicts.md")
    assert store.search(paraphrase, k=1, mode="hybrid")[0].source.endswith("bank-conflicts.md")
    # an exact identifier: dense retrieval misses the only file that uses it, BM25 and hybrid find it
    def sources(mode):
        return [h.source.rsplit("/", 1)[-1] for h in store.search("__shfl_down_sync", k=5, mode=mode)]

    assert "reduce.cu" not in sources("dense")
    assert sources("bm25")[0] == "reduce.cu"
    assert "reduce.cu" in sources("hybrid")


def test_bm25_index_follows_collection_changes(settings, docs, tmp_path):
    store = KnowledgeStore(settings)
    store.ingest([docs], progress=False)
    assert store.search("zebrafish", k=3, mode="bm25") == []
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "fish.md").write_text("# Fish\n\nThe zebrafish benchmark kernel.\n")
    store.ingest([extra], progress=False)
    assert store.search("zebrafish", k=3, mode="bm25")[0].source.endswith("fish.md")
    cached = list((Path(settings.cache_dir) / "bm25" / store.store_key).iterdir())
    assert len(cached) == 1                       # old revisions are dropped


class _FailingDelete:
    """The collection, except that its first ``delete`` fails (a write that breaks half-way)."""

    def __init__(self, real) -> None:
        self.real, self.calls = real, 0

    def __getattr__(self, name):
        return getattr(self.real, name)

    def delete(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("disk full")
        return self.real.delete(*args, **kwargs)


def test_failed_write_is_rolled_back(settings, docs, monkeypatch):
    store = KnowledgeStore(settings)
    before = store.ingest([docs], progress=False).chunks_total
    note = docs / "bank-conflicts.md"
    note.write_text(note.read_text().replace("Add one column", "Add a single column"))
    failing = _FailingDelete(store.collection)
    monkeypatch.setattr(KnowledgeStore, "vector_store", property(lambda self: SimpleNamespace(client=failing)))
    report = store.ingest([docs], progress=False)
    monkeypatch.undo()
    assert failing.calls == 2                       # the stale delete failed, the rollback ran
    assert report.files_failed == 1 and "rolled back" in report.errors[0].reason
    assert report.errors[0].path.endswith("bank-conflicts.md")
    assert store.count() == before
    texts = [h.text for h in store.search("column odd stride", k=20, mode="bm25")]
    assert any("Add one column" in t for t in texts) and not any("Add a single column" in t for t in texts)
    retry = store.ingest([docs], progress=False)      # not recorded as done: the next run finishes it
    assert retry.files_ingested == 1 and retry.chunks_replaced == 1


def test_unreachable_server_is_a_clear_error(tmp_path):
    settings = load_settings(home=tmp_path / "home", chroma_url=f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(StoreError, match="cannot reach the Chroma server"):
        KnowledgeStore(settings).count()


def test_cli_ingest_fails_bad_files_alone(tmp_path, monkeypatch, capsys):
    from kernelrag.cli import main

    root = tmp_path / "mixed"
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nCoalesced loads are fast.\n")
    (root / "blob.txt").write_bytes(b"\x00\x01binary\x00" * 20)
    (root / "latin.md").write_bytes("# Café\n\ncrème".encode("latin-1"))
    (root / "empty.md").write_bytes(b"")
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\nnot a pdf at all\n")
    (root / "huge.md").write_text("# Huge\n\n" + "x" * 3000)
    monkeypatch.setenv("KERNELRAG_MAX_FILE_BYTES", "2000")
    assert main(["ingest", str(root), "--json", "--no-progress"]) == 1
    report = json.loads(capsys.readouterr().out)
    reasons = {Path(e["path"]).name: e["reason"] for e in report["errors"]}
    assert set(reasons) == {"blob.txt", "latin.md", "empty.md", "broken.pdf", "huge.md"}
    assert "binary" in reasons["blob.txt"] and "not UTF-8" in reasons["latin.md"]
    assert "empty" in reasons["empty.md"] and "corrupt PDF" in reasons["broken.pdf"]
    assert "too large" in reasons["huge.md"]
    assert report["files_ingested"] == 1 and report["ok"] is False
    assert main(["search", "coalesced loads", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["source"].endswith("good.md") and hits[0]["citation"].endswith("§Good L1-3")


def test_cli_kind_overrides_the_heuristic(tmp_path, capsys):
    from kernelrag.cli import main

    assert main(["ingest", str(DOCS / "reduce.cu"), "--kind", "isa", "--no-progress"]) == 0
    assert "1 ingested" in capsys.readouterr().out
    assert main(["search", "warp sum with shuffles", "--kind", "isa", "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "reduce.cu §warp_sum, block_sum L1-15" in out and "(isa," in out


def test_search_function_keeps_one_warm_store(tmp_path):
    from kernelrag.knowledge.store import search, store_for

    settings = load_settings(home=tmp_path / "home", chroma_url="")
    store_for(settings).ingest([DOCS / "occupancy.txt"], progress=False)
    hits = search("resident warps", settings, k=2, mode="hybrid")
    assert hits and hits[0].source.endswith("occupancy.txt") and hits[0].kind == "note"
    assert store_for(settings) is store_for(settings)
    with pytest.raises(Exception, match="mode 'fuzzy' is not one of"):
        search("x", settings, mode="fuzzy")
