"""A task's compiled torch.compile baseline, kept across sessions: inductor's and Triton's
cache files from its compile, so that the next session's baseline loads the compiled
code instead of compiling it again (a cold inductor compile took 18.6 s on the H200 for
a one-op task, 20-140 s under a suite's load; 2026-12-02). The median is still measured
in every session: only the compiled code is reused, and its outputs are checked against
eager before it is timed, as always.

Layout: ``<cache>/baselines/<sha256 of the task source>/<tag>/{inductor,triton}/...``,
``tag`` naming torch, triton and the GPU (their caches key on more, and check it).

Trust. The reference process that compiles a baseline runs the task's code, so what it
sends back is untrusted. The parent alone picks where it goes (the folder of the source
it sent, under a name made safe), accepts plain relative paths only, under a size
limit, and writes an entry whole or not at all. A task can so reach its own entry and
no other; the entry is read only by a reference process, which already runs the task's
code, never by a candidate. The two directions:

* to the reference process: the parent copies the task's entry into the exchange
  folder, which the reference process can read (``offer``); the process copies it into
  its own cache folders before compiling (``restore``);
* back: the reference process lists the files its compile added (``added``), sends them
  inline with its reply (``pack``), and the parent stores them (``store``).

No torch here: the reference process passes its own versions to ``tag``.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

CACHE_VARS = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}
MAX_BYTES = 48 << 20      # one task's compile: a few kernels' code and cubins, well under this
MAX_FILES = 4000
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def tag(torch_version: str, triton_version: str, gpu: str) -> str:
    return _SAFE.sub("_", f"torch-{torch_version}_triton-{triton_version}_{gpu}")[:160]


def entry_of(root: Path, source: str) -> Path:
    return root / hashlib.sha256(source.encode()).hexdigest()[:32]


# ---- parent side -----------------------------------------------------------------

def offer(root: Path | None, source: str, exchange: Path) -> Path | None:
    """A readable copy of the task's entry for its reference process (None: nothing kept)."""
    entry = entry_of(root, source) if root is not None else None
    if entry is None or not entry.is_dir():
        return None
    copy = Path(tempfile.mkdtemp(prefix="baseline-cache-", dir=exchange))
    shutil.copytree(entry, copy, dirs_exist_ok=True)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return copy


def store(root: Path | None, source: str, packed: Any) -> int:
    """Write a reference process's packed files as the task's entry; the files written (0 on
    anything malformed, oversized or unwritable: the cache is an optimisation only)."""
    if root is None or not isinstance(packed, dict) or not isinstance(packed.get("files"), dict):
        return 0
    name, files = _SAFE.sub("_", str(packed.get("tag") or ""))[:160], packed["files"]
    if not name or name in (".", "..") or not files or len(files) > MAX_FILES:
        return 0
    decoded: dict[Path, bytes] = {}
    for rel, text in files.items():
        parts = Path(rel).parts if isinstance(rel, str) else ()
        if (len(parts) < 2 or parts[0] not in CACHE_VARS or any(p in ("", ".", "..") for p in parts)
                or Path(rel).is_absolute() or not isinstance(text, str)):
            return 0
        try:
            decoded[Path(*parts)] = base64.b64decode(text, validate=True)
        except ValueError:
            return 0
    if sum(len(b) for b in decoded.values()) > MAX_BYTES:
        return 0
    entry = entry_of(root, source)
    try:
        entry.mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(prefix=".new-", dir=entry))
        for rel, data in decoded.items():
            (fresh / rel).parent.mkdir(parents=True, exist_ok=True)
            (fresh / rel).write_bytes(data)
        final = entry / name
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        os.replace(fresh, final)
    except OSError:
        return 0
    return len(decoded)


# ---- reference-process side --------------------------------------------------------

def cache_dirs() -> dict[str, Path]:
    """This process's inductor and Triton cache folders (the worker environment sets both)."""
    return {k: Path(os.environ[v]) for k, v in CACHE_VARS.items() if os.environ.get(v)}


def restore(offered: str | None, name: str, dirs: dict[str, Path]) -> bool:
    """Copy the offered entry's files for ``name`` into ``dirs``; True when there were any."""
    source = Path(offered) / name if offered else None
    if source is None or not source.is_dir():
        return False
    copied = False
    for kind, target in dirs.items():
        if (source / kind).is_dir():
            shutil.copytree(source / kind, target, dirs_exist_ok=True)
            copied = True
    return copied


def snapshot(dirs: dict[str, Path]) -> set[str]:
    return {f"{kind}/{p.relative_to(d).as_posix()}" for kind, d in dirs.items() if d.is_dir()
            for p in d.rglob("*") if p.is_file() and not p.is_symlink()}


def added(dirs: dict[str, Path], before: set[str]) -> list[str]:
    """Files the compile wrote, ignoring locks and temporaries."""
    return sorted(rel for rel in snapshot(dirs) - before
                  if not rel.endswith((".lock", ".tmp")) and "/tmp." not in rel)


def pack(dirs: dict[str, Path], rels: list[str], name: str) -> dict[str, Any] | None:
    """The files ``rels`` inline (base64) with ``name``; None past the limits."""
    if not rels or len(rels) > MAX_FILES:
        return None
    files, total = {}, 0
    for rel in rels:
        kind, _, inner = rel.partition("/")
        data = (dirs[kind] / inner).read_bytes()
        total += len(data)
        if total > MAX_BYTES:
            return None
        files[rel] = base64.b64encode(data).decode()
    return {"tag": name, "files": files}


__all__ = ["offer", "store", "restore", "snapshot", "added", "pack", "tag", "cache_dirs"]
