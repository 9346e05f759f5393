"""Inside the namespaces: build the filesystem view, set limits, drop privileges, exec.

Run as ``python -I jail.py SPEC_JSON -- ARGV...`` by ``isolation.wrap`` after
``unshare`` made new PID, network, mount, IPC and UTS namespaces (and a user
namespace when not run by root), or, where util-linux is missing, making them itself
with direct ``unshare(2)`` calls (``enter_namespaces``). Standard library only, and no import of the
package: it runs before the interpreter of the worker exists.

The view is a new root on a small tmpfs, entered with ``pivot_root`` (the old root
is detached, so nothing outside the view stays reachable):

* read-only binds of what the worker needs: /usr, /lib*, /bin, the Python prefix,
  site-packages, the repository, and on a GPU the NVIDIA devices and driver folders;
* read-write binds of the exchange folders the parent names (plans and outputs);
* a private size-limited tmpfs at /tmp (HOME, the Triton and torch-extension caches);
* a minimal /dev, and a /proc of the new PID namespace only (no other process);
* no network but loopback (down), no $HOME, no $KERNELRAG_HOME, no /etc beyond the
  loader's files.

Then rlimits, then every capability is dropped (bounding set emptied, no new
privileges); run by root, the process also becomes uid/gid 65534, so RLIMIT_NPROC
applies (the kernel does not count root).

The helpers are also used by the CPU zygote for per-candidate namespaces.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWUSER = 0x00020000, 0x20000000, 0x10000000
CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS = 0x40000000, 0x08000000, 0x04000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE = 1, 24, 38, 4
NOBODY = 65534
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
LIMITS = {"core": resource.RLIMIT_CORE, "nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC,
          "fsize": resource.RLIMIT_FSIZE, "cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS}
DEV_NODES = ("null", "zero", "full", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None   # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source} on {target}")


def group_rss_bytes(pgid: int, proc: str = "/proc") -> int:
    """Resident host memory of every process in process group ``pgid``, as ``proc`` (this
    process's PID namespace) numbers them. Address space is no measure on a GPU: the CUDA
    runtime reserves terabytes of it, so the cap there is on what is resident."""
    page, total = os.sysconf("SC_PAGE_SIZE"), 0
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:            # state, ppid, pgrp after the command name
                continue
            with open(f"{proc}/{name}/statm") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue                               # ended while we looked
    return total


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def prctl(option: int, arg: int) -> int:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0))


def _makedirs_for(target: str, is_dir: bool) -> None:
    os.makedirs(target if is_dir else os.path.dirname(target), exist_ok=True)
    if not is_dir and not os.path.exists(target):
        open(target, "w").close()


def bind(src: str, target: str, *, readonly: bool, dev: bool = False) -> None:
    """Bind ``src`` (a path, or /proc/self/fd/N) at ``target``; read-only when asked."""
    _makedirs_for(target, os.path.isdir(src))
    mount(src, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (MS_RDONLY if readonly else 0) | (0 if dev else MS_NODEV)
    mount(None, target, None, flags)


def tmpfs(target: str, size_bytes: int, mode: str = "1777") -> None:
    os.makedirs(target, exist_ok=True)
    owner = f",uid={os.getuid()},gid={os.getgid()}" if os.getuid() else ""
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(size_bytes)},mode={mode}{owner}")


def build_root(spec: dict) -> None:
    """Mount the view described by ``spec`` and pivot into it (see the module docstring)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    new = spec["mountpoint"]
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    tmpfs(new + "/tmp", spec["tmp_bytes"])         # first: a checkout or venv under /tmp is bound on top
    for path in sorted(set(spec["readonly"])):
        if os.path.islink(path) and os.path.dirname(path) == "/":
            os.symlink(os.readlink(path), new + path)           # /bin -> usr/bin on merged /usr
        elif os.path.exists(path):
            bind(os.path.realpath(path), new + path, readonly=True)
    for path in spec.get("readable", []):                     # exchange folders, after /tmp is mounted
        bind(path, new + path, readonly=True)
    for path in spec["writable"]:
        bind(path, new + path, readonly=False)
    tmpfs(new + "/dev", 1 << 20, "0755")
    for name in DEV_NODES:
        bind("/dev/" + name, new + "/dev/" + name, readonly=False, dev=True)
    for path in spec.get("devices", []):
        if os.path.exists(path):
            bind(path, new + path, readonly=False, dev=True)
    tmpfs(new + "/dev/shm", spec["tmp_bytes"])
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    os.makedirs(new + "/proc", exist_ok=True)
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(new + "/.old", exist_ok=True)
    pivot_root(new, new + "/.old")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", ctypes.c_int(MNT_DETACH)), "umount old root")
    os.rmdir("/.old")


def pivot_root(new: str, old: str) -> None:
    if SYS_PIVOT_ROOT is None:
        raise OSError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc.syscall(ctypes.c_long(SYS_PIVOT_ROOT), new.encode(), old.encode()), "pivot_root")


def hide_siblings(base: str, own: str, tmp_bytes: int) -> None:
    """In a new mount namespace: only ``own`` of ``base``'s folders stays visible; a fresh /tmp."""
    fd = os.open(own, os.O_PATH | os.O_DIRECTORY)
    kept = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in _code_under_tmp()
            if not (path + "/").startswith(base.rstrip("/") + "/")}
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if not (base + "/").startswith("/tmp/"):
        tmpfs(base, 1 << 20, "0755")
    tmpfs("/tmp", tmp_bytes)                    # hides every other folder of ``base`` under /tmp
    for path, path_fd in kept.items():          # the interpreter and the code, when they live under /tmp
        bind(f"/proc/self/fd/{path_fd}", path, readonly=True)
        os.close(path_fd)
        if (base + "/").startswith(path.rstrip("/") + "/"):
            tmpfs(base, 1 << 20, "0755")        # the bound folder holds ``base``: hide its siblings again
    bind(f"/proc/self/fd/{fd}", own, readonly=False)
    os.close(fd)


def _code_under_tmp() -> list[str]:
    """The outermost folders under /tmp that hold the interpreter, its packages or kernelrag."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, repo, *sys.path) if p and os.path.isdir(p)}
    found = {p for p in found if p.startswith("/tmp/")}
    return sorted(p for p in found if not any(p != q and p.startswith(q + "/") for q in found))


def set_limits(limits: dict[str, int]) -> None:
    for name, value in limits.items():
        soft, hard = resource.getrlimit(LIMITS[name])
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(LIMITS[name], (value, value))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(switch_uid: bool) -> None:
    """No capabilities now or after exec, no new privileges; with ``switch_uid`` (real root,
    no user namespace) the process becomes uid/gid 65534."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    cap = 0
    while prctl(PR_CAPBSET_DROP, cap) == 0 or ctypes.get_errno() != 22:   # EINVAL: past the last cap
        cap += 1
        if cap > 63:
            break
    if switch_uid:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), data), "capset")


def enter_namespaces(userns: bool) -> None:
    """What ``unshare --pid --fork --net --mount --ipc --uts [--user --map-root-user]`` does, for
    machines without util-linux: returns in a child that is PID 1 of the new namespaces; the
    caller's process waits for it and leaves with its status."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | (CLONE_NEWUSER if userns else 0))
    if userns:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)
    prctl(PR_SET_PDEATHSIG, 9)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    command = argv[argv.index("--") + 1:]
    try:
        if spec.get("direct"):
            enter_namespaces(spec.get("userns", False))
        build_root(spec)
        set_limits(spec.get("limits", {}))
        if not spec.get("keep_caps"):
            drop_privileges(spec.get("switch_uid", False))
        os.chdir(spec.get("cwd") or "/tmp")
    except OSError as exc:
        print(f"kernelrag sandbox: could not set up the isolated view: {exc}", file=sys.stderr)
        return 97
    os.execve(command[0], command, spec["env"])
    return 98


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
