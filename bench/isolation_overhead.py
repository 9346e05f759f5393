"""The time OS isolation adds to one verification (issue 11's measurement; a benchmark, not a test).

    python bench/isolation_overhead.py                       # CPU: writes bench/results/isolation-cpu-DATE.json
    PYTHONPATH=. python3 bench/isolation_overhead.py --device cuda --trials 3   # on a GPU machine

Each trial is a fresh interpreter that verifies one honest kernel twice (a copy with a
nonce in its kernel each time, so its Triton compile is cold in both modes): the first
verification starts the worker processes (reference server, and on CPU the zygote),
the second reuses them, as a session that verifies many candidates does. Trials
alternate between ``KERNELRAG_VERIFY_ISOLATION=none`` and ``auto`` so that load on a
shared machine hits both alike. Reported per mode: median, interquartile range and
every sample, for the cold (first) and warm (second) verification, and the medians'
difference, with each verdict phase's median per mode (where the difference sits: on the
H200 on 2026-12-01 the cold one was +4.5 s, unexplained). Needs only the standard library
in this process.
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

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "fixtures" / "verify" / "tasks" / "relu.py"
KERNEL = ROOT / "tests" / "fixtures" / "verify" / "positive" / "relu.py"
MARK = "ISOLATION-TRIAL "

# Each verification gets a kernel of its own: a nonce comment inside the @triton.jit body
# changes Triton's cache key, so both modes compile it cold, as a new candidate is. Without
# it the H200 run of 2026-12-02 put +1.1-1.4 s of "isolation overhead" in the compile
# phase: with isolation off the second verification found the first one's kernel in the
# shared Triton cache, in the sandbox each candidate's private /tmp starts empty.
DRIVER = """
import atexit, json, os, re, shutil, sys, tempfile, time
from kernelrag.verify import verify
out = []
source = open(sys.argv[2]).read()
folder = tempfile.mkdtemp(prefix="isolation-trial-")
atexit.register(shutil.rmtree, folder, True)
for k in range(2):
    nonce = os.urandom(8).hex()
    path = os.path.join(folder, f"candidate_{k}.py")
    with open(path, "w") as f:
        f.write(re.sub(r"(@triton\\.jit\\ndef [^\\n]*:\\n)", lambda m: m.group(1) + f"    # trial {nonce}\\n", source, count=1))
    t0 = time.perf_counter()
    v = verify(sys.argv[1], path, device=sys.argv[3])
    out.append({"wall_s": time.perf_counter() - t0, "status": v.status, "isolation": v.isolation,
                "torch": v.torch_version, "triton": v.triton_version, "phases_s": v.phases.seconds, "reused": v.phases.reused})
try:   # a launcher compiled per kernel signature is built again in each sandbox's private cache
    from triton.backends.nvidia import driver as nvidia_driver
    out[0]["launcher"] = "per-signature" if hasattr(nvidia_driver, "make_launcher") else "generic"
except Exception:
    out[0]["launcher"] = None
print("ISOLATION-TRIAL " + json.dumps(out))
"""


def trial(mode: str, device: str) -> list[dict]:
    env = dict(os.environ, KERNELRAG_VERIFY_ISOLATION=mode, PYTHONPATH=str(ROOT))
    env.pop("KERNELRAG_VERIFY_NO_ZYGOTE", None)
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(TASK), str(KERNEL), device], env=env,
                          capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"trial in mode {mode} gave no result: {proc.stderr[-2000:]}")


def stats(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [samples[0]] * 3
    return {"median_s": statistics.median(samples), "iqr_s": q[2] - q[0], "min_s": min(samples),
            "max_s": max(samples), "samples_s": [round(s, 3) for s in samples]}


def unshare_version() -> str | None:
    try:
        return subprocess.run(["unshare", "--version"], capture_output=True, text=True).stdout.strip() or None
    except OSError:
        return None


def summarise(runs: dict[str, list[list[dict]]], today: str, device: str) -> dict:
    result = {"date": today, "device": device, "trials": len(runs["auto"]),
              "task": str(TASK.relative_to(ROOT)), "candidate": str(KERNEL.relative_to(ROOT)),
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                          "root": os.geteuid() == 0},
              "versions": {"torch": runs["auto"][0][0]["torch"], "triton": runs["auto"][0][0]["triton"],
                           "unshare": unshare_version(), "triton_launcher": runs["auto"][0][0].get("launcher")},
              "isolation": {mode: runs[mode][0][0]["isolation"] for mode in runs},
              "statuses": sorted({r["status"] for mode in runs for t in runs[mode] for r in t}),
              # what each sandboxed verification found ready (native-builds: launchers served)
              "reused_auto": [[r.get("reused") for r in t] for t in runs["auto"]]}
    for phase, index in (("cold", 0), ("warm", 1)):
        per = {mode: stats([t[index]["wall_s"] for t in runs[mode]]) for mode in runs}
        per["overhead_median_s"] = round(per["auto"]["median_s"] - per["none"]["median_s"], 3)
        # where the difference sits: each verdict phase's median per mode, and auto minus none
        names = sorted({k for mode in runs for t in runs[mode] for k in (t[index].get("phases_s") or {})})
        medians = {mode: {k: statistics.median((t[index].get("phases_s") or {}).get(k, 0.0) for t in runs[mode])
                          for k in names} for mode in runs}
        per["phases_median_s"] = medians
        per["phases_overhead_s"] = {k: round(medians["auto"][k] - medians["none"][k], 3) for k in names}
        result[phase] = per
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="start no pair of trials that would not end inside this many seconds")
    parser.add_argument("--out", help="results file (default bench/results/isolation-DEVICE-DATE.json)")
    args = parser.parse_args()
    today = datetime.date.today().isoformat()
    out = Path(args.out or ROOT / "bench" / "results" / f"isolation-{args.device}-{today}.json")
    runs: dict[str, list[list[dict]]] = {"none": [], "auto": []}
    started = time.monotonic()
    result: dict = {}
    for i in range(args.trials):
        # a pair is both modes; the file is rewritten after each pair, so a call cut short
        # still leaves every completed pair on disk
        elapsed_s = time.monotonic() - started
        if i and elapsed_s + elapsed_s / i > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s: stopping after {i} pair(s)", flush=True)
            break
        for mode in (("none", "auto") if i % 2 == 0 else ("auto", "none")):
            runs[mode].append(trial(mode, args.device))
            print(f"trial {i + 1}/{args.trials} {mode}: " + ", ".join(
                f"{r['wall_s']:.2f} s {r['status']}" for r in runs[mode][-1]), flush=True)
        result = summarise(runs, today, args.device)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("cold", "warm")}, indent=1))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
