"""Verification throughput: where the time goes, and how many candidates a minute.

Run on the GPU machine from the repository root (at most about 8 minutes):

    PYTHONPATH=. python3 bench/throughput_gpu.py --device cuda --out-dir bench/results

and on a CPU (correctness only, Triton interpreter) the same way with ``--device cpu``.

Candidates: every seed skill's ``kernel.py`` and ``alternatives/*.py`` against the
skill's own ``reference.py``, plus each kernel once more after the next skill's
candidates (a fresh process again; its task's references and torch.compile baseline are
then cached), all in one ``VerifySession``, fed to it in chunks of three per worker with
the next chunk's baselines compiling ahead (``VerifySession.prefetch``). Skills with CUDA
C++ (``*_cuda``) come last. No new chunk is started after ``--budget-s``; the results
file is rewritten after every chunk, so a run cut short still leaves its numbers.

``--suite`` measures the suite bench/tasks/ instead of the seed skills: each task through
the generate loop as ``kernelrag bench`` runs it (up to ``--rounds`` drafts), in one
session once the loop's ``Parts`` carries a ``verifier``.

``--before N`` first verifies N kernels the way a single ``kernelrag verify`` does
(``verify()``: new trial seeds each time, torch.compile timed beside the candidate),
for comparison. On a GPU the GPU-only hack fixtures (tests/fixtures/verify_gpu/) then go
through one session too, strict and with the static rules as warnings (as
bench/verify_gpu.py runs them), and are judged the same way: hacks rejected, the
control accepted. ``--compile-baseline interleaved`` and ``--workers 1`` switch off the
cached compile baseline and the overlap, to compare.

Recorded (``throughput-<device>-<date>.json`` in ``--out-dir``): every verdict's status,
wall time, per-phase seconds and what was reused; the median time of a task's first
candidate and of candidates with the task's baselines cached, in the batch (queued behind
the other workers) and alone (``--latency`` kernels one at a time afterwards); sustained candidates per
minute over the batch (candidates that could be checked here: not_checkable ones are
listed but left out of the rates); per-phase medians and totals; GPU, torch and triton versions.
Needs only the standard library, torch and triton.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelrag.verify import Verdict, VerifySession, verify  # noqa: E402

TARGETS = {"cached_median_s": 6.0, "first_of_task_median_s": 15.0, "candidates_per_minute": 10.0}
ALONE_S = 60.0            # the kernels-alone stage, after the batch


def skill_groups(skills_dir: Path, only: list[str]) -> list[dict]:
    """One group per seed skill: its reference, kernel and alternatives (CUDA C++ skills last)."""
    groups = []
    for kernel in sorted(skills_dir.glob("*/*/kernel.py")):
        folder = kernel.parent
        reference = folder / "reference.py"
        if not reference.is_file() or (only and folder.name not in only):
            continue
        tolerance = _tolerance(folder / "skill.toml")
        cands = [("kernel", kernel)] + [(f"alternatives/{p.name}", p)
                                         for p in sorted((folder / "alternatives").glob("*.py"))]
        groups.append({"skill": folder.name, "reference": reference, "candidates": cands,
                       "tolerance": tolerance, "cuda_cpp": "load_inline" in kernel.read_text()})
    return sorted(groups, key=lambda g: (g["cuda_cpp"], g["skill"]))


def pipeline(groups: list[dict], repeat: bool) -> list[dict]:
    """Every candidate of every group in order; each group's kernel once more after the
    next group's candidates (its task's references and baseline then cached)."""
    items, again = [], None
    for group in groups:
        items += [{"group": group, "variant": variant, "path": path} for variant, path in group["candidates"]]
        if again is not None:
            items.append(again)
        again = {"group": group, "variant": "kernel again", "path": group["candidates"][0][1]} if repeat else None
    return items + ([again] if again is not None else [])


def _tolerance(path: Path) -> dict | None:
    if not path.is_file():
        return None
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except ValueError:
        return None
    tol = data.get("tolerance")
    return dict(tol) if isinstance(tol, dict) and tol else None


def row(skill: str, variant: str, v, *, first: bool) -> dict:
    phases = v.phases.seconds if v.phases else {}
    return {"skill": skill, "variant": variant, "status": v.status, "ok": v.ok, "timed": v.timed,
            "first_of_task": first, "wall_s": v.wall_s, "phases_s": phases,
            "reused": list(v.phases.reused) if v.phases else [],
            "kernel_ms": v.kernel_ms.median_ms if v.kernel_ms else None,
            "eager_ms": v.eager_ms.median_ms if v.eager_ms else None,
            "compile_ms": v.compile_ms.median_ms if v.compile_ms else None,
            "speedup_vs_eager": v.speedup_vs_eager, "speedup_vs_compile": v.speedup_vs_compile,
            "compile_source": v.compile_source, "reason": (v.reason or "")[:200]}


def summarize(rows: list[dict], batch_wall_s: float) -> dict:
    def med(values: list[float]) -> float | None:
        return round(statistics.median(values), 3) if values else None

    ran = [r for r in rows if r["status"] != "not_checkable"]      # checked here, not refused up front
    first = [r["wall_s"] for r in ran if r["first_of_task"]]
    cached = [r["wall_s"] for r in ran if not r["first_of_task"]]
    names = sorted({k for r in rows for k in r["phases_s"]})
    return {"candidates": len(rows), "checked": len(ran), "batch_wall_s": round(batch_wall_s, 2),
            "candidates_per_minute": round(60.0 * len(ran) / batch_wall_s, 2) if batch_wall_s > 0 else None,
            "batch_s_per_candidate": round(batch_wall_s / len(ran), 3) if ran else None,
            "first_of_task_median_s": med(first), "cached_median_s": med(cached),
            "median_s": med([r["wall_s"] for r in ran]),
            "phase_median_s": {k: med([r["phases_s"].get(k, 0.0) for r in rows]) for k in names},
            "phase_total_s": {k: round(sum(r["phases_s"].get(k, 0.0) for r in rows), 2) for k in names},
            "statuses": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})}}


def gpu_hacks(args: argparse.Namespace) -> dict:
    """The GPU hack fixtures through one session: strict, then relaxed (static rules as warnings)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("verify_gpu_bench", ROOT / "bench" / "verify_gpu.py")
    vg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vg)
    cases, rows, t0 = vg.gpu_cases(), [], time.monotonic()
    with VerifySession(device=args.device, timeout_s=args.timeout_s, workers=args.workers,
                       compile_baseline=args.compile_baseline) as session:
        for relaxed in (False, True):
            options = vg.verify_options(relaxed)
            if options is None:
                continue
            verdicts = session.verify_pairs([(c["task"], c["candidate"]) for c in cases], errors="return",
                                            overrides=[dict(options) for _ in cases])
            for case, v in zip(cases, verdicts):
                data = v.to_dict() if isinstance(v, Verdict) else {"status": "error", "reason": str(v)}
                passed, why = vg.judge(case, data, relaxed=relaxed)
                rows.append({"name": case["name"], "relaxed": relaxed, "expect": case["expect"],
                             "status": data.get("status"), "passed": passed, "why": why,
                             "reason": (data.get("reason") or "")[:300], "wall_s": data.get("wall_s"),
                             "compile_source": data.get("compile_source")})
                print(f"hack {case['name']}{' (relaxed)' if relaxed else ''}: {data.get('status')} "
                      f"{'as expected' if passed else 'UNEXPECTED: ' + why}", flush=True)
    return {"rows": rows, "all_as_expected": all(r["passed"] for r in rows),
            "wall_s": round(time.monotonic() - t0, 1)}


def suite(args: argparse.Namespace, start: float) -> dict:
    """The suite bench/tasks/ through the generate loop as the benchmark runs it
    (``kernelrag.bench.runner.solve``), every verification in one session when the loop's
    ``Parts`` has a ``verifier`` field to hand it (``session_used`` says whether it had)."""
    import dataclasses

    from kernelrag.bench.runner import bench_parts, solve
    from kernelrag.config import load_settings
    from kernelrag.task import Task

    settings = load_settings(device=args.device, verify_timeout_s=args.timeout_s)
    parts, rows, skipped = bench_parts(settings), [], []
    tasks = sorted((ROOT / "bench" / "tasks").glob("*.py"))
    t0 = time.monotonic()
    with VerifySession(device=args.device, measure_time=args.device == "cuda", workers=args.workers,
                       timeout_s=args.timeout_s, compile_baseline=args.compile_baseline) as session:
        hooked = "verifier" in {f.name for f in dataclasses.fields(parts)}
        if hooked:
            parts.verifier = session
        for i, task in enumerate(tasks):
            if time.monotonic() - start > args.budget_s:
                skipped = [t.stem for t in tasks[i:]]
                break
            t1 = time.monotonic()
            entry = solve(Task.of(task), parts, device=args.device, rounds=args.rounds)
            verdict = entry.get("verdict")
            rows.append({"task": task.stem, "status": entry.get("status"), "attempts": len(entry["attempts"]),
                         "wall_s": round(time.monotonic() - t1, 3),
                         "phases_s": ((verdict or {}).get("phases") or {}).get("seconds") or {},
                         "reused": ((verdict or {}).get("phases") or {}).get("reused") or []})
            print(f"suite [{i + 1}/{len(tasks)}] {task.stem}: {entry.get('status')} "
                  f"({len(entry['attempts'])} verification(s), {rows[-1]['wall_s']:.1f} s)", flush=True)
    wall = time.monotonic() - t0
    verifications = sum(r["attempts"] for r in rows)
    return {"session_used": hooked, "rows": rows, "skipped": skipped, "tasks": len(rows),
            "verifications": verifications, "wall_s": round(wall, 1),
            "verifications_per_minute": round(60.0 * verifications / wall, 2) if wall > 0 else None,
            "statuses": {st: sum(r["status"] == st for r in rows) for st in sorted({str(r["status"]) for r in rows})}}


def environment() -> dict:
    import torch
    import triton

    env = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
           "host": platform.node(), "cpu_count": os.cpu_count(),
           "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=400.0, help="start no new task after this many seconds")
    ap.add_argument("--before", type=int, default=2, help="kernels verified one by one with verify() first")
    ap.add_argument("--workers", type=int, default=None, help="candidates in flight (VerifySession default)")
    ap.add_argument("--only", action="append", default=[], help="skill folder name(s)")
    ap.add_argument("--no-repeat", action="store_true", help="do not verify each kernel a second time")
    ap.add_argument("--timeout-s", type=float, default=120.0, help="per stage of one verification")
    ap.add_argument("--compile-baseline", choices=("cached", "interleaved"), default="cached")
    ap.add_argument("--suite", action="store_true",
                    help="instead of the seed skills, the suite bench/tasks/ with the offline drafter's candidates")
    ap.add_argument("--rounds", type=int, default=2, help="--suite: drafts tried per task")
    ap.add_argument("--latency", type=int, default=8,
                    help="after the batch, this many kernels verified one at a time (latency without queueing)")
    ap.add_argument("--hacks", choices=("auto", "on", "off"), default="auto",
                    help="the GPU hack fixtures (auto: on a GPU only; on a CPU their timing checks cannot run)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    date = dt.datetime.now(dt.timezone.utc)
    out = args.out_dir / f"throughput-{'suite-' if args.suite else ''}{args.device}-{date:%Y-%m-%d}.json"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    groups = skill_groups(ROOT / "skills", [n for item in args.only for n in item.split(",") if n])
    timed = args.device == "cuda"
    report = {"date": date.strftime("%Y-%m-%dT%H:%M:%SZ"), "device": args.device, "environment": environment(),
              "targets": TARGETS, "options": {k: str(v) for k, v in vars(args).items()}, "before": None, "session": None, "skipped": [], "done": False}

    def save() -> None:
        out.write_text(json.dumps(report, indent=2) + "\n")

    before_rows = []
    for group in groups[:max(0, args.before)]:
        t0 = time.monotonic()
        try:
            v = verify(group["reference"], group["candidates"][0][1], device=args.device, measure_time=timed,
                       tolerance=group["tolerance"], timeout_s=args.timeout_s)
        except Exception:   # noqa: BLE001 - recorded; the rest still runs
            report.setdefault("errors", []).append({"skill": group["skill"], "error": traceback.format_exc()[-3000:]})
            continue
        before_rows.append(row(group["skill"], "kernel", v, first=True))
        print(f"before {group['skill']}: {v.status} {time.monotonic() - t0:.1f} s; {v.phases.line()}", flush=True)
    if before_rows:
        walls = [r["wall_s"] for r in before_rows]
        report["before"] = {"mode": "verify() per candidate: new seeds, torch.compile timed beside each",
                            "rows": before_rows, "median_s": round(statistics.median(walls), 3)}
    save()
    if args.hacks == "on" or args.hacks == "auto" and timed:
        try:
            report["gpu_hacks"] = gpu_hacks(args)
        except Exception:   # noqa: BLE001 - recorded; the throughput part still runs
            report["gpu_hacks"] = {"error": traceback.format_exc()[-3000:]}
            print(report["gpu_hacks"]["error"], flush=True)
        save()
    if args.suite:
        try:
            report["suite"] = suite(args, start)
        except Exception:   # noqa: BLE001 - recorded
            report["suite"] = {"error": traceback.format_exc()[-3000:]}
            print(report["suite"]["error"], flush=True)
        groups = []
    rows: list[dict] = []
    items = pipeline(groups, repeat=not args.no_repeat)
    firsts: dict[str, dict] = {}
    for it in items:                           # a task's first candidate in the run's order
        firsts.setdefault(it["group"]["skill"], it)
    batch_start = time.monotonic()
    with VerifySession(device=args.device, measure_time=timed, workers=args.workers,
                       timeout_s=args.timeout_s, compile_baseline=args.compile_baseline) as session:
        chunk = 3 * session.workers          # enough in flight to keep every worker busy
        for at in range(0, len(items), chunk):
            if time.monotonic() - start > args.budget_s:
                report["skipped"] = sorted({it["group"]["skill"] for it in items[at:]})
                print(f"budget of {args.budget_s:.0f} s spent; {len(items) - at} candidate(s) left", flush=True)
                break
            batch, ahead = items[at:at + chunk], items[at + chunk:at + 2 * chunk]
            for it in ahead:                  # the next tasks' baselines compile while these run
                session.prefetch(it["group"]["reference"].read_text(), tolerance=it["group"]["tolerance"])
            pairs = [(it["group"]["reference"], it["path"]) for it in batch]
            try:
                results = session.verify_pairs(pairs, errors="return",
                                               overrides=[{"tolerance": it["group"]["tolerance"]} for it in batch])
            except Exception:   # noqa: BLE001 - a failure of the verifier itself: record it, go on
                report.setdefault("errors", []).append({"error": traceback.format_exc()[-3000:]})
                print(report["errors"][-1]["error"], flush=True)
                continue
            for it, v in zip(batch, results):
                skill = it["group"]["skill"]
                if isinstance(v, Exception):
                    report.setdefault("errors", []).append({"skill": skill, "variant": it["variant"],
                                                            "error": str(v)[:300]})
                    continue
                rows.append(row(skill, it["variant"], v, first=it is firsts.get(skill)))
                print(f"[{len(rows)}/{len(items)}] {skill} {it['variant']}: {v.status} {v.wall_s:.1f} s; "
                      f"{v.phases.line()}", flush=True)
            report["session"] = {"rows": rows, **summarize(rows, time.monotonic() - batch_start)}
            save()
        if report["session"] and args.latency > 0:
            report["alone"] = alone(args, session, groups, {r["skill"] for r in rows})
            save()
    report["done"] = True
    report["wall_s"] = round(time.monotonic() - start, 1)
    report["environment"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    save()
    s = report["session"] or report.get("suite") or {}
    if "verifications" in s:
        s = {**s, "candidates": s["verifications"], "candidates_per_minute": s["verifications_per_minute"]}
    summary = {k: s.get(k) for k in ("candidates", "candidates_per_minute", "first_of_task_median_s",
                                     "cached_median_s", "median_s", "statuses")}
    summary["cached_median_alone_s"] = (report.get("alone") or {}).get("cached_median_s")
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")
    return 0


def alone(args: argparse.Namespace, session: VerifySession, groups: list[dict], seen: set[str]) -> dict:
    """Latency without queueing: kernels of tasks the batch has seen (their references and
    torch.compile baselines cached), verified one at a time in the same session, each
    after its started processes are ready. The batch's per-candidate times include waiting
    behind the other workers for the GPU; these do not."""
    rows, own_start = [], time.monotonic()
    for group in [g for g in groups if g["skill"] in seen][:args.latency]:
        # its own 60 s after the batch: on the H200 on 2026-12-02 the batch, the hack
        # fixtures and the cold baselines used the whole budget and no kernel ran alone
        if time.monotonic() - own_start > ALONE_S:
            break
        session.wait_warm(60.0)
        v = session.verify_pairs([(group["reference"], group["candidates"][0][1])], errors="return",
                                 overrides=[{"tolerance": group["tolerance"]}])[0]
        if isinstance(v, Exception):
            continue
        rows.append(row(group["skill"], "kernel alone", v, first=False))
        print(f"alone {group['skill']}: {v.status} {v.wall_s:.1f} s; {v.phases.line()}", flush=True)
    walls = [r["wall_s"] for r in rows if r["status"] != "not_checkable"]
    return {"mode": "one candidate at a time, baselines cached, processes started ahead", "rows": rows,
            "cached_median_s": round(statistics.median(walls), 3) if walls else None,
            "phase_median_s": summarize(rows, 1.0)["phase_median_s"] if rows else {}}


if __name__ == "__main__":
    raise SystemExit(main())
