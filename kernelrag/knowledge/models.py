"""Typed values of the knowledge store: chunks, search hits, ingest reports.

Standard library only, so callers can build and read these without loading
chromadb or the embedding model.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

KINDS = ("guide", "isa", "log", "skill", "note")
MODES = ("hybrid", "dense", "bm25")
# metadata keys llama-index and Chroma add to every record; never shown to users
INTERNAL_KEYS = {"_node_content", "_node_type", "document_id", "doc_id", "ref_doc_id"}


@dataclass(frozen=True)
class Chunk:
    """One piece of a document, as stored: text plus where it came from."""

    text: str
    section: str = ""                 # heading path, "Bank conflicts > Swizzling"
    start_line: int | None = None     # 1-based, inclusive, in the source file
    end_line: int | None = None
    start_page: int | None = None     # PDFs: 1-based page span
    end_page: int | None = None


@dataclass(frozen=True)
class SearchHit:
    """One retrieved chunk with its citation fields and retrieval score."""

    text: str
    score: float
    source: str                       # repo-relative path when inside a repository
    section: str = ""
    start_line: int | None = None
    end_line: int | None = None
    page: int | None = None
    kind: str = ""
    title: str = ""
    chunk_id: str = ""
    end_page: int | None = None

    def citation(self) -> str:
        """``corpus/bank-conflicts.md §Swizzling L12-40`` (last heading, line or page span)."""
        out = self.source
        if self.section:
            out += f" §{self.section.split(' > ')[-1]}"
        if self.start_line is not None:
            end = self.end_line if self.end_line is not None else self.start_line
            out += f" L{self.start_line}-{end}" if end != self.start_line else f" L{self.start_line}"
        elif self.page is not None:
            end = self.end_page if self.end_page is not None else self.page
            out += f" p{self.page}-{end}" if end != self.page else f" p{self.page}"
        return out

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["citation"] = self.citation()
        return out


@dataclass(frozen=True)
class FileError:
    """A file that could not be ingested, and why (one line)."""

    path: str
    reason: str

    def line(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class SourceInfo:
    """One ingested file as the store knows it."""

    source: str
    kind: str
    title: str
    chunks: int


@dataclass
class IngestReport:
    """What one ingest run did. ``ok`` is False when any file failed."""

    files_seen: int = 0
    files_ingested: int = 0           # new or changed files written
    files_unchanged: int = 0          # same content as last time: nothing embedded
    files_skipped: int = 0            # formats that are not text (images, CSS, search indexes...)
    files_failed: int = 0
    files_removed: int = 0            # --prune: files gone from disk, their chunks deleted
    chunks_added: int = 0             # new chunks embedded and written
    chunks_replaced: int = 0          # old chunks of changed files deleted
    chunks_removed: int = 0           # chunks of pruned files deleted
    chunks_skipped: int = 0           # chunks of changed files whose text was unchanged (kept)
    skipped: dict[str, int] = field(default_factory=dict)   # reason -> count
    errors: list[FileError] = field(default_factory=list)
    seconds: float = 0.0
    chunks_total: int = 0             # chunks in the collection afterwards

    @property
    def ok(self) -> bool:
        return not self.errors

    def skip(self, reason: str) -> None:
        self.files_skipped += 1
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def fail(self, path: str, reason: str) -> None:
        self.files_failed += 1
        self.errors.append(FileError(path, reason))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ok"] = self.ok
        return out

    def summary(self) -> str:
        """Human text: counts on two lines, then one line per failed file."""
        lines = [
            f"files: {self.files_seen} seen, {self.files_ingested} ingested, "
            f"{self.files_unchanged} unchanged, {self.files_skipped} skipped, "
            f"{self.files_failed} failed, {self.files_removed} removed",
            f"chunks: {self.chunks_added} added, {self.chunks_replaced} replaced, "
            f"{self.chunks_removed} removed, {self.chunks_skipped} kept; "
            f"{self.chunks_total} in store; {self.seconds:.1f} s",
        ]
        if self.skipped:
            lines.append("skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(self.skipped.items())))
        lines += [f"error: {e.line()}" for e in self.errors]
        return "\n".join(lines)


class IngestFailure(Exception):
    """A file that cannot be ingested; the message is the one-line reason."""


class SkipFile(Exception):
    """A file that is not knowledge (counted as skipped, not failed); the message is why."""


@dataclass
class Extracted:
    """A file turned into lines, with where each line came from."""

    lines: list[str]
    syntax: str                               # markdown | rst | text | python | c
    fmt: str                                  # the file format, for metadata
    line_nos: list[int] | None = None         # source line of each line; None: i + 1
    pages: list[int] | None = None            # PDFs: page of each line (no line numbers)
    title: str = ""
    kind: str = ""
    tags: list[str] = field(default_factory=list)
