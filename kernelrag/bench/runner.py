"""The benchmark runner: every task goes through the generate loop users run.

    PYTHONPATH=. python3 -m kernelrag.bench bench/tasks --device cuda \
        --results bench/results/h200-2026-11-29.json --budget-s 540

Per task it records whether a candidate was found, the verdict (correctness checks,
kernel / eager / torch.compile medians with spread, speedups, achieved rates and
their fraction of the measured ceilings) and a recommendation: where the kernel
loses to the better baseline, it says to use that baseline instead.

It resumes: tasks already in the results file are skipped, and the file is rewritten
(atomically) after every task, so an interrupted or budget-limited run loses nothing.
Run it again until it prints "complete". Any directory of KernelBench-format files
works (e.g. a KernelBench checkout's ``level1/``); tasks it cannot handle are listed
with the reason.

Each task runs through ``kernelrag.generate.Loop``, the loop ``kernelrag generate``
runs: the offline drafter, or the LLM drafter when one is configured; the memory
round with ``--memory``. It writes back graph evidence only (never a learned skill,
never an optimization log). Without a knowledge store it needs only stdlib, torch,
triton and networkx, so it runs on a GPU machine that has nothing else.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import platform
import re
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from kernelrag.bench.admission import MemoryAdmission
from kernelrag.bench.report import finish_entry, summarize
from kernelrag.config import Settings, load_settings
from kernelrag.errors import ConfigError
from kernelrag.draft.llm import LLMClient
from kernelrag.generate import Loop, Parts, resolve_device
from kernelrag.memory.graph import ReasoningGraph
from kernelrag.memory.skills import SkillLibrary
from kernelrag.memory.writeback import append_evidence, evidence_record, kept_round
from kernelrag.patterns import op_pattern
from kernelrag.retrieve import Retriever
from kernelrag.task import Task
from kernelrag.types import GenerateResult, Round
from kernelrag.verify.ceilings import get_ceilings
from kernelrag.verify.session import VerifySession, gpu_workers

# a run stopped by its budget is a job that did not finish: 1, like any failed job (re-run to resume)
EXIT_COMPLETE, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 1


def today() -> str:
    return _dt.date.today().isoformat()


def _atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def load_results(path: Path) -> dict[str, Any]:
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSON ({exc}); move it away to start a fresh run") from None
    return {"tasks": {}, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def machine_info(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
                            "host_cpu_count": os.cpu_count()}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, sm_count=props.multi_processor_count,
                    gpu_memory_bytes=props.total_memory, cuda=torch.version.cuda)
    return info


def machine_slug(machine: dict[str, Any]) -> str:
    """What a results file is named after: the GPU's model ("h200", "h100"), "cuda" for one
    without a model number in its name, "cpu" without a GPU."""
    if machine.get("device") != "cuda":
        return "cpu"
    model = re.search(r"\b([A-Z]+\d{2,4})\b", str(machine.get("gpu") or ""))
    return model.group(1).lower() if model else "cuda"


def task_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.glob("*.py") if not q.name.startswith("_"))
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(f"no such task file or directory: {p}; give task files or folders")
    return out


def bench_parts(settings: Settings) -> Parts:
    """The loop's parts as the benchmark uses them: the skill library, the reasoning graph
    (evidence goes there), the LLM when one is configured, no knowledge store."""
    notes: list[str] = []
    library = SkillLibrary(settings)
    try:
        graph = ReasoningGraph(settings)
    except Exception as exc:        # a corrupt graph file must not stop the benchmark
        graph = None
        notes.append(f"reasoning graph not used: {exc}")
    llm = None
    if settings.llm_enabled:
        llm = LLMClient(settings)
    retriever = Retriever(settings, library=library, graph=graph, store=None, notes=notes)
    return Parts(settings=settings, library=library, retriever=retriever, graph=graph, llm=llm, notes=[])


def _method(r: Round) -> str:
    if r.drafter == "llm":
        return "llm"
    return "skill" if r.skill else "codegen"


def entry_from(result: GenerateResult, entry: dict[str, Any]) -> dict[str, Any]:
    """The results-file entry of one generate run: every attempt, the kept (or last) verdict."""
    for r in result.rounds:
        if r.verdict is None:
            if not entry["attempts"]:
                entry.update(status="no_candidate", reason=r.error or result.reason)
            continue
        entry["attempts"].append({"skill": r.skill, "method": _method(r), "drafter": r.drafter,
                                  "transformations": list(r.transformations),
                                  "status": r.verdict.status, "reason": r.verdict.reason})
    # the kernel the run kept (not always the last one tried), else the last one verified
    chosen = kept_round(result.rounds) or next((r for r in reversed(result.rounds) if r.verdict is not None), None)
    if chosen is not None:
        entry.update(skill=chosen.skill, method=_method(chosen), transformations=list(chosen.transformations))
    if result.verdict is not None:
        vd = result.verdict.to_dict()
        entry.update(status=vd.get("status"), reason=vd.get("reason"), verdict=vd)
    elif "status" not in entry:
        entry.update(status="no_candidate", reason=result.reason)
    return entry


def solve(task: Task, parts: Parts, *, device: str, rounds: int, use_memory: bool = False,
          log_id: str | None = None) -> dict[str, Any]:
    """One task through the generate loop (graph evidence only written back)."""
    pattern = op_pattern(task)
    entry: dict[str, Any] = {"pattern": pattern.signature, "category": pattern.category,
                             "pattern_known": pattern.known, "attempts": []}
    if not pattern.known:
        entry.update(status="unhandled", reason=f"op pattern unknown: {pattern.reason}")
        return entry
    result = Loop(parts, task, backend="triton", max_rounds=rounds, device=device, use_memory=use_memory,
                  write_back="evidence", log_id=log_id).run()
    entry_from(result, entry)
    return entry


def record_negative_evidence(entry: dict[str, Any], gpu: str, evidence_path: Path | None, log_id: str) -> None:
    """A kernel that loses to torch.compile is negative evidence for its transformations."""
    sc = entry.get("speedup_vs_compile")
    if not entry.get("correct") or sc is None or sc >= 1.0 or not entry.get("transformations"):
        return
    verdict = entry.get("verdict") or {}
    record = evidence_record(verdict, pattern=entry["pattern"], transformations=entry["transformations"], gpu=gpu,
                             outcome="slower", log_id=log_id, date=today(), kernel_ms=entry.get("kernel_ms"),
                             detail=f"bench task {entry['task']}: {sc:.2f}x vs torch.compile",
                             variant=f"bench/{entry['task']}")
    entry["negative_evidence"] = True
    if evidence_path is not None:
        append_evidence(evidence_path, [record])


class _TakeTurns:
    """The session as task threads see it: each holds ``lock`` while it drafts, traces and
    writes back (torch.fx and torch.export patch globals, so those never run at once) and
    lets go only while its candidate is verified, which is where the time goes."""

    def __init__(self, session: VerifySession, lock: threading.Lock):
        self.session, self.lock = session, lock

    def verify_source(self, *args: Any, **kwargs: Any):
        self.lock.release()
        try:
            return self.session.verify_source(*args, **kwargs)
        finally:
            self.lock.acquire()

    def verify_sources(self, *args: Any, **kwargs: Any) -> list:
        self.lock.release()
        try:
            return self.session.verify_sources(*args, **kwargs)
        finally:
            self.lock.acquire()


def _solve_one(path: Path, args: argparse.Namespace, parts: Parts, device: str, lock: threading.Lock) -> dict:
    t0 = time.perf_counter()
    log_id = f"bench-{today()}-{path.stem}"
    with lock:
        try:
            entry = solve(Task.of(path), parts, device=device, rounds=args.rounds, use_memory=args.memory,
                          log_id=log_id)
        except Exception as exc:      # a task file kernelrag cannot even load: listed, not dropped
            entry = {"status": "unhandled", "reason": f"{type(exc).__name__}: {exc}"[:400], "attempts": []}
    entry.update(task=path.stem, path=str(path), wall_s=round(time.perf_counter() - t0, 2), log_id=log_id)
    return entry


def _run_tasks(args: argparse.Namespace, tasks: list[Path], results: dict[str, Any], results_path: Path,
               parts: Parts, device: str, session: VerifySession | None = None,
               known: dict[str, float] | None = None, admission: MemoryAdmission | None = None) -> int:
    """Each task not yet in ``results`` through the loop, ``args.parallel`` at a time; the
    results file is rewritten after each. Tasks are started while the budget allows one
    more typical task (``_typical_s``), or the next task's own time in the ``--longest-first``
    file, and while its GPU memory fits beside the tasks in flight (``admission``: the first
    task in the queue that fits starts); the baselines of the next ``parallel`` tasks are
    compiled ahead. A task left untimed because the GPU's memory was held beside it runs
    once more at the end with nothing beside it (``MemoryAdmission.run_alone``)."""
    start, walls = time.perf_counter(), []
    admission = admission or MemoryAdmission(None)
    retries = [t for t in tasks if _short_of_memory(results["tasks"].get(t.stem))]   # a resumed run's
    for path in retries:
        admission.run_alone(path)
    todo = [t for t in tasks if t.stem not in results["tasks"]] + retries
    run_log = {"started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "parallel": max(1, args.parallel), "tasks": 0, "wall_s": 0.0}
    results.setdefault("runs", []).append(run_log)   # one per invocation: a resumed suite's wall is their sum
    print(f"{len(tasks)} tasks, {len(todo)} to run, {max(1, args.parallel)} at a time ({admission.describe()}), "
          f"results -> {results_path}", flush=True)
    lock = threading.Lock()
    task_parts = parts
    if session is not None:
        task_parts = dataclasses.replace(parts, verifier=_TakeTurns(session, lock))
    pending: dict[Future, Path] = {}
    queue, done, stopped = list(todo), 0, False
    known = known or {}            # each task's time in an earlier run (``--longest-first``)
    with ThreadPoolExecutor(max_workers=max(1, args.parallel), thread_name_prefix="kernelrag-bench") as pool:
        while queue or pending:
            while queue and len(pending) < max(1, args.parallel) and not stopped:
                i = admission.pick(queue)
                if i is None:             # no task left fits beside those in flight: wait for one
                    break
                elapsed = time.perf_counter() - start
                expected = known.get(queue[i].stem) or _typical_s(walls)
                if args.budget_s and elapsed + expected > args.budget_s:
                    print(f"budget of {args.budget_s:.0f} s reached after {elapsed:.0f} s; {len(queue)} tasks "
                          "left: run again to resume", flush=True)
                    stopped = True
                    break
                path = queue.pop(i)
                admission.started(path)
                if session is not None:       # the next tasks' baselines compile while these run
                    for ahead in queue[:max(1, args.parallel)]:
                        session.prefetch(ahead.read_text())
                pending[pool.submit(_solve_one, path, args, task_parts, device, lock)] = path
            if not pending:
                break
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                path = pending.pop(future)
                admission.finished(path)
                entry = future.result()
                done += 1
                if path.stem in admission.alone:
                    entry["ran_alone"] = True
                elif _short_of_memory(entry) and max(1, args.parallel) > 1:
                    admission.run_alone(path)          # kept as it is until its run alone replaces it
                    queue.append(path)
                    todo.append(path)
                    print(f"{path.stem}: untimed, the GPU's memory held by the tasks beside it; "
                          "it runs once more at the end, alone", flush=True)
                walls.append(entry["wall_s"])
                run_log.update(tasks=run_log["tasks"] + 1, wall_s=round(time.perf_counter() - start, 1))
                if session is not None and session.resolved == "cuda":
                    run_log["gpu_gate"] = session.gate.usage()   # held alone / shared / by no one
                _record(entry, results, results_path, args)
                _print_entry(entry, done, len(todo))
    return EXIT_INCOMPLETE if stopped else EXIT_COMPLETE


def _short_of_memory(entry: dict[str, Any] | None) -> bool:
    """A result left untimed because other processes held the GPU's memory, not yet run alone."""
    return bool(entry) and not entry.get("ran_alone") and \
        (entry.get("verdict") or {}).get("untimed_cause") == "gpu_memory"


def longest_first(tasks: list[Path], walls: dict[str, float]) -> list[Path]:
    """``tasks`` ordered by their wall time in an earlier run (``earlier_walls``), longest first,
    those it does not list ahead of all (their time is unknown). With a few tasks in flight, the
    suite then ends on short tasks; in file order its GEMM tasks ran side by side and one of them
    ran on alone at the end."""
    return sorted(tasks, key=lambda t: -walls.get(t.stem, float("inf")))


def earlier_walls(earlier: Path) -> dict[str, float]:
    """Each task's wall seconds in an earlier results file: the order of ``--longest-first``,
    and what the budget expects of each task (a run ordered longest first would otherwise
    stop early, expecting every task left to be as long as the long ones behind it)."""
    if not earlier.is_file():
        raise ConfigError(f"--longest-first {earlier}: no such results file; pass an earlier run's JSON")
    return {name: float(t.get("wall_s") or 0.0) for name, t in load_results(earlier).get("tasks", {}).items()}


def _typical_s(walls: list[float]) -> float:
    """What one more task is expected to take: the 75th percentile of the tasks so far (at
    least 20 s). The slowest (a GEMM task's configuration search) would stop a run with
    half its budget left; a task cut off at the end is run again on resume."""
    if not walls:
        return 20.0
    ranked = sorted(walls)
    return max(20.0, ranked[min(len(ranked) - 1, (3 * len(ranked)) // 4)])


def _record(entry: dict[str, Any], results: dict[str, Any], results_path: Path, args: argparse.Namespace) -> None:
    finish_entry(entry)
    v = entry.get("verdict") or {}
    if v.get("gpu"):
        results["machine"].setdefault("driver", v.get("driver"))
    record_negative_evidence(entry, results["machine"].get("gpu", results["machine"].get("device")),
                             args.evidence, entry.pop("log_id"))
    results["tasks"][entry["task"]] = entry
    results["summary"] = summarize(results)
    _atomic_write_json(results_path, results)


def _print_entry(entry: dict[str, Any], i: int, n: int) -> None:
    se, sc = entry.get("speedup_vs_eager"), entry.get("speedup_vs_compile")
    speed = f"eager x{se:.2f} compile x{sc:.2f}" if se and sc else ""
    print(f"[{i}/{n}] {entry['task']:28s} {entry['status']:14s} {speed:28s} {entry['wall_s']:6.1f}s", flush=True)


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    if args.parallel is None:
        args.parallel = gpu_workers() if device == "cuda" else 1
    if args.parallel < 1:
        raise ConfigError(f"--parallel {args.parallel} must be at least 1")
    settings = load_settings(device=device, verify_timeout_s=args.timeout_s)
    tasks = task_files([Path(p) for p in args.tasks])
    if args.only:
        wanted = set(args.only.split(","))
        tasks = [t for t in tasks if t.stem in wanted]
    known = earlier_walls(args.longest_first) if args.longest_first is not None else {}
    tasks = longest_first(tasks, known) if known else tasks
    machine = machine_info(device)
    results_path = Path(args.results or f"bench/results/{machine_slug(machine)}-{today()}.json")
    results = load_results(results_path)
    results["machine"] = machine
    results["suite"] = [str(t) for t in tasks]
    parts = bench_parts(settings)
    if device == "cuda":     # the ceilings every verdict's roofline fractions were computed against
        results["machine"]["ceilings"] = get_ceilings(settings.cache_dir)
    with VerifySession(device=device, timeout_s=settings.verify_timeout_s, cache_dir=settings.cache_dir,
                       workers=args.parallel if device == "cuda" else None) as session:
        # warm processes and each task's compile baseline, kept across tasks
        admission = MemoryAdmission(results["machine"].get("gpu_memory_bytes") if device == "cuda" else None)
        if _run_tasks(args, tasks, results, results_path, parts, device, session, known,
                      admission) == EXIT_INCOMPLETE:
            return EXIT_INCOMPLETE
    results["summary"] = summarize(results)
    _atomic_write_json(results_path, results)
    s = results["summary"]
    print(f"complete: {s['n_tasks']} tasks, correct {s['correct_rate']:.0%}", flush=True)
    return EXIT_COMPLETE


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="python -m kernelrag.bench", description=__doc__.split("\n")[0])
    p.add_argument("tasks", nargs="*", default=["bench/tasks"], help="task files or directories (default bench/tasks)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--results", help="results JSON (default bench/results/<gpu model, e.g. h200, or cpu>-<date>.json); "
                        "resumed if present")
    p.add_argument("--only", help="comma-separated task names")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the generate loop per task (default 2)")
    p.add_argument("--memory", action="store_true",
                   help="answer from a verified skill of the task's pattern first, as `kernelrag generate` does")
    p.add_argument("--timeout-s", type=float, default=240.0, help="verifier timeout per candidate")
    p.add_argument("--budget-s", type=float, default=0.0, help="stop before this many seconds; re-run to resume")
    p.add_argument("--parallel", type=int, default=None,
                   help="tasks in flight at once (default: the GPU session's workers; 1 on a CPU)")
    p.add_argument("--longest-first", type=Path, default=None, metavar="RESULTS",
                   help="start the tasks that took longest in this earlier results file first (tasks it lacks "
                        "before them): the run then ends on short tasks instead of one long one alone")
    p.add_argument("--evidence", type=Path, default=None,
                   help="append negative evidence (kernels slower than torch.compile) to this JSONL")
    return p


def main(argv: list[str] | None = None) -> int:
    from kernelrag.errors import KernelRAGError

    try:
        return run(build_parser().parse_args(argv))
    except KernelRAGError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
