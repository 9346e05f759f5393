"""Triton's driver helper, built once by a trusted process and planted into each sandboxed
candidate's private cache.

A sandboxed candidate starts with an empty private /tmp, which holds its Triton cache. Its
first launch would so build Triton's driver helper (``cuda_utils``, a C extension compiled
with the host compiler, about a second) on the candidate's clock, every time; a sibling
without isolation finds the helper in the zygote's shared cache. Sharing one writable cache
between sandboxed candidates would let one plant a module that the next one loads, so the
sandbox keeps its private cache and gets a copy of what a trusted process built instead:

* the zygote's probe child (which runs no candidate code) builds the helper into the
  zygote's own cache folder (``build``);
* the zygote reads that folder into memory before it serves any request (``capture``), so
  nothing a later child writes can reach the copy;
* each sandboxed child writes the copy into its private cache after its namespaces and
  user are in force (``plant``), as files it owns and may change only for itself.

Triton 3.6 also compiles a launcher per kernel signature (``__triton_launcher``, about
1.5 s of the host compiler each; on the H200 on 2026-12-02 that was the whole +1.9 s a warm
sandboxed verification cost). Those are shared the same way, through a trusted build:

* in each sandboxed child, Triton's native builds go through ``build_hook`` (Triton's own
  ``knobs.build.impl`` hook). A build whose inputs (C source, name, directories,
  libraries) hash to a key in the planted copy takes that file; any other is built as
  before, and its inputs are written to the child's exchange folder (``WISHES``). A build
  finished after a child was forked reaches it in its exchange folder instead;
* when the child has ended, the zygote reads and checks those inputs (``wanted``), and
  a builder child, sandboxed like a candidate, compiles them with the host compiler
  only: nothing it builds is loaded or run (``build_wanted``);
* the zygote keeps a file only under the key it computed itself from the inputs
  (``harvest``). The copy is so content-addressed: a child gets a file for its own build
  only when its inputs are exactly those the file was compiled from, so a hostile build
  can reach only a child that asked for that very hostile source.

No torch here; ``build`` imports triton only in the probe child.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any

MAX_BYTES = 64 << 20           # the helper and a few hundred launchers (~100 KB each)
MAX_FILES = 1024
BUILDS = "kernelrag-builds"     # under TRITON_CACHE_DIR: <key>.so, planted for build_hook
WISHES = "builds-wanted.json"   # in a child's exchange folder: the builds it made itself
MAX_WISHES = 8
MAX_SOURCE_CHARS = 512 << 10
MAX_BUILT_BYTES = 16 << 20
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_KEY = re.compile(r"^[0-9a-f]{64}$")
_LOCK = threading.Lock()
COUNTS = {"served": 0, "built": 0}   # this process's native builds through build_hook (reported in the verdict)


def build() -> None:
    """In a trusted process with a CUDA context: make Triton build and load its driver
    helper into ``TRITON_CACHE_DIR``. A failure leaves the cache as it was."""
    try:
        import triton

        triton.runtime.driver.active.utils          # noqa: B018 - building it is the point
        triton.runtime.driver.active.get_current_target()
    except Exception:   # noqa: BLE001 - the children then build it themselves, as before
        pass


def capture(cache_dir: str | os.PathLike | None) -> dict[str, bytes]:
    """The regular files under ``cache_dir``, by relative path; empty when there is none or
    it is over the limits (then every child builds its own, which is slower, never wrong)."""
    if not cache_dir or not os.path.isdir(cache_dir):
        return {}
    root, seed, total = Path(cache_dir), {}, 0
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        total += path.stat().st_size
        if total > MAX_BYTES or len(seed) >= MAX_FILES:
            return {}
        seed[path.relative_to(root).as_posix()] = path.read_bytes()
    return seed


def plant(seed: dict[str, bytes], cache_dir: str | os.PathLike | None) -> int:
    """Write ``seed`` under ``cache_dir`` (created if missing); the number of files written.
    Paths that would leave the folder are skipped."""
    if not seed or not cache_dir:
        return 0
    root = Path(cache_dir).resolve()
    written = 0
    for relative, data in seed.items():
        target = (root / relative).resolve()
        if root not in target.parents:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written += 1
    return written


# ---- native builds shared by content ------------------------------------------------------

def build_key(wish: dict[str, Any]) -> str:
    """The content address of one native build: its source, name, directories and libraries,
    with the interpreter's extension suffix (the compiler and Python are the zygote's)."""
    digest = hashlib.sha256()
    for part in (wish["name"], wish.get("suffix", ".c"), wish["src"], *wish["library_dirs"], "|", *wish["include_dirs"], "|",
                 *wish["libraries"], "|", str(sysconfig.get_config_var("EXT_SUFFIX"))):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()


def _compile(name: str, src_path: str, srcdir: str, library_dirs, include_dirs, libraries) -> str:
    """Triton's own native build (the host compiler), where no hook is installed."""
    from triton.runtime import build as triton_build

    params = inspect.signature(triton_build._build).parameters
    extra = {"ccflags": []} if "ccflags" in params else {}
    if "language" in params:
        extra["language"] = "c++" if str(src_path).endswith((".cpp", ".cc", ".cxx")) else "c"
    return triton_build._build(name, src_path, srcdir, list(library_dirs), list(include_dirs), list(libraries), **extra)


def _plain_build(name: str, src_path: str, srcdir: str, library_dirs, include_dirs, libraries) -> str:
    """Triton's own build, with the hook out of the way."""
    from triton import knobs

    with _LOCK:
        hook, knobs.build.impl = knobs.build.impl, None
        try:
            return _compile(name, src_path, srcdir, library_dirs, include_dirs, libraries)
        finally:
            knobs.build.impl = hook


def install_build_hook(cache_dir: str | os.PathLike | None, wishes_path: str | os.PathLike) -> bool:
    """In a sandboxed child, before any candidate code: route Triton's native builds through
    the planted copy (False where this Triton has no build hook)."""
    try:
        from triton import knobs
    except ImportError:
        return False
    if not cache_dir or not hasattr(getattr(knobs, "build", None), "impl"):
        return False
    wishes_path = Path(wishes_path)
    # planted at fork; a build finished after the fork arrives in the exchange folder (late)
    seeded = (Path(cache_dir) / BUILDS, wishes_path.parent / BUILDS)

    def build_hook(name, src_path, srcdir, library_dirs, include_dirs, libraries):
        wish = {"name": str(name), "src": Path(src_path).read_text(), "suffix": Path(src_path).suffix, "library_dirs": [str(d) for d in library_dirs or []],
                "include_dirs": [str(d) for d in include_dirs or [] if d is not None],
                "libraries": [str(lib) for lib in libraries or []]}
        key = build_key(wish)
        so = os.path.join(srcdir, f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}")
        for folder in seeded:
            planted = folder / f"{key}.so"
            if planted.is_file() and not planted.is_symlink():
                shutil.copyfile(planted, so)
                COUNTS["served"] += 1
                return so
        COUNTS["built"] += 1
        built = _plain_build(name, src_path, srcdir, wish["library_dirs"], wish["include_dirs"], wish["libraries"])
        with _LOCK:
            try:
                known = json.loads(wishes_path.read_text()) if wishes_path.exists() else []
            except (OSError, ValueError):
                known = []
            if len(known) < MAX_WISHES and len(wish["src"]) <= MAX_SOURCE_CHARS:
                wishes_path.write_text(json.dumps(known + [wish]))
        return built

    knobs.build.impl = build_hook
    return True


def _strings(value: Any, most: int) -> bool:
    return isinstance(value, list) and len(value) <= most and all(isinstance(v, str) and len(v) <= 4096 for v in value)


def wanted(path: str | os.PathLike, known: set[str]) -> list[dict[str, Any]]:
    """The well-formed builds a child asked for in ``path`` (written by a candidate's process:
    checked field by field), less those whose key is in ``known``, each with its key."""
    try:
        if os.path.islink(path) or os.path.getsize(path) > MAX_WISHES * (MAX_SOURCE_CHARS + 65536):
            return []
        items = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    out = []
    for item in items[:MAX_WISHES] if isinstance(items, list) else []:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and _NAME.match(item["name"])
                and isinstance(item.get("src"), str) and len(item["src"]) <= MAX_SOURCE_CHARS
                and item.get("suffix", ".c") == ".c"             # Triton's launchers and helper are C
                and all(_strings(item.get(k), 32) for k in ("library_dirs", "include_dirs", "libraries"))):
            continue
        wish = {k: item[k] for k in ("name", "src", "library_dirs", "include_dirs", "libraries")}
        wish["suffix"] = item.get("suffix", ".c")
        key = build_key(wish)
        if key not in known and all(w["key"] != key for w in out):
            out.append({**wish, "key": key})
    return out


def build_wanted(wishes: list[dict[str, Any]], out_dir: str | os.PathLike) -> int:
    """In the builder (sandboxed, no candidate code, no hook): compile the wishes side by side
    and leave ``<key>.so`` in ``out_dir``; nothing is loaded. The number built."""
    from concurrent.futures import ThreadPoolExecutor

    def one(wish: dict[str, Any]) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            src_path = os.path.join(tmp, f"{wish['name']}{wish.get('suffix', '.c')}")
            Path(src_path).write_text(wish["src"])
            try:
                so = _compile(wish["name"], src_path, tmp, wish["library_dirs"], wish["include_dirs"],
                              wish["libraries"])
            except Exception:   # noqa: BLE001 - a build that fails is simply not shared
                return False
            shutil.copyfile(so, os.path.join(out_dir, f"{build_key(wish)}.so"))
            return True

    if not wishes:
        return 0
    with ThreadPoolExecutor(max_workers=min(4, len(wishes))) as pool:
        return sum(pool.map(one, wishes))


def harvest(out_dir: str | os.PathLike, wishes: list[dict[str, Any]]) -> dict[str, bytes]:
    """Seed entries from a builder's folder: only ``<key>.so`` for a key the caller computed
    from the wishes, as regular files under the size limit."""
    keys, found = {w["key"] for w in wishes}, {}
    for path in Path(out_dir).iterdir() if os.path.isdir(out_dir) else ():
        key = path.name[:-3] if path.name.endswith(".so") else ""
        if (_KEY.match(key) and key in keys and not path.is_symlink() and path.is_file()
                and path.stat().st_size <= MAX_BUILT_BYTES):
            found[f"{BUILDS}/{key}.so"] = path.read_bytes()
    return found
