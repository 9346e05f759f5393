"""Process handles for the verifier's workers, and the pools that keep some of them.

* ``Server``: a long-lived worker speaking JSON lines (the reference server, the
  zygote). Marked lines on its stdout are messages; anything else is kept as a tail.
* ``Child``: one candidate process, either a child forked by a zygote of its device
  or, when no zygote is available, a ``subprocess.Popen``. Both run in their own
  session, so ``kill`` takes the whole process group.
* Pools: idle reference servers and zygotes are kept per device (and per isolation in
  force) in each parent process, a few per key, and stopped at exit; any that misbehave
  are killed and replaced.

Every process starts through ``_launch``: inside the OS sandbox of ``isolation`` when
one is available, always with the allow-listed environment. A zygote child's pid is
one of the zygote's PID namespace, so only the zygote signals it.
"""
from __future__ import annotations

import atexit
import collections
import itertools
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from kernelrag.verify import isolation
from kernelrag.verify.jail import group_rss_bytes

MARK = "@@kernelrag "
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def worker_env(device: str, home: str = "/tmp") -> dict[str, str]:
    """The allow-listed environment of a worker (see ``isolation.base_env``): never a key or token."""
    return isolation.base_env(device, home)


def _launch(argv: list[str], *, device: str, cwd: Path, writable: list[str], readable: list[str] = (),
            keep_caps: bool = False, **popen) -> subprocess.Popen:
    """Start ``argv`` in its own session, inside the sandbox when one is available."""
    iso = isolation.probe()
    home = "/tmp" if iso.active else str(cwd)
    env = worker_env(device, home)
    inner_cwd = str(cwd) if any(str(cwd) == w or str(cwd).startswith(w + os.sep) for w in writable) else None
    argv = isolation.wrap(iso, argv, device=device, writable=writable, cwd=inner_cwd,
                          readable=readable, keep_caps=keep_caps, env=env)
    return subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True, **popen)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _kill_group(pid: int) -> None:
    """Kill the process group led by ``pid``; the process alone if it has not made one yet."""
    try:
        os.killpg(pid, signal.SIGKILL)
        return
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, chars: int) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class Server:
    """A long-lived worker: JSON lines in on stdin, marked JSON lines out on stdout."""

    def __init__(self, args: list[str], cwd: Path, device: str, *, writable: list[str] = (),
                 readable: list[str] = (), keep_caps: bool = False):
        cwd.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        self.stderr_path = cwd / "stderr.txt"
        with open(self.stderr_path, "wb") as err:
            self.proc = _launch([sys.executable, "-P", "-m", *args], device=device, cwd=cwd,
                                writable=list(writable), readable=list(readable), keep_caps=keep_caps,
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err)
        self.messages: queue.Queue = queue.Queue()
        self.lines: collections.deque[str] = collections.deque(maxlen=50)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(MARK):
                self.on_message(json.loads(line[len(MARK):]))
            else:
                self.lines.append(line)
        self.on_message(None)

    def on_message(self, message: dict[str, Any] | None) -> None:
        self.messages.put(message)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, data: dict[str, Any]) -> None:
        try:
            self.proc.stdin.write((json.dumps(data) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def recv(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None if the process ended or the deadline passed."""
        try:
            return self.messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc.pid)
        self.proc.wait()
        shutil.rmtree(self.cwd, ignore_errors=True)

    def describe(self) -> str:
        tail = _tail(self.stderr_path, 2000)
        return f"{describe_exit(self.proc.poll())}; stderr: {tail}" if tail else describe_exit(self.proc.poll())


class Zygote(Server):
    """The fork server (see ``zygote``): forks candidate children on request."""

    def __init__(self, device: str = "cpu"):
        self._exits: dict[int, int] = {}
        self._over: dict[int, int] = {}          # child -> resident bytes it was killed at
        self._forked: dict[int, int] = {}
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self.device, self.key = device, zygote_key(device)
        # keep_caps: the zygote itself (which never runs candidate code) makes each child's
        # own PID and mount namespaces, and the child drops every privilege before the candidate
        super().__init__(["kernelrag.verify.zygote"], Path(tempfile.mkdtemp(prefix="kernelrag-zygote-")), device,
                         writable=[str(isolation.exchange_base())], keep_caps=True)
        hello = self.recv(time.monotonic() + 180.0)
        # on a GPU the zygote has checked that a forked child can create a CUDA context
        self.ready = hello is not None and hello.get("fork_cuda") is not False
        if hello is not None and hello.get("fork_cuda") is False:
            _FORK_FAILS.add(device)

    def on_message(self, message: dict[str, Any] | None) -> None:
        with self._cond:
            if message is None or "ready" in message:
                self.messages.put(message)
            elif "exited" in message:
                self._exits[message["exited"]] = message["code"]
                if message.get("rss_bytes"):
                    self._over[message["exited"]] = int(message["rss_bytes"])
            elif "pid" in message:
                self._forked[message["id"]] = message["pid"]
            self._cond.notify_all()

    def fork(self, job_path: Path, cwd: Path) -> "Child | None":
        rid = next(self._ids)
        iso = isolation.probe()
        self.send({"id": rid, "job": str(job_path), "device": self.device, "cwd": str(cwd),
                   "stdout": str(cwd / "stdout.txt"),
                   "stderr": str(cwd / "stderr.txt"), "isolate": iso.active, "switch_uid": iso.switch_uid,
                   "base": str(isolation.exchange_base()), "tmp_bytes": isolation.TMP_BYTES[self.device],
                   "rss_bytes": isolation.host_rss_bytes(self.device)})
        with self._cond:
            self._cond.wait_for(lambda: rid in self._forked or not self.alive(), timeout=30.0)
            pid = self._forked.pop(rid, None)
        return None if pid is None else Child(cwd, pid=pid, zygote=self)

    def killed_over_memory(self, pid: int) -> int | None:
        with self._cond:
            return self._over.get(pid)

    def exit_code(self, pid: int, timeout: float = 0.0) -> int | None:
        with self._cond:
            if timeout:
                self._cond.wait_for(lambda: pid in self._exits, timeout=timeout)
            return self._exits.get(pid)


class Child:
    """One candidate process: a Popen, or a pid forked by the zygote."""

    def __init__(self, cwd: Path, *, popen: subprocess.Popen | None = None, pid: int | None = None,
                 zygote: Zygote | None = None):
        self.cwd, self.popen, self.zygote = cwd, popen, zygote
        self.pid = popen.pid if popen is not None else pid
        self.rss_over = 0                         # resident bytes it was killed at, over its cap
        self._lock = threading.Lock()             # the scratch watch may kill from its thread

    @classmethod
    def start(cls, job_path: Path, cwd: Path, device: str, readable: list[str] = ()) -> "Child":
        with open(cwd / "stdout.txt", "wb") as out, open(cwd / "stderr.txt", "wb") as err:
            popen = _launch([sys.executable, "-P", "-m", "kernelrag.verify.worker", "candidate", str(job_path)],
                            device=device, cwd=cwd, writable=[str(cwd)], readable=list(readable),
                            stdin=subprocess.DEVNULL,
                            stdout=out, stderr=err)
        return cls(cwd, popen=popen)

    def memory_breach(self, device: str) -> str | None:
        """Why the candidate was killed for its resident host memory, if it was: by its
        zygote, or (a new interpreter) when this finds its process group over the cap."""
        cap = isolation.host_rss_bytes(device)
        if self.popen is not None and self.popen.poll() is None:
            rss = group_rss_bytes(self.pid)
            if rss > cap:
                self.rss_over = max(self.rss_over, rss)
        elif isinstance(self.zygote, Zygote):
            self.rss_over = self.zygote.killed_over_memory(self.pid) or self.rss_over
        if not self.rss_over:
            return None
        return (f"the candidate held {self.rss_over / 2**30:.1f} GiB of resident host memory "
                f"(cap {cap / 2**30:.0f} GiB) and was killed")

    def started(self) -> bool:
        """A process started ahead of its job has done its imports (and on a GPU made its
        CUDA context) and now waits for the job (``worker.say_ready``)."""
        return (self.cwd / "ready").exists()

    def poll(self) -> int | None:
        if self.popen is not None:
            return self.popen.poll()
        code = self.zygote.exit_code(self.pid)
        if code is None and not self.zygote.alive():
            return -signal.SIGKILL                # the zygote took it down with it
        return code

    def kill(self) -> None:
        """Kill the process group if still running; a zygote goes back to the pool afterwards."""
        with self._lock:
            self._kill()

    def _kill(self) -> None:
        if self.popen is None and isinstance(self.zygote, _Dead):
            return                                # already killed and given back
        if self.poll() is None:
            if self.popen is not None:
                _kill_group(self.pid)
            else:          # a pid of the zygote's PID namespace: only the zygote may signal it
                self.zygote.send({"kill": self.pid})
        if self.popen is not None:
            self.popen.wait()
        else:
            exited = self.zygote.exit_code(self.pid, timeout=10.0) is not None
            self.rss_over = self.zygote.killed_over_memory(self.pid) or self.rss_over
            zygote, self.zygote = self.zygote, _Dead()
            give_back(zygote.key, zygote, healthy=exited)

    def exit_description(self) -> str:
        return describe_exit(self.poll())


class _Dead:
    """Stands in for a zygote already given back: its child has been reaped."""

    def exit_code(self, pid: int, timeout: float = 0.0) -> int:
        return -signal.SIGKILL

    def alive(self) -> bool:
        return False


# ------------------------------------------------------------------ pools
POOL_PER_KEY = 8           # idle servers kept per key: one per candidate in flight is enough
_POOL: dict[str, list[Server]] = {}
_LOCK = threading.Lock()


def take_server(key: str, make) -> Server | None:
    """A live pooled server for ``key`` (removed from the pool while in use), else ``make()``."""
    while True:
        with _LOCK:
            idle = _POOL.get(key) or []
            server = idle.pop() if idle else None
        if server is None:
            return make()
        if server.alive():
            return server
        server.kill()


def give_back(key: str, server: Server, healthy: bool) -> None:
    if healthy and server.alive():
        with _LOCK:
            idle = _POOL.setdefault(key, [])
            if len(idle) < POOL_PER_KEY:
                idle.append(server)
                return
    server.kill()


def zygote_key(device: str) -> str:
    return f"zygote-{device}-{isolation.probe().kind}"


def reference_key(device: str) -> str:
    """The pool key of a reference server: per device and per isolation in force."""
    return f"reference-{device}-{isolation.probe().kind}"


def reference_server(device: str) -> Server:
    return take_server(reference_key(device), lambda: Server(
        ["kernelrag.verify.worker", "reference"], Path(tempfile.mkdtemp(prefix="kernelrag-ref-")), device,
        readable=[str(isolation.exchange_base())]))


def spawn_candidate(job_path: Path, cwd: Path, device: str, readable: list[str] = ()) -> Child:
    """A candidate process: forked by a zygote of its device when possible, else a new
    interpreter. ``readable``: folders a new interpreter may read besides its own, read-only.
    Started before ``job_path`` exists, the process gets ready (imports; on a GPU the CUDA
    context and Triton) and then waits for it (see ``zygote`` and ``worker.main``)."""
    if zygotes_enabled(device):
        zygote = take_server(zygote_key(device), lambda: Zygote(device))
        child = zygote.fork(job_path, cwd) if isinstance(zygote, Zygote) and zygote.ready else None
        if child is not None:
            return child                   # the zygote stays with its child until Child.kill
        zygote.kill()
    return Child.start(job_path, cwd, device, readable=[p for p in readable if os.path.isdir(p)])


_STARTER = ThreadPoolExecutor(max_workers=32, thread_name_prefix="kernelrag-start")   # threads made as needed


def in_background(start: Callable[[], Any]) -> None:
    """Run ``start`` (which starts processes) on a thread that lives as long as this process:
    a worker dies with the thread that started it (PR_SET_PDEATHSIG follows the thread), so
    warm processes are never started from a short-lived one. A failure only means the
    process is started again when it is needed."""
    def quietly() -> None:
        try:
            start()
        except Exception:   # noqa: BLE001 - see above
            pass

    _STARTER.submit(quietly)


_FORK_FAILS: set[str] = set()      # devices whose forked children could not use the device


def zygotes_enabled(device: str | None = None) -> bool:
    return (hasattr(os, "fork") and not os.environ.get("KERNELRAG_VERIFY_NO_ZYGOTE")
            and device not in _FORK_FAILS)


def warm_zygote(device: str) -> None:
    """Start one zygote of ``device`` into the pool (a session does this ahead of its candidates)."""
    if zygotes_enabled(device):
        zygote = Zygote(device)
        give_back(zygote.key, zygote, zygote.ready)


@atexit.register
def shutdown() -> None:
    """Stop every pooled server (also run at interpreter exit)."""
    with _LOCK:
        servers = [server for idle in _POOL.values() for server in idle]
        _POOL.clear()
    for server in servers:
        server.kill()
