"""A fork server for candidate processes.

Importing torch and triton costs seconds (on a GPU host with a CUDA build, 8-13 s under
load); a verification needs only a few more. The zygote imports them once and forks a
child per candidate. The child is a new process: its own session (killable as a group),
its own PID and mount namespaces with a fresh /tmp when isolation is in force, its own
working directory, stdin from /dev/null, stdout/stderr to files, and it runs
``worker.run_candidate`` exactly as a fresh ``python -m kernelrag.verify.worker
candidate`` would. A child forked before its job is written (a session's prestarted
slot) first creates its CUDA context and warms Triton, then waits for the job, so the
candidate's clock starts with a ready GPU. The zygote never runs candidate code, so no candidate can leave
anything behind for the next one.

On a GPU the zygote never touches CUDA (no context, no ``cuInit``: a CUDA context does
not survive ``fork``); each child creates its own context and Triton driver. On a CPU it
runs with ``TRITON_INTERPRET=1``.

Protocol on stdin/stdout (JSON lines; output lines start with ``@@kernelrag``):
``{"id", "job", "cwd", "stdout", "stderr", "rss_bytes"}`` -> ``{"id", "pid"}``; whenever a
child ends: ``{"exited": pid, "code": exit code, negative for a signal, "rss_bytes": the
resident bytes it was killed at, when it went over its cap}``. The zygote watches each
child's resident host memory (``rss_bytes`` caps its process group; RLIMIT_AS cannot on a
GPU, where the CUDA runtime reserves terabytes of address space).
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback
from pathlib import Path

from kernelrag.verify import jail, triton_seed

MARK = "@@kernelrag "


def _send(message: dict) -> None:
    os.write(1, (MARK + json.dumps(message) + "\n").encode())


RSS_PERIOD_S = 0.2
_SEED: dict[str, bytes] = {}     # Triton's driver helper, as the probe built it (triton_seed)
_CAPS: dict[int, int] = {}        # live child -> cap on its group's resident memory, bytes
_SANDBOXED: dict[int, dict] = {}  # live sandboxed child -> its request (where its build wishes land)
_BUILDERS: dict[int, tuple] = {}  # live builder -> (folder, wishes, started); see triton_seed
BUILD_TIMEOUT_S = 120.0
BUILD_RSS_BYTES = 2 << 30         # a builder's resident memory (the compiler on a hostile source)
_OVER: dict[int, int] = {}        # child killed over its cap -> the resident bytes seen


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _CAPS.pop(pid, None)
        if pid in _BUILDERS:
            _OVER.pop(pid, None)
            _harvest(pid)
            continue
        request = _SANDBOXED.pop(pid, None)
        if request is not None:        # before the parent hears of the exit and removes the folder
            _build_wishes(request)
        _send({"exited": pid, "code": os.waitstatus_to_exitcode(status), "rss_bytes": _OVER.pop(pid, None)})


def _build_wishes(request: dict) -> None:
    """A sandboxed child's own native builds (Triton launchers), compiled again by a builder
    sandboxed like a candidate, for the next children (``triton_seed``)."""
    known = {path[len(triton_seed.BUILDS) + 1:-3] for path in _SEED if path.startswith(triton_seed.BUILDS + "/")}
    wishes = triton_seed.wanted(Path(request["cwd"]) / triton_seed.WISHES, known)
    if not wishes or sum(map(len, _SEED.values())) > triton_seed.MAX_BYTES:
        return
    import tempfile

    folder = tempfile.mkdtemp(prefix="kernelrag-build-", dir=request["base"])
    os.chmod(folder, 0o755)
    if request.get("switch_uid"):          # the builder runs as the candidates do (isolation.hand_over)
        os.chown(folder, 65534, 65534)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            jail.prctl(jail.PR_SET_PDEATHSIG, signal.SIGKILL)
            _isolate({**request, "cwd": folder})
            os.chdir(folder)
            for fd in (0, 1, 2):
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, fd)
                os.close(null)
            jail.set_limits({"core": 0, "cpu": int(BUILD_TIMEOUT_S), "fsize": triton_seed.MAX_BUILT_BYTES})
            triton_seed.build_wanted(wishes, folder)
            code = 0
        finally:
            os._exit(code)
    _BUILDERS[pid] = (folder, wishes, time.monotonic())
    _CAPS[pid] = BUILD_RSS_BYTES


def _harvest(pid: int) -> None:
    import shutil

    folder, wishes, _ = _BUILDERS.pop(pid)
    try:
        fresh = triton_seed.harvest(folder, wishes)
        _SEED.update(fresh)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for request in _SANDBOXED.values():      # children forked before the build: their exchange folder
        try:
            triton_seed.plant(fresh, request["cwd"])
        except OSError:
            pass


def _watch_builders() -> None:
    for pid, (_, _, started) in list(_BUILDERS.items()):
        if time.monotonic() - started > BUILD_TIMEOUT_S:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _watch_memory() -> None:
    """Kill a child whose process group holds more resident host memory than its cap
    (RLIMIT_AS is unusable with CUDA); its exit report says so."""
    for pid, cap in list(_CAPS.items()):
        rss = jail.group_rss_bytes(pid)
        if cap and rss > cap and pid not in _OVER:
            _OVER[pid] = rss
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _isolate(request: dict) -> None:
    """This child's own PID and mount namespaces: only its exchange folder visible, a fresh
    /tmp and /proc; then no privileges. The forked process that runs the candidate is PID 1
    of the new namespace, so every process it starts ends with it."""
    jail.unshare(jail.CLONE_NEWNS | jail.CLONE_NEWPID)
    jail.hide_siblings(request["base"], request["cwd"], request["tmp_bytes"])
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)
    jail.mount("proc", "/proc", "proc", jail.MS_NOSUID | jail.MS_NODEV | jail.MS_NOEXEC)
    jail.drop_privileges(request["switch_uid"])
    jail.prctl(jail.PR_SET_PDEATHSIG, signal.SIGKILL)   # after the switch of user, which clears it


def _child(request: dict) -> None:
    code = 1
    forked = time.monotonic()
    try:
        os.setsid()
        jail.prctl(jail.PR_SET_PDEATHSIG, signal.SIGKILL)   # the zygote gone: nobody reaps or kills us
        if request.get("isolate"):
            _isolate(request)
            triton_seed.plant(_SEED, os.environ.get("TRITON_CACHE_DIR"))
            if request.get("device") == "cuda":
                triton_seed.install_build_hook(os.environ.get("TRITON_CACHE_DIR"),
                                               Path(request["cwd"]) / triton_seed.WISHES)
        os.chdir(request["cwd"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            new = os.open(path, flags, 0o600)
            os.dup2(new, fd)
            os.close(new)
        from kernelrag.verify import worker

        stamps = {"main": forked, "imports": forked, "forked": 1.0}
        job_path = Path(request["job"])
        if not job_path.exists():
            # forked ahead of its job: create the CUDA context and start Triton now, off the
            # candidate's clock, then wait for the job like a warm new interpreter
            if request.get("device") == "cuda":
                worker.warm_gpu()
            stamps.update(imports=time.monotonic(), warm=1.0)
            worker.say_ready()
        code = worker.run_candidate(worker.wait_json(job_path), stamps)
    except BaseException:   # noqa: BLE001 - report anything, then leave without cleanup
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _children_get_cuda() -> bool:
    """Fork one child that creates a CUDA context and allocates: True when it worked. A
    zygote whose children cannot use the GPU says so, and its parent starts candidates as
    new interpreters instead (``processes.spawn_candidate``), never blaming a candidate."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import torch

            torch.cuda.init()
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
            code = 0
            triton_seed.build()          # trusted: the driver helper every sandboxed child gets
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def serve() -> int:
    import torch  # noqa: F401 - the point of the zygote: import once, fork many
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    from kernelrag.verify import correctness, guard, measure, tolerances, worker  # noqa: F401
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        from kernelrag.verify import ceilings, launch, timing  # noqa: F401 - module level only: no CUDA call
        import torch._dynamo  # noqa: F401 - the guard imports it on a GPU (2-6 s); no CUDA call

    worker.die_with_parent()
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES") != ""
    fork_cuda = _children_get_cuda() if cuda else None
    if fork_cuda:                 # before any request: no candidate child has run yet
        _SEED.update(triton_seed.capture(os.environ.get("TRITON_CACHE_DIR")))
    _send({"ready": True, "fork_cuda": fork_cuda})
    buffer, watched = b"", time.monotonic()
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        _reap()
        if time.monotonic() - watched > RSS_PERIOD_S:
            _watch_memory()
            _watch_builders()
            watched = time.monotonic()
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0                      # the parent went away
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            if "kill" in request:
                try:
                    os.killpg(request["kill"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                continue
            pid = os.fork()
            if pid == 0:
                _child(request)
            _CAPS[pid] = int(request.get("rss_bytes") or 0)
            if request.get("isolate"):
                _SANDBOXED[pid] = request
            _send({"id": request["id"], "pid": pid})


if __name__ == "__main__":
    sys.exit(serve())
