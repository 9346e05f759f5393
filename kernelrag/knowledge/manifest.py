"""Per-file manifest: what was ingested from each file, so an unchanged file costs nothing.

A sidecar JSON under ``$KERNELRAG_HOME/manifests/<store>.json``: source -> file
hash, absolute path, kind, chunk ids. It is a fast path only; the collection
itself stays the truth (chunk ids already stored are never embedded again).
"""
from __future__ import annotations

import json
import os
from pathlib import Path


class Manifest:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.files: dict[str, dict] = {}
        self.dirty = False
        if path.is_file():
            try:
                data = json.loads(path.read_text())
                self.files = data.get("files", {}) if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self.files = {}        # unreadable: rebuilt from the store on the next ingest

    def unchanged(self, source: str, file_hash: str, abs_path: str) -> bool:
        entry = self.files.get(source)
        return bool(entry and entry.get("file_hash") == file_hash and entry.get("abs_path") == abs_path)

    def record(self, source: str, **entry) -> None:
        self.files[source] = entry
        self.dirty = True

    def forget(self, source: str) -> None:
        if self.files.pop(source, None) is not None:
            self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"version": 1, "files": self.files}, indent=0, sort_keys=True))
        os.replace(tmp, self.path)
        self.dirty = False
