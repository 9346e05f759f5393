"""OS-level isolation of the verifier's worker processes: what is available, and how to use it.

Every worker (the reference server, the CPU zygote and each candidate) starts as

    unshare [--user --map-root-user] --pid --fork --kill-child --net --mount --ipc --uts \\
        python -I jail.py SPEC -- python -P -m kernelrag.verify.worker ...

``jail`` builds a read-only view of the interpreter, site-packages and the repo with
a private size-limited tmpfs (HOME, caches) and the exchange folders the parent
names, sets rlimits and drops every capability (see ``jail``). Run by root, no user
namespace is made and the workers run as uid 65534; run by another user, a user
namespace maps them to root inside it, without capabilities.

What works is probed once per process by starting a sandboxed interpreter
(``probe``); when nothing works the workers run as plain processes with the
allow-listed environment and rlimits, and every verdict says so (``describe``).
Where util-linux is missing, ``jail`` makes the same namespaces itself ("direct").
``KERNELRAG_VERIFY_ISOLATION`` (auto, unshare, direct, none) overrides the choice.

Standard library only (the parent process imports this).
"""
from __future__ import annotations

import atexit
import functools
import glob
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
JAIL = Path(__file__).with_name("jail.py")
MODES = ("auto", "unshare", "direct", "none")
NOBODY = 65534

TMP_BYTES = {"cpu": 512 << 20, "cuda": 4 << 30}          # private tmpfs: HOME, Triton/extension caches
SCRATCH_BYTES = {"cpu": 256 << 20, "cuda": 8 << 30}      # the exchange folder of one candidate
OUTPUT_BYTES = 8 << 20                                   # stdout + stderr of one candidate
BASE_LIMITS = {"core": 0, "nofile": 4096, "nproc": 1024}
FSIZE_BYTES = {"cpu": 256 << 20, "cuda": 4 << 30}
CANDIDATE_CPU_S = 1800
HOST_MEMORY_BYTES = {"cpu": 8 << 30}   # RLIMIT_AS; not on CUDA, whose runtime reserves huge address ranges


def host_rss_bytes(device: str) -> int:
    """The cap on a candidate's resident host memory (its whole process group), watched from
    outside it (``jail.group_rss_bytes``): what RLIMIT_AS cannot do on a GPU. 8 GiB on a CPU
    (as the address-space cap), on a GPU host a quarter of its memory, 4-32 GiB."""
    if device != "cuda":
        return HOST_MEMORY_BYTES["cpu"]
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        physical = 64 << 30
    return max(4 << 30, min(32 << 30, physical // 4))


ENV_NAMES = {"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
             "MKL_NUM_THREADS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}
ENV_PREFIXES = ("CUDA_", "TRITON_", "TORCH_", "NVIDIA_", "KERNELRAG_VERIFY_")
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
SECRET_PREFIXES = ("OPENAI_", "KERNELRAG_LLM_", "ANTHROPIC_", "AWS_", "HF_TOKEN")


def allowed_env_name(name: str) -> bool:
    upper = name.upper()
    if any(m in upper for m in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES):
        return False
    return name in ENV_NAMES or name.startswith(ENV_PREFIXES)


def base_env(device: str, home: str) -> dict[str, str]:
    """The environment of a worker: an allow-list of the parent's, plus what the worker needs."""
    env = {k: v for k, v in os.environ.items() if allowed_env_name(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(PYTHONPATH=str(PACKAGE_ROOT), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               HOME=home, TMPDIR=home, USER="kernelrag", LOGNAME="kernelrag",
               TRITON_CACHE_DIR=f"{home}/triton", TORCH_EXTENSIONS_DIR=f"{home}/torch_extensions",
               TORCHINDUCTOR_CACHE_DIR=f"{home}/inductor", XDG_CACHE_HOME=f"{home}/cache",
               # one task's graph holds a few kernels: a pool of compile workers (each importing
               # torch) costs more host time than it saves, with several workers on one host
               TORCHINDUCTOR_COMPILE_THREADS="1")
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


@dataclass(frozen=True)
class Isolation:
    kind: str            # "unshare" (util-linux), "direct" (unshare(2) from the jail) or "none"
    detail: str          # what is in force, or why nothing is
    userns: bool = False
    switch_uid: bool = False

    @property
    def active(self) -> bool:
        return self.kind != "none"

    def describe(self) -> str:
        return f"{self.kind}: {self.detail}"


def requested_mode() -> str:
    mode = os.environ.get("KERNELRAG_VERIFY_ISOLATION", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"KERNELRAG_VERIFY_ISOLATION={mode!r} is not one of {', '.join(MODES)}")
    return mode


def probe(mode: str | None = None) -> Isolation:
    """What isolation this machine gives the workers (tried for real, once per process and mode)."""
    return _probe(mode or requested_mode())


@functools.lru_cache(maxsize=None)
def _probe(mode: str) -> Isolation:
    plain = "rlimits and an allow-listed environment only; the candidate can read and write what this user can"
    if mode == "none":
        return Isolation("none", f"switched off (KERNELRAG_VERIFY_ISOLATION=none); {plain}")
    if not sys.platform.startswith("linux"):
        return Isolation("none", f"no Linux namespaces on {sys.platform}; {plain}")
    root = os.geteuid() == 0
    kinds = [k for k in ("unshare", "direct") if mode in ("auto", k)]
    if "unshare" in kinds and shutil.which("unshare") is None:
        kinds.remove("unshare")
    failures = []
    # run by root: workers as uid 65534 first; where that user cannot read the repo or the
    # interpreter (a checkout under /root), as root without capabilities
    for kind, switch in [(k, sw) for k in kinds for sw in ((True, False) if root else (False,))]:
        candidate = Isolation(kind, "", userns=not root, switch_uid=switch)
        argv = wrap(candidate, [sys.executable, "-P", "-c", PROBE], device="cpu", writable=[], cwd=None)
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=base_env("cpu", "/tmp"))
        except (OSError, subprocess.TimeoutExpired) as exc:
            failures.append(f"{kind}: {exc}")
            continue
        if out.returncode != 0:
            why = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1][:200]
            failures.append(f"{kind}{' as uid 65534' if switch else ''}: {why}")
            continue
        ns = "user,pid,net,mount,ipc,uts" if not root else "pid,net,mount,ipc,uts"
        who = "uid 65534" if switch else ("root" if root else "root of a user namespace")
        return Isolation(kind, f"{ns} namespaces; read-only view of the interpreter, site-packages and repo; "
                               f"private tmpfs; no network; rlimits; {who} without capabilities",
                         userns=not root, switch_uid=switch)
    tried = "; ".join(failures) or "util-linux unshare not found"
    return Isolation("none", f"namespaces not available here ({tried}); {plain}")


# what a worker needs, checked without importing torch (seconds): the package, torch, triton
PROBE = ("import importlib.util, os\n"
         "for name in ('kernelrag', 'torch', 'triton'):\n"
         "    spec = importlib.util.find_spec(name)\n"
         "    assert spec and os.access(spec.origin, os.R_OK), f'{name} is not readable in the sandbox'\n")


def readonly_paths(device: str) -> list[str]:
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
             "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
             sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             str(PACKAGE_ROOT)]
    paths += [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]]
    paths += [p for p in sys.path if p and os.path.isdir(p) and not p.startswith("/tmp")]
    if device == "cuda":
        paths += ["/usr/local/nvidia", "/sys", "/etc/nvidia"] + glob.glob("/usr/local/cuda*")
    home = str(Path.home())
    secret = [home, os.environ.get("KERNELRAG_HOME") or os.path.join(home, ".kernelrag")]
    out = []
    for p in paths:
        real = os.path.realpath(p)
        hides_secret = any(s == real or s.startswith(real.rstrip("/") + "/") for s in map(os.path.realpath, secret))
        if p and os.path.exists(p) and not hides_secret:
            out.append(os.path.abspath(p))
    return sorted(set(out))


def device_paths(device: str) -> list[str]:
    return sorted(glob.glob("/dev/nvidia*")) if device == "cuda" else []


def wrap(iso: Isolation, argv: list[str], *, device: str, writable: list[str], cwd: str | None,
         readable: list[str] = (), keep_caps: bool = False, env: dict[str, str] | None = None) -> list[str]:
    """``argv`` run inside the sandbox (unchanged when ``iso`` is not active)."""
    if not iso.active:
        return argv
    spec = {"mountpoint": str(mountpoint()), "readonly": readonly_paths(device), "writable": writable,
            "readable": list(readable), "devices": device_paths(device), "tmp_bytes": TMP_BYTES[device], "cwd": cwd,
            "limits": {**BASE_LIMITS, "fsize": FSIZE_BYTES[device]}, "keep_caps": keep_caps,
            "switch_uid": iso.switch_uid, "env": env or base_env(device, "/tmp")}
    if iso.kind == "direct":
        spec.update(direct=True, userns=iso.userns)
        return [sys.executable, "-I", str(JAIL), json.dumps(spec), "--", *argv]
    ns = ["--user", "--map-root-user"] if iso.userns else []
    return ["unshare", *ns, "--pid", "--fork", "--kill-child", "--net", "--mount", "--ipc", "--uts",
            sys.executable, "-I", str(JAIL), json.dumps(spec), "--", *argv]


@functools.lru_cache(maxsize=None)
def exchange_base() -> Path:
    """The folder holding every verification's exchange folders (plans, outputs) of this process."""
    base = Path(tempfile.mkdtemp(prefix="kernelrag-x-"))
    base.chmod(0o755)
    (base / ".root").mkdir()
    atexit.register(shutil.rmtree, base, True)
    return base


def mountpoint() -> Path:
    return exchange_base() / ".root"


def hand_over(path: Path, iso: Isolation) -> None:
    """Let the sandboxed workers (uid 65534 when run by root) write into ``path``."""
    path.chmod(0o755)
    if iso.active and iso.switch_uid:
        os.chown(path, NOBODY, NOBODY)


def candidate_limits(device: str) -> dict[str, int]:
    """The rlimits a candidate process sets on itself before importing the candidate."""
    limits = {"core": 0, "fsize": FSIZE_BYTES[device], "cpu": CANDIDATE_CPU_S}
    if device in HOST_MEMORY_BYTES:
        limits["as"] = HOST_MEMORY_BYTES[device]
    return limits
