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

No torch here; ``build`` imports triton only in the probe child.
"""
from __future__ import annotations

import os
from pathlib import Path

MAX_BYTES = 32 << 20           # the helper and its metadata are well under a megabyte
MAX_FILES = 256


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
