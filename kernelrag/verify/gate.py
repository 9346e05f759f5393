"""The GPU's gate: untimed GPU work shares the GPU, timing has it alone (``GpuGate``),
what one run holds of it, released in one place (``Held``), and its memory, shared by a
session's verifications unless one needs it alone (``MemoryRoom``)."""
from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import time
from typing import Iterator


class GpuGate:
    """A fair readers-writer lock over the GPU.

    ``shared()``: untimed GPU work, any number at once. ``exclusive()``: timing, alone.
    ``release(state)`` gives either back. Requests are served in arrival order: a shared
    request waits only for exclusive ones that came before it, and an exclusive one for
    everything before it. With a writer first, a steady stream of timings kept every
    baseline's untimed first call (and so its compile figure) waiting for a gap for minutes
    on the H200 (2026-12-02); in order, each waits for those ahead of it only.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._queue: collections.deque[tuple[int, str]] = collections.deque()
        self._tickets = itertools.count()
        self._since = time.monotonic()
        self._spent = {"exclusive": 0.0, "shared": 0.0, "idle": 0.0, "idle_with_waiters": 0.0}

    def _account(self) -> None:
        """Add the time since the last change to the state the gate was in (under the lock)."""
        now = time.monotonic()
        state = ("exclusive" if self._writer else "shared" if self._readers
                 else "idle_with_waiters" if self._queue else "idle")
        self._spent[state] += now - self._since
        self._since = now

    def usage(self) -> dict[str, float]:
        """Seconds the GPU was held alone, shared, or by no one (with requests queued, i.e.
        a request waiting for one ahead of it, or none), since the gate was made: whether the
        GPU or something else bounds a batch."""
        with self._cond:
            self._account()
            return {f"{k}_s": round(v, 2) for k, v in self._spent.items()}

    def _turn(self, ticket: tuple[int, str]) -> bool:
        if self._writer:
            return False
        if ticket[1] == "exclusive":
            return self._queue[0] == ticket and not self._readers
        return all(kind == "shared" for _, kind in itertools.takewhile(lambda t: t != ticket, self._queue))

    def _wait(self, kind: str) -> None:
        with self._cond:
            ticket = (next(self._tickets), kind)
            self._account()
            self._queue.append(ticket)
            self._cond.wait_for(lambda: self._turn(ticket))
            self._account()
            self._queue.remove(ticket)
            if kind == "exclusive":
                self._writer = True
            else:
                self._readers += 1
            self._cond.notify_all()          # the shared requests behind this one may go too

    def shared(self) -> None:
        self._wait("shared")

    def exclusive(self) -> None:
        self._wait("exclusive")

    def release(self, state: str) -> None:
        with self._cond:
            self._account()
            if state == "exclusive":
                self._writer = False
            else:
                self._readers -= 1
            self._cond.notify_all()


class Held:
    """What one run holds of the gate (nothing without one), released in one place, and the
    seconds it waited for the gate (``waited_s``)."""

    def __init__(self, gate):
        self.gate, self.state, self.waited_s = gate, None, 0.0

    def shared(self) -> None:
        self._take("shared")

    def exclusive(self) -> None:
        self._take("exclusive")

    def _take(self, state: str) -> None:
        if self.gate is None or self.state == state:
            return
        self.release()
        t0 = time.monotonic()
        getattr(self.gate, state)()
        self.waited_s += time.monotonic() - t0
        self.state = state

    def release(self) -> None:
        if self.gate is not None and self.state is not None:
            self.gate.release(self.state)
            self.state = None


__all__ = ["GpuGate", "Held"]


class MemoryRoom:
    """Verifications share a session's GPU memory (``shared()``); one that ran short of it,
    because the others held it, runs again with the room to itself (``alone()``): it waits
    until the verifications in flight end, and new ones wait until it ends. An 80 GB H100
    with five 4.3 GB tasks in flight (2026-12-05) left 16 of 79 correct kernels untimed
    after a second try beside the others."""

    def __init__(self):
        self._cond = threading.Condition()
        self._in = 0              # verifications sharing the room
        self._waiting = 0         # verifications waiting for the room alone, or in it
        self._alone = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._waiting == 0)
            self._in += 1
        try:
            yield
        finally:
            with self._cond:
                self._in -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: self._in == 0 and not self._alone)
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._waiting -= 1
                self._alone = False
                self._cond.notify_all()
