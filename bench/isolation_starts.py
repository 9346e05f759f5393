"""Where a sandboxed worker's start goes, step by step (issue 11's cold figure; a benchmark).

    PYTHONPATH=. python3 bench/isolation_starts.py --device cuda --trials 3 --out OUT.json

A cold one-shot verification starts two sandboxed servers (the zygote and the reference
server); on the H200 on 2026-12-02 their starts cost +1.2 s and +1.3 s over the same
starts without isolation. Each trial here starts one fresh interpreter per mode, with an
empty Triton cache, that times its own steps on the system-wide monotonic clock:

  spawn -> main     the wrapper (unshare, the jail's mounts and rlimits) and Python's start
  import torch, import triton
  cuda              ``torch.cuda.init()`` and a first allocation (the driver's start)
  helper            Triton's driver helper (a host-compiler build into the empty cache)
  launcher          one tiny ``@triton.jit`` kernel compiled and launched (its C launcher)

Modes, alternated trial by trial so that load hits all alike: ``none`` (rlimits and the
allow-listed environment only), ``sandbox`` (the verifier's own wrapper, as in force) and,
when run by root, ``sandbox-root`` (the same namespaces and mounts, without the switch to
uid 65534). Needs only the standard library here; the children import torch and triton.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelrag.verify import isolation  # noqa: E402

CHILD = r"""
import json, sys, time
stamps = {"main": time.monotonic()}
import torch
stamps["import_torch"] = time.monotonic()
import triton, triton.language
stamps["import_triton"] = time.monotonic()
if sys.argv[1] == "cuda":
    torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
    stamps["cuda"] = time.monotonic()
    triton.runtime.driver.active.utils
    stamps["helper"] = time.monotonic()
    from kernelrag.verify.worker import warm_gpu
    warm_gpu()
    stamps["launcher"] = time.monotonic()
print("STARTS " + json.dumps(stamps), flush=True)
"""
STEPS = ("main", "import_torch", "import_triton", "cuda", "helper", "launcher")


def one(mode: str, device: str) -> dict[str, float]:
    scratch = Path(tempfile.mkdtemp(prefix="kernelrag-starts-"))
    scratch.chmod(0o777)
    try:
        iso = isolation.probe()
        if mode == "none":
            env = isolation.base_env(device, str(scratch))
            argv = [sys.executable, "-P", "-c", CHILD, device]
        else:
            iso = replace(iso, switch_uid=False) if mode == "sandbox-root" else iso
            env = isolation.base_env(device, "/tmp")
            argv = isolation.wrap(iso, [sys.executable, "-P", "-c", CHILD, device], device=device,
                                  writable=[], cwd=None, env=env)
        spawned = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        ended = time.monotonic()
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("STARTS ")), None)
        if line is None:
            return {"error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1][:300]}
        stamps = json.loads(line[len("STARTS "):])
        steps, before = {}, spawned
        for name in STEPS:
            if name in stamps:
                steps[name] = round(stamps[name] - before, 4)
                before = stamps[name]
        steps["exit"] = round(ended - before, 4)
        steps["total"] = round(ended - spawned, 4)
        return steps
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    iso = isolation.probe()
    modes = ["none"] + (["sandbox"] if iso.active else []) + (["sandbox-root"] if iso.active and iso.switch_uid else [])
    samples: dict[str, list[dict]] = {m: [] for m in modes}
    start = time.monotonic()
    one("none", args.device)          # warm the page cache: not recorded
    for trial in range(args.trials):
        for mode in modes[trial % len(modes):] + modes[:trial % len(modes)]:
            if time.monotonic() - start > args.budget_s:
                break
            samples[mode].append(one(mode, args.device))
            print(mode, json.dumps(samples[mode][-1]), flush=True)
    medians = {m: {k: round(statistics.median(s[k] for s in rows if k in s), 4)
                   for k in (*STEPS, "exit", "total") if any(k in s for s in rows)}
               for m, rows in samples.items() if rows and all("error" not in s for s in rows)}
    result = {"date": datetime.date.today().isoformat(), "device": args.device,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "root": os.geteuid() == 0},
              "isolation": iso.describe(), "trials": args.trials, "samples": samples, "medians_s": medians,
              "overhead_s": {m: {k: round(v - medians["none"].get(k, 0.0), 4) for k, v in med.items()}
                             for m, med in medians.items() if m != "none" and "none" in medians}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["overhead_s"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
