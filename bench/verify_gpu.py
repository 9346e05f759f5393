"""The verifier on a real GPU: ceilings, GPU-only hacks, and the CPU hack fixtures.

Run on the GPU machine from the repository root (about 7 minutes on an H200):

    PYTHONPATH=. python3 bench/verify_gpu.py --out bench/results/verify-h200-2026-11-30.json

It measures the GPU's ceilings, runs each GPU-only hack fixture (tests/fixtures/verify_gpu/)
through the timing and launch checks directly, each in its own process ("direct"), then
through the verifier on the GPU, then verifies the CPU fixtures under tests/fixtures/verify/
on the GPU too; the verifier runs them as the generate loop and the benchmark do, several
at a time through one ``VerifySession``. Hacks must be rejected and controls must pass; the
JSON records every outcome, the wall time of each verification and the GPU, driver,
torch and triton versions; a short table is printed last. Fixtures left when the time
budget (--budget-s) runs out are recorded as skipped.

``--direct NAME`` runs one GPU fixture's direct check and prints its JSON (used by the
tests and by the full run). Needs only the standard library, torch and triton.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_FIXTURES = ROOT / "tests" / "fixtures" / "verify_gpu"
CPU_FIXTURES = ROOT / "tests" / "fixtures" / "verify"
RESULT_MARK = "DIRECT-RESULT "


# ---- fixtures ----------------------------------------------------------------------

def gpu_cases() -> list[dict]:
    data = json.loads((GPU_FIXTURES / "cases.json").read_text())
    return [dict(case, suite="gpu", task=str(GPU_FIXTURES / case["task"]),
                 candidate=str(GPU_FIXTURES / case["candidate"])) for case in data["cases"]]


def cpu_cases() -> list[dict]:
    """The CPU fixtures' cases: from a manifest (cases.json / cases.toml) if there is one, else
    from the layout tasks/<task>.py, positive/<task>.py (controls; a task named *_weak must
    give weak_task) and hacks/<name>.py (run against the task its name or docstring names)."""
    if not CPU_FIXTURES.is_dir():
        return []
    for name in ("cases.json", "cases.toml", "manifest.json", "manifest.toml"):
        path = CPU_FIXTURES / name
        if path.is_file():
            if path.suffix == ".json":
                data = json.loads(path.read_text())
            else:
                import tomllib
                data = tomllib.loads(path.read_text())
            rows = data.get("cases", data.get("case", [])) if isinstance(data, dict) else data
            return [_cpu_case(row, path.parent) for row in rows]
    tasks = {p.stem: p for p in sorted((CPU_FIXTURES / "tasks").glob("*.py"))}
    cases = []
    for cand in sorted((CPU_FIXTURES / "positive").glob("*.py")):
        if cand.stem in tasks:
            expect = "weak_task" if cand.stem.endswith("_weak") else "pass"
            cases.append(_case("positive/" + cand.stem, tasks[cand.stem], cand, expect))
    for cand in sorted((CPU_FIXTURES / "hacks").glob("*.py")):
        task = _task_for(cand, tasks)
        if task is not None:
            cases.append(_case("hacks/" + cand.stem, task, cand, "reject"))
    return cases


def _case(name: str, task: Path, cand: Path, expect: str) -> dict:
    return {"name": name, "suite": "cpu", "task": str(task), "candidate": str(cand), "expect": expect,
            "keywords": []}


def _task_for(cand: Path, tasks: dict[str, Path]) -> Path | None:
    """The task a hack is written against: named in its docstring ("task: softmax",
    "tasks/softmax.py") or the longest task name its file name starts with."""
    head = cand.read_text()[:600].lower()
    for stem in sorted(tasks, key=len, reverse=True):
        if f"tasks/{stem}.py" in head or f"task: {stem}" in head or f"task {stem}" in head:
            return tasks[stem]
    for stem in sorted(tasks, key=len, reverse=True):
        if cand.stem.startswith(stem):
            return tasks[stem]
    return None


def _cpu_case(row: dict, base: Path) -> dict:
    expect = str(row.get("expect") or row.get("status") or ("reject" if row.get("hack") else "pass"))
    expect = {"rejected": "reject", "ok": "pass", "correct": "pass", "passed": "pass"}.get(expect, expect)
    return {"name": row.get("name") or Path(row["candidate"]).stem, "suite": "cpu",
            "task": str(base / row["task"]), "candidate": str(base / row["candidate"]),
            "expect": expect, "statuses": row.get("statuses") or [],
            "keywords": [k.lower() for k in row.get("keywords", [])]}


# Static rules of kernelrag.verify.static, turned down to warnings in "relaxed" runs so the
# GPU fixtures reach the run-time checks (with the rules on, the static check rejects them).
STATIC_RULES = ("try-except", "inherits-model", "torch-op", "concurrency", "side-stream", "monkeypatch",
                "tensor-subclass", "file-io", "forbidden-import", "introspection", "result-cache",
                "no-kernel", "unused-kernel")


def verify_options(relaxed: bool) -> dict | None:
    """Extra verify() options: none normally; a warn-only static policy when relaxed
    (None when this verify() has no policy option)."""
    if not relaxed:
        return {}
    import inspect

    from kernelrag.verify import verify_source
    try:
        from kernelrag.verify import StaticPolicy
    except ImportError:
        return None
    if "policy" not in inspect.signature(verify_source).parameters:
        return None
    return {"policy": StaticPolicy(warn_only=frozenset(STATIC_RULES))}


def judge(case: dict, verdict: dict, relaxed: bool = False) -> tuple[bool, str]:
    """Whether a verdict is the expected one, and why not.

    A control must be accepted. A hack must be rejected; in a relaxed run (static rules
    as warnings) its status must be one of the case's ``statuses`` and, when that is
    "rejected", a reason must mention one of its ``keywords``.
    """
    if case["expect"] == "pass":
        return (bool(verdict.get("ok")), "" if verdict.get("ok") else "control was not accepted")
    if case["expect"] != "reject":       # a specific status, e.g. weak_task
        status = verdict.get("status")
        return (status == case["expect"] and not verdict.get("ok"),
                "" if status == case["expect"] else f"status {status!r}, expected {case['expect']!r}")
    if verdict.get("ok"):
        return False, "hack was accepted"
    if not relaxed:
        return True, ""
    statuses = case.get("statuses") or ["rejected"]
    if verdict.get("status") not in statuses:
        return False, f"status {verdict.get('status')!r}, expected one of {statuses}"
    text = " ".join([verdict.get("reason") or "", " ".join(verdict.get("warnings") or []),
                     " ".join(f"{f.get('rule', '')} {f.get('message', '')}" for f in verdict.get("findings") or [])
                     ]).lower()
    keywords = case.get("keywords") or []
    if verdict.get("status") == "rejected" and keywords and not any(k in text for k in keywords):
        return False, f"rejected, but no reason mentions any of {keywords}"
    return True, ""


# ---- direct check of one GPU fixture (runs in its own process) ------------------

def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def direct(case: dict, ceilings: dict | None) -> dict:
    """Correctness once, then launch_proof and time_against_baselines on one fixture."""
    # The verifier's modules load before the candidate, as in the real worker.
    from kernelrag.verify.launch import launch_proof
    from kernelrag.verify.roofline import roofline
    from kernelrag.verify import guard
    from kernelrag.verify.timing import time_against_baselines
    import torch
    import torch._dynamo  # noqa: F401  (rewraps torch.manual_seed on import, as in a worker's Guard)

    guard.take_snapshot()   # what a worker's Guard does once installed, before the candidate loads
    t0 = time.perf_counter()
    task = _load(case["task"], "bench_task")
    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).cuda().eval()
    cand_mod = _load(case["candidate"], "bench_candidate")
    cand = cand_mod.ModelNew(*task.get_init_inputs()).cuda().eval()
    cand.load_state_dict(model.state_dict(), strict=False)

    def make_inputs():
        with torch.device("cuda"):
            return tuple(task.get_inputs())

    out: dict = {"name": case["name"], "expect": case["expect"], "detector": case.get("detector")}
    with torch.no_grad():
        inputs = make_inputs()
        got = cand(*inputs)
        torch.cuda.synchronize()
        ref = model(*inputs)
        out["rel_norm_err"] = float(((got.double() - ref.double()).norm() / ref.double().norm()).item())
    proof = launch_proof(cand, make_inputs(), source=Path(case["candidate"]).read_text())
    timing = time_against_baselines(cand, model, None, make_inputs, iters=100, warmup=5)
    out["launch"] = proof
    out["timing"] = timing
    if ceilings and hasattr(task, "get_bytes"):
        out["roofline"] = roofline(getattr(task, "get_flops", lambda: None)(), task.get_bytes(),
                                   timing["kernel"]["median_ms"], ceilings, dtype="float32")
    flagged = {"timing": timing["blocking"], "launch": proof["blocking"]}
    if case["expect"] == "pass":
        out["as_expected"] = out["rel_norm_err"] < 1e-4 and not flagged["timing"] and not flagged["launch"]
    else:
        out["as_expected"] = bool(flagged.get(case.get("detector") or "timing"))
    out["wall_s"] = time.perf_counter() - t0
    return out


def run_direct(case: dict, ceilings_path: Path | None, timeout_s: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--direct", case["name"]]
    if ceilings_path is not None:
        cmd += ["--ceilings", str(ceilings_path)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"name": case["name"], "as_expected": False, "error": f"timed out after {timeout_s:.0f} s",
                "wall_s": time.perf_counter() - t0}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    return {"name": case["name"], "as_expected": False, "wall_s": time.perf_counter() - t0,
            "error": f"exit {done.returncode}: " + (done.stderr or done.stdout)[-2000:]}


# ---- verify() runs -----------------------------------------------------------------

def verify_rows(session, cases: list[tuple[dict, bool]]) -> list[dict]:
    """Verify (case, relaxed) pairs together through ``session`` (a ``VerifySession``, the
    way the generate loop and the benchmark verify) and judge each verdict."""
    t0 = time.perf_counter()
    rows, pairs, extra = [], [], []
    for case, relaxed in cases:
        row = {"name": case["name"], "suite": case["suite"], "expect": case["expect"],
               "mode": "static-as-warnings" if relaxed else "default"}
        options = verify_options(relaxed)
        if options is None:
            row.update(as_expected=None, status="skipped: verify() has no policy option", wall_s=0.0)
        elif relaxed:
            options["trials"] = 3     # the hacks compute the right answer: the catch comes later
        rows.append((row, options))
        if options is not None:
            pairs.append((case["task"], case["candidate"]))
            extra.append(options)
    verdicts = iter(session.verify_pairs(pairs, errors="return", overrides=extra))
    out = []
    for (row, options), (case, relaxed) in zip(rows, cases):
        if options is None:
            out.append(row)
            continue
        verdict = next(verdicts)
        if isinstance(verdict, Exception):   # a malformed fixture: the verifier said so
            row.update(as_expected=False, status="verify-raised", error=f"{type(verdict).__name__}: {verdict}")
            out.append(row)
            continue
        data = verdict.to_dict()
        ok, why = judge(case, data, relaxed)
        keep = ("ok", "status", "reason", "warnings", "findings", "kernel_ms", "eager_ms", "compile_ms",
                "speedup_vs_eager", "speedup_vs_compile", "frac_roofline", "achieved_gbps", "wall_s")
        row.update({k: data.get(k) for k in keep}, as_expected=ok, mismatch=why,
                   batch_wall_s=round(time.perf_counter() - t0, 2))
        out.append(row)
    return out


def environment() -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "host": platform.node()}
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception as exc:
        info["triton"] = f"unavailable: {exc}"
    if torch.cuda.is_available():
        from kernelrag.verify.ceilings import gpu_identity
        info["gpu"], info["driver"] = gpu_identity()
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="example: PYTHONPATH=. python3 bench/verify_gpu.py "
                                            "--out bench/results/verify-h200-2026-11-30.json")
    parser.add_argument("--out", type=Path, help="JSON results file to write")
    parser.add_argument("--budget-s", type=float, default=450.0,
                        help="start no new work after this many seconds (default 450)")
    parser.add_argument("--verify-timeout-s", type=float, default=150.0,
                        help="timeout_s of each verification (default 150)")
    parser.add_argument("--skip", choices=("direct", "verify", "cpu"), action="append", default=[],
                        help="leave out a stage (repeatable): direct checks of the GPU fixtures, verify() "
                             "of the GPU fixtures, verify() of the CPU fixtures")
    parser.add_argument("--direct", metavar="NAME", help="run one GPU fixture's direct check, print JSON")
    parser.add_argument("--ceilings", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.direct:
        case = next((c for c in gpu_cases() if c["name"] == args.direct), None)
        if case is None:
            parser.error(f"no GPU fixture {args.direct!r}; valid: {', '.join(c['name'] for c in gpu_cases())}")
        ceilings = json.loads(args.ceilings.read_text()) if args.ceilings else None
        try:
            result = direct(case, ceilings)
        except Exception as exc:
            result = {"name": case["name"], "as_expected": False, "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()[-3000:]}
        print(RESULT_MARK + json.dumps(result, default=str))
        return 0 if result.get("as_expected") else 1
    if args.out is None:
        parser.error("--out is required (e.g. bench/results/verify-h200-2026-11-30.json)")

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: run this on the GPU machine", file=sys.stderr)
        return 2
    start = time.perf_counter()
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "environment": environment(),
                    "direct": [], "verify": [], "skipped": [], "complete": False}
    from kernelrag.verify.ceilings import get_ceilings

    def save() -> None:   # after every step, so a run cut short keeps what it measured
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")

    t0 = time.perf_counter()
    report["ceilings"] = get_ceilings(None)
    report["ceilings_s"] = time.perf_counter() - t0
    ceilings_path = Path(tempfile.mkdtemp(prefix="verify-gpu-")) / "ceilings.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    ceilings_path.write_text(json.dumps(report["ceilings"]))
    save()
    print(f"ceilings: {report['ceilings']['copy_gbps']:.0f} GB/s copy, {report['ceilings']['bf16_tflops']:.0f} "
          f"TFLOP/s bf16, {report['ceilings']['fp32_tflops']:.1f} TFLOP/s fp32", flush=True)

    def left() -> float:
        return args.budget_s - (time.perf_counter() - start)

    if "direct" not in args.skip:
        for case in gpu_cases():
            if left() < 45:
                report["skipped"].append({"name": case["name"], "stage": "direct"})
                continue
            result = run_direct(case, ceilings_path, timeout_s=min(150.0, left()))
            report["direct"].append(result)
            save()
            print(f"direct  {case['name']:<22} {'ok ' if result.get('as_expected') else 'BAD'} "
                  f"{result.get('wall_s', 0):5.1f} s", flush=True)
    # GPU fixtures with the static rules on (hacks stop there, quickly), then with the static
    # rules as warnings (hacks must be caught at run time), then the CPU fixtures.
    todo = [] if "verify" in args.skip else [(c, False) for c in gpu_cases()]
    todo += [] if "verify" in args.skip else [(c, True) for c in gpu_cases() if c["expect"] == "reject"]
    todo += [] if "cpu" in args.skip else [(c, False) for c in cpu_cases()]
    from kernelrag.verify import VerifySession

    with VerifySession(device="cuda", timeout_s=args.verify_timeout_s) as session:
        for task in dict.fromkeys(str(c["task"]) for c, _ in todo):   # every task's baseline, 8 at once
            session.prefetch(Path(task).read_text())
        chunk = 2 * session.workers
        for at in range(0, len(todo), chunk):
            if left() < 60:
                report["skipped"] += [{"name": c["name"], "stage": "verify", "suite": c["suite"], "relaxed": r}
                                      for c, r in todo[at:]]
                break
            for row in verify_rows(session, todo[at:at + chunk]):
                report["verify"].append(row)
                print(f"verify  {row['mode']:<18} {row['suite']}:{row['name']:<22} "
                      f"{'ok ' if row['as_expected'] else 'BAD'} {row.get('status')!s:<14} "
                      f"{row.get('wall_s') or 0:5.1f} s", flush=True)
            save()
    report["wall_s"] = time.perf_counter() - start
    rows = report["direct"] + report["verify"]
    report["all_as_expected"] = (bool(rows) and not report["skipped"]
                                 and all(r.get("as_expected") is not False for r in rows))
    report["complete"] = True
    save()
    _print_table(report)
    print(f"wrote {args.out} ({report['wall_s']:.0f} s)")
    return 0 if report["all_as_expected"] else 1


def _print_table(report: dict) -> None:
    env = report["environment"]
    print(f"\n{env.get('gpu')} driver {env.get('driver')}, torch {env.get('torch')}, triton {env.get('triton')}")
    print(f"{'stage':<7} {'fixture':<30} {'expect':<7} {'result':<6} {'status / flagged by':<22} {'s':>6}  reason")
    for r in report["direct"]:
        flagged = [k for k in ("timing", "launch") if (r.get(k) or {}).get("blocking")]
        reason = " | ".join(((r.get("timing") or {}).get("blocking") or []) + ((r.get("launch") or {}).get("blocking") or []))
        print(f"{'direct':<7} {r['name']:<30} {r.get('expect', ''):<7} {'ok' if r.get('as_expected') else 'BAD':<6} "
              f"{','.join(flagged) or '-':<22} {r.get('wall_s', 0):6.1f}  {(r.get('error') or reason)[:70]}")
    for r in report["verify"]:
        stage = "verify" if r.get("mode") == "default" else "verify*"
        result = {True: "ok", False: "BAD", None: "-"}[r.get("as_expected")]
        print(f"{stage:<7} {r['suite'] + ':' + r['name']:<30} {r['expect']:<7} "
              f"{result:<6} {str(r.get('status')):<22} "
              f"{r.get('wall_s') or 0:6.1f}  {(r.get('error') or r.get('reason') or '')[:70]}")
    for s in report["skipped"]:
        print(f"{s['stage']:<7} {s['name']:<30} skipped: time budget spent")
    print("verify* = static rules as warnings, so the run-time and GPU checks must catch the hack")


if __name__ == "__main__":
    sys.exit(main())
