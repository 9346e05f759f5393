"""Ingest files into the store: read, chunk, embed what is new, write each file all-or-nothing.

Chunk ids are content hashes (source path + heading path + text), so re-ingesting
an unchanged tree embeds nothing, and a changed file re-embeds only chunks whose
text changed. Per file: embeddings are computed first, then one upsert writes
every chunk of the file (through the llama-index node format that
``ChromaVectorStore`` reads back), and only then are the file's stale chunks
deleted; a failed write is rolled back. ``ChromaVectorStore.add`` is not used for
the write because it calls ``collection.add``, which cannot replace a record.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import sys
import time
from pathlib import Path

from kernelrag.errors import ConfigError, StoreError
from kernelrag.knowledge.chunking import chunk_document
from kernelrag.knowledge.formats import (IGNORED_DIRS, IngestFailure, SkipFile, classify, decode, extract,
                                         kind_from_path)
from kernelrag.knowledge.manifest import Manifest
from kernelrag.knowledge.models import KINDS, Chunk, IngestReport

PIPELINE_VERSION = "1"      # bump when extraction or chunking changes: every file is re-read


def source_key(path: Path) -> str:
    """Repository-relative path (``corpus/bank-conflicts.md``) when inside a git checkout, else absolute."""
    try:
        path = path.resolve()
    except (OSError, RuntimeError):          # a symlink loop: keep the path as given
        path = Path(os.path.abspath(path))
    for parent in path.parents:
        if (parent / ".git").exists():
            return path.relative_to(parent).as_posix()
    return path.as_posix()


_NOT_REGULAR = {stat.S_IFIFO: "a named pipe", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket"}


def entry_problem(path: Path) -> str | None:
    """Why ``path`` cannot be ingested as a file (never opening it), or None for a regular file.

    ``lstat`` first and ``stat`` second, so a symlink loop, a dangling link, a named pipe
    or a device is named without being opened: opening a FIFO blocks until a writer comes."""
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop; fix or remove the link"
        if exc.errno == errno.ENOENT and os.path.islink(path):
            return f"broken symlink (points to {os.readlink(path)!r}); fix or remove the link"
        return f"cannot read ({exc.strerror or exc}); check permissions"
    if stat.S_ISREG(info.st_mode):
        return None
    kind = _NOT_REGULAR.get(stat.S_IFMT(info.st_mode), "not a regular file")
    return f"{kind}, not a regular file; not opened"


def _shown(path: Path) -> str:
    """How an entry that cannot be read is named: its folder resolved, its own name as listed."""
    return f"{source_key(path.parent)}/{path.name}"


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def collect(paths: list[Path]) -> tuple[list[tuple[Path, bool]], list[str], list[tuple[str, str]]]:
    """Files under ``paths`` (sorted, hidden and cache folders left out), paths that do not
    exist, and entries that cannot be ingested ``(path, reason)``: unreadable folders,
    symlink loops, named pipes, devices. Symlinked folders are not descended into."""
    files: dict[Path, bool] = {}
    missing: list[str] = []
    bad: list[tuple[str, str]] = []

    def unreadable(exc: OSError) -> None:
        bad.append((source_key(Path(exc.filename or "?")),
                    f"cannot read folder ({exc.strerror or exc}); check permissions"))

    for given in paths:
        given = given.expanduser()
        if os.path.isdir(given):
            for root, dirs, names in os.walk(given, onerror=unreadable):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in IGNORED_DIRS)
                for name in sorted(names):
                    if name.startswith("."):
                        continue
                    path = Path(root) / name
                    problem = entry_problem(path)
                    if problem is None:
                        files.setdefault(_resolved(path), False)
                    else:
                        bad.append((_shown(path), problem))
        elif os.path.lexists(given):
            problem = entry_problem(given)
            if problem is None:
                files.setdefault(_resolved(given), True)
            else:
                bad.append((_shown(given), problem))
        else:
            missing.append(str(given))
    return sorted(files.items()), missing, bad


def read_regular(path: Path) -> bytes:
    """The bytes of ``path``, opened without blocking and checked to be a regular file
    (a file swapped for a FIFO after it was listed is refused, not waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IngestFailure(entry_problem(path) or "not a regular file; not read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def chunk_id(source: str, chunk: Chunk) -> str:
    return hashlib.sha256(f"{source}\0{chunk.section}\0{chunk.text}".encode()).hexdigest()[:32]


def embed_text(title: str, chunk: Chunk) -> str:
    """What the embedding model sees: context first (the model reads ~256 tokens)."""
    head = f"{title} > {chunk.section}" if chunk.section and chunk.section != title else title
    return f"{head}\n{chunk.text}"


def _metadata(key: str, abs_path: Path, chunk: Chunk, index: int, total: int, doc, kind: str,
              title: str, file_hash: str) -> dict:
    return {
        "source": key, "abs_path": str(abs_path), "section": chunk.section, "kind": kind, "title": title,
        "start_line": chunk.start_line or -1, "end_line": chunk.end_line or -1,
        "start_page": chunk.start_page or -1, "end_page": chunk.end_page or -1,
        "content_hash": hashlib.sha256(chunk.text.encode()).hexdigest()[:16], "file_hash": file_hash[:16],
        "format": doc.fmt, "chunk_index": index, "chunks_in_file": total, "tags": ",".join(doc.tags),
    }


def _write(store, ids, texts, metadatas, embeddings, key: str, new_ids: set[str], stale: list[str]) -> None:
    """One file's records in as few upserts as the server allows, then stale ones out; rolled back on failure."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.vector_stores.utils import node_to_metadata_dict

    collection = store.vector_store.client
    records = []
    for cid, text, meta in zip(ids, texts, metadatas):
        node = TextNode(id_=cid, text=text, metadata=meta,
                        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=key)})
        flat = node_to_metadata_dict(node, remove_text=True, flat_metadata=True)
        records.append({k: ("" if v is None else v) for k, v in flat.items()})
    batch = 5000
    try:
        for start in range(0, len(ids), batch):
            collection.upsert(ids=ids[start:start + batch], embeddings=embeddings[start:start + batch],
                              documents=texts[start:start + batch], metadatas=records[start:start + batch])
        if stale:
            collection.delete(ids=stale)
    except Exception as exc:      # chromadb raises transport and validation errors of many types
        try:
            if new_ids:
                collection.delete(ids=sorted(new_ids))
        except Exception:
            pass
        raise IngestFailure(f"store write failed and was rolled back ({type(exc).__name__}: {exc})") from None


def _ingest_file(store, manifest: Manifest, report: IngestReport, path: Path, explicit: bool,
                 kind: str | None, chunk_bar) -> bool:
    """Ingest one file; returns True when the collection changed."""
    settings = store.settings
    action, fmt = classify(path)
    if action == "skip":
        report.skip(fmt)
        return False
    if action == "unknown":
        if not explicit:
            report.skip(f"unsupported type {fmt}")
            return False
        fmt = "txt"
    key = source_key(path)
    size = path.stat().st_size
    if size > settings.max_file_bytes:
        raise IngestFailure(f"too large ({size} bytes > max_file_bytes {settings.max_file_bytes}); "
                            "split it or raise KERNELRAG_MAX_FILE_BYTES")
    data = read_regular(path)
    salt = f"{PIPELINE_VERSION}|{settings.chunk_chars}|{kind}|{store.embed_id}|".encode()
    file_hash = hashlib.sha256(salt + data).hexdigest()
    if manifest.unchanged(key, file_hash, str(path)):
        report.files_unchanged += 1
        return False
    doc = extract(path, decode(path, data, settings.max_file_bytes), fmt)
    chunks = chunk_document(doc, settings.chunk_chars)
    if not chunks:
        raise IngestFailure("no text to index once parsed")
    doc_kind = kind or doc.kind or kind_from_path(path, doc.fmt)
    title = doc.title or path.name
    ids: list[str] = []
    for chunk in chunks:                      # identical chunks in one section get distinct ids
        cid, n = chunk_id(key, chunk), 2
        while cid in ids:
            cid, n = f"{chunk_id(key, chunk)}-{n}", n + 1
        ids.append(cid)
    existing = set(store.records(where={"source": key}, include=())["ids"])
    fresh = [i for i, cid in enumerate(ids) if cid not in existing]
    kept = [cid for cid in ids if cid in existing]
    vectors: dict[str, list[float]] = {}
    if kept:
        got = store.records(ids=kept, include=("embeddings",))
        vectors.update({cid: list(map(float, vec)) for cid, vec in zip(got["ids"], got["embeddings"])})
    from kernelrag.knowledge.embed import embed

    step = max(settings.embed_batch_size, 1)
    for start in range(0, len(fresh), step):
        part = fresh[start:start + step]
        for i, vec in zip(part, embed([embed_text(title, chunks[i]) for i in part],
                                      settings.embed_model, settings.embed_batch_size)):
            vectors[ids[i]] = vec
        chunk_bar.update(len(part))
    metadatas = [_metadata(key, path, c, i, len(chunks), doc, doc_kind, title, file_hash)
                 for i, c in enumerate(chunks)]
    stale = sorted(existing - set(ids))
    _write(store, ids, [c.text for c in chunks], metadatas, [vectors[cid] for cid in ids], key,
           {ids[i] for i in fresh}, stale)
    manifest.record(key, file_hash=file_hash, abs_path=str(path), kind=doc_kind, chunk_ids=ids)
    report.files_ingested += 1
    report.chunks_added += len(fresh)
    report.chunks_skipped += len(kept)
    report.chunks_replaced += len(stale)
    return True


def _prune(store, manifest: Manifest, report: IngestReport, paths: list[Path]) -> bool:
    """Delete the chunks of files under ``paths`` that no longer exist."""
    roots = [p.expanduser().resolve() for p in paths]
    known = {src: entry.get("abs_path", "") for src, entry in manifest.files.items()}
    for meta in store.records(include=("metadatas",))["metadatas"]:
        known.setdefault(meta.get("source", ""), meta.get("abs_path", ""))
    changed = False
    for source, abs_path in sorted(known.items()):
        target = Path(abs_path) if abs_path else None
        if target is None or target.exists() or not any(target == r or target.is_relative_to(r) for r in roots):
            continue
        report.chunks_removed += store.delete_source(source)
        report.files_removed += 1
        manifest.forget(source)
        changed = True
    return changed


def _lock(home: Path, store_key: str, timeout_s: float):
    """The store's ingest lock; busy for ``timeout_s`` -> StoreError naming the lock file."""
    from filelock import FileLock

    locks = home / "locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {locks} ({exc.strerror or exc}); KERNELRAG_HOME ({home}) must be "
                         "a writable folder: fix its permissions or point KERNELRAG_HOME elsewhere") from None
    return FileLock(str(locks / f"{store_key}.lock"), timeout=timeout_s)


def ingest_paths(store, paths: list[Path], prune: bool = False, progress: bool = True,
                 kind: str | None = None) -> IngestReport:
    """Ingest ``paths`` (files or folders) into ``store``; see the module docstring.

    A path that does not exist is a failed entry; with ``prune`` it stops the prune
    (nothing is deleted: a typo must not drop the chunks of a whole tree)."""
    from filelock import Timeout
    from tqdm import tqdm

    if kind is not None and kind not in KINDS:
        raise ConfigError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    started = time.perf_counter()
    report = IngestReport()
    home = Path(store.settings.home)
    timeout_s = store.settings.lock_timeout_s
    lock = _lock(home, store.store_key, timeout_s)
    try:
        lock.acquire()
    except Timeout:
        raise StoreError(f"the knowledge store is busy: another ingest holds {lock.lock_file} (waited "
                         f"{timeout_s:g} s); wait for it to finish, raise KERNELRAG_LOCK_TIMEOUT_S, or delete "
                         "the lock file if no kernelrag process is running") from None
    except OSError as exc:
        raise StoreError(f"cannot take the lock {lock.lock_file} ({exc.strerror or exc}); KERNELRAG_HOME "
                         f"({home}) must be writable") from None
    try:
        manifest = Manifest(home / "manifests" / f"{store.store_key}.json")
        files, missing, bad = collect(paths)
        for name in missing:
            report.fail(name, "no such file or directory; check the path"
                        + ("; nothing was pruned" if prune else ""))
        for name, reason in bad:
            report.files_seen += 1
            report.fail(name, reason)
        changed = False
        off = None if progress else True    # None: tqdm stays quiet when stderr is not a terminal (CI logs)
        file_bar = tqdm(files, desc="files", unit="file", file=sys.stderr, disable=off, leave=False)
        chunk_bar = tqdm(desc="chunks", unit="chunk", file=sys.stderr, disable=off, leave=False,
                         position=1)
        try:
            for n, (path, explicit) in enumerate(file_bar, 1):
                report.files_seen += 1
                try:
                    changed |= _ingest_file(store, manifest, report, path, explicit, kind, chunk_bar)
                except SkipFile as exc:
                    report.skip(str(exc))
                except IngestFailure as exc:
                    report.fail(source_key(path), str(exc))
                except OSError as exc:
                    report.fail(source_key(path), f"cannot read ({exc.strerror or exc}); check permissions")
                if n % 50 == 0:
                    _save(manifest)
            if prune and not missing:
                changed |= _prune(store, manifest, report, paths)
        finally:
            chunk_bar.close()
            file_bar.close()
            _save(manifest)
            if changed:
                store.bump_revision()
        report.chunks_total = store.count()
    finally:
        lock.release()
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def _save(manifest: Manifest) -> None:
    try:
        manifest.save()
    except OSError as exc:
        raise StoreError(f"cannot write the ingest manifest {manifest.path} ({exc.strerror or exc}); "
                         "KERNELRAG_HOME must be writable") from None
