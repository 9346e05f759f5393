"""Storage helpers shared by the graph, the skill library and the measurement script:
the transformation vocabulary, a cross-process file lock and atomic file writes.

Standard library only (filelock is used when installed): runs on the GPU machine.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Iterator

from kernelrag.errors import GraphError

VOCABULARY_PATH = Path(__file__).resolve().parent / "data" / "transformations.toml"


def load_vocabulary(path: Path = VOCABULARY_PATH) -> dict[str, dict[str, Any]]:
    """Transformation id -> {id, name, description, applies_to}."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GraphError(f"cannot read the transformation vocabulary {path}: {exc}") from None
    return {t["id"]: dict(t) for t in data.get("transformation", [])}


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")



@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """Exclusive lock on ``<path>.lock`` (filelock when installed, else fcntl.flock)."""
    lock_path = Path(str(path) + ".lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GraphError(f"cannot create {lock_path.parent} ({exc.strerror or exc}); KERNELRAG_HOME must be "
                         "a writable folder: fix its permissions or point KERNELRAG_HOME elsewhere") from None
    try:
        import filelock
    except ImportError:
        filelock = None
    if filelock is not None:
        lock = filelock.FileLock(str(lock_path), timeout=timeout_s)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise GraphError(f"could not lock {lock_path} within {timeout_s:.0f} s; another kernelrag "
                             "process holds it; wait, or delete the lock file if none is running") from None
        except OSError as exc:
            raise GraphError(f"cannot take the lock {lock_path} ({exc.strerror or exc}); KERNELRAG_HOME "
                             "must be writable") from None
        try:
            yield
        finally:
            lock.release()
        return
    import fcntl

    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def write_text_or_raise(path: Path, text: str, error: type = GraphError) -> None:
    """``atomic_write_text``, with an OSError (read-only or full disk) turned into ``error``."""
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise error(f"cannot write {path} ({exc.strerror or exc}); KERNELRAG_HOME must be writable and "
                    "have free space") from None


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
