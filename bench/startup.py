"""Cold-start wall time of ``kernelrag search`` and ``kernelrag ask`` (benchmark, not a test).

    python bench/startup.py --home ~/.kernelrag --trials 5 [--before /path/to/old/checkout]

Each trial is a fresh process (``python -m kernelrag ...``) against an ingested store,
timed from start to exit by the parent. With ``--before`` the same commands run from
another checkout too, interleaved trial by trial so both see the same machine load.
Writes medians, spread (min, max, IQR) and every trial to bench/results/startup-cpu-<date>.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {"search": ["search", "how do I avoid shared memory bank conflicts"],
            "ask": ["ask", "how do I avoid shared memory bank conflicts"]}


def one_run(code: Path, argv: list[str], home: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(code), "KERNELRAG_HOME": home, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kernelrag", *argv], env=env, cwd=code,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} from {code} failed ({done.returncode}): {done.stderr[-1000:]}")
    return elapsed


def summary(times: list[float]) -> dict:
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "iqr_s": round(q[2] - q[0], 3), "trials": len(times),
            "times_s": [round(t, 3) for t in times]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--home", required=True, help="KERNELRAG_HOME with the corpus ingested")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--before", type=Path, help="a checkout of the code to compare against")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    codes = {"after": ROOT, **({"before": args.before} if args.before else {})}
    times = {(label, name): [] for label in codes for name in COMMANDS}
    for label, code in codes.items():            # warm the page cache and the BM25 cache once
        for argv in COMMANDS.values():
            one_run(code, argv, args.home)
    for _ in range(args.trials):
        for name, argv in COMMANDS.items():
            for label, code in codes.items():
                times[(label, name)].append(one_run(code, argv, args.home))
    out = {"benchmark": "cold start of kernelrag search / ask, embedded Chroma store, corpus/ ingested",
           "date": datetime.date.today().isoformat(), "machine": {"cpus": os.cpu_count(), "python":
           platform.python_version(), "platform": platform.platform()},
           "note": "shared 2-core machine: other work ran alongside; before/after interleaved per trial",
           "results": {label: {name: summary(times[(label, name)]) for name in COMMANDS} for label in codes}}
    path = args.out or ROOT / "bench" / "results" / f"startup-cpu-{out['date']}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    for label in codes:
        print(label, {name: out["results"][label][name]["median_s"] for name in COMMANDS})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
