"""A candidate's stdout and stderr, captured with a hard cap.

The candidate writes into two FIFOs in its exchange folder (``stdout.txt`` and
``stderr.txt``); a thread of the parent drains them into files outside that folder, which
only the parent writes. Once the two together pass the cap, the parent stops copying,
calls ``on_cap`` (which kills the candidate) and closes the pipes: at most one pipe
buffer (64 KiB) and one read past the cap ever leave the candidate, however fast it
writes. (Regular files polled for size let a fast writer put a hundred MiB past the cap
between two polls.)

The parent holds a write end of each FIFO itself, so the candidate can open, close and
reopen them without the reader seeing an end of file.
"""
from __future__ import annotations

import os
import select
import threading
from pathlib import Path
from typing import Callable

NAMES = ("stdout.txt", "stderr.txt")
CHUNK_BYTES = 1 << 16


class OutputCapture:
    """FIFOs in ``scratch`` drained into ``keep`` (see the module docstring). ``owner``:
    (uid, gid) the FIFOs are given to, when the candidate runs as another user."""

    def __init__(self, scratch: Path, keep: Path, cap_bytes: int, owner: tuple[int, int] | None = None):
        self.keep, self.cap_bytes = Path(keep), cap_bytes
        self.total_bytes = 0
        self.broken: str | None = None
        self.on_cap: Callable[[], None] | None = None
        self._fds: dict[int, tuple[int, object]] = {}       # read fd -> (our write fd, file)
        for name in NAMES:
            fifo = Path(scratch) / name
            os.mkfifo(fifo, 0o600)
            if owner is not None:
                os.chown(fifo, *owner)
            read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            write_fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            self._fds[read_fd] = (write_fd, open(self.keep / name, "wb"))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kernelrag-output")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self._fds:
            try:
                ready, _, _ = select.select(list(self._fds), [], [], 0.05)
            except (OSError, ValueError):
                return
            if ready:
                self._drain(ready)

    def _drain(self, fds) -> None:
        with self._lock:
            for fd in fds:
                if fd not in self._fds:
                    continue
                while self.broken is None:
                    try:
                        data = os.read(fd, CHUNK_BYTES)
                    except BlockingIOError:
                        break
                    except OSError:
                        break
                    if not data:
                        break
                    room = max(0, self.cap_bytes - self.total_bytes)
                    self._fds[fd][1].write(data[:room])
                    self.total_bytes += len(data)
                    if self.total_bytes > self.cap_bytes:
                        self.broken = (f"the candidate wrote more than {self.cap_bytes / 2**20:.0f} MiB to "
                                       "stdout/stderr (the cap) and was killed")
                        if self.on_cap is not None:
                            self.on_cap()
                        self._close()
                        return

    def tail(self, name: str = "stderr.txt", chars: int = 4000) -> str:
        """The last ``chars`` characters captured of ``name`` so far."""
        self._drain(list(self._fds))
        with self._lock:
            for _, handle in self._fds.values():
                handle.flush()
        try:
            data = (self.keep / name).read_bytes()
        except OSError:
            return ""
        return data[-chars:].decode("utf-8", "replace")

    def stop(self) -> None:
        """Drain what is left (the candidate has been killed), then close everything."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._drain(list(self._fds))
        with self._lock:
            self._close()

    def _close(self) -> None:
        for read_fd, (write_fd, handle) in list(self._fds.items()):
            for fd in (read_fd, write_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            handle.close()
        self._fds.clear()


__all__ = ["OutputCapture", "NAMES"]
