"""Measure the seed skills with the verifier and record what was measured.

    PYTHONPATH=. python3 -m kernelrag.bench.measure_skills --device cuda --write --skip-done
    PYTHONPATH=. python3 -m kernelrag.bench.measure_skills --device cuda --untimed --results out.jsonl
    PYTHONPATH=. python3 -m kernelrag.bench.measure_skills --device cuda --only softmax_online --results out.jsonl
    PYTHONPATH=. python3 -m kernelrag.bench.measure_skills --apply out.jsonl        # on another machine
    PYTHONPATH=. python3 -m kernelrag.bench.measure_skills --device cpu             # correctness only

For each skill: verify ``kernel.py`` against ``reference.py`` (and every
``alternatives/*.py``); with ``--write`` put the measured numbers into
skill.toml ``[provenance]`` (review.state "verified" when ok, "needs_review"
when not; an "approved" skill that still passes stays approved) and append one
evidence record per attempt to ``skills/evidence.jsonl`` (log id
``seed-<date>-<skill>``), which seeds the reasoning graph. An alternative is
"slower" when its kernel time is above the main kernel's in the same run.
``--results`` writes the same to a file that ``--apply`` replays elsewhere.

All verifications run in one ``VerifySession``: a skill's kernel and its alternatives
share the trial seeds, the references and the torch.compile baseline (timed once per
reference), and candidate processes start warm (``--compile-baseline interleaved``
times torch.compile beside every kernel instead).

Chunkable for short command limits: ``--only``, ``--skip-done`` (skills whose
measurement still holds on this GPU and torch/triton), ``--untimed`` (only skills
never timed: no kernel time in their provenance) and ``--budget-s`` (start
no new skill after that many seconds). ``--device cpu`` checks correctness
under the Triton interpreter and records nothing timed.
Imports only the standard library, torch and triton (through the verifier).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from kernelrag.config import load_settings
from kernelrag.errors import KernelRAGError
from kernelrag.memory.graph_query import outcome_from_verdict
from kernelrag.memory.skills import Skill, SkillLibrary, alternative_transformations
from kernelrag.memory.writeback import append_evidence, evidence_record, median_ms, provenance, review_state, value_of
from kernelrag.patterns import op_pattern
from kernelrag.verify import VerifySession

_TRACING = threading.Lock()     # torch.fx patches globals while it traces: one trace at a time


def _regime(skill: Skill) -> dict[str, Any]:
    try:
        with _TRACING:
            p = op_pattern(skill.reference_path)
    except Exception as exc:                     # the measurement does not depend on it
        print(f"  note: could not trace {skill.reference_path}: {exc}", file=sys.stderr)
        return {}
    if p.known and p.signature != skill.pattern:
        print(f"  warning: {skill.name}: skill.toml pattern {skill.pattern!r} but reference.py traces "
              f"as {p.signature!r}", file=sys.stderr)
    return {k: v for k, v in p.regime.items() if k != "note"}


def record(skill: Skill, v: Any, *, transformations: list[str], outcome: str, variant: str,
           regime: dict[str, Any], date: str) -> dict[str, Any]:
    """One evidence line (the reasoning graph's record format)."""
    dtypes = regime.get("dtypes") or skill.dtypes or ["unknown"]
    return evidence_record(v, pattern=skill.pattern, transformations=transformations, outcome=outcome,
                           dtype=dtypes[0], regime=regime, log_id=f"seed-{date[:10]}-{skill.name}",
                           skill=skill.name if variant == "kernel" else None, date=date,
                           detail=value_of(v, "reason") or "", variant=variant)


def measure(skill: Skill, verify_fn: Callable[..., Any], *, device: str, timeout_s: float,
            trials: int, alternatives: bool = True, date: str | None = None) -> dict[str, Any]:
    """Verify a skill (and its alternatives); returns a result dict (see ``apply``)."""
    date = date or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    timed = device != "cpu"
    options = dict(device=device, timeout_s=timeout_s, trials=trials, measure_time=timed)
    if skill.tolerance:
        options["tolerance"] = dict(skill.tolerance)
    try:
        main = verify_fn(str(skill.reference_path), str(skill.kernel_path), **options)
    except KernelRAGError as exc:                 # a malformed reference.py: the skill needs fixing
        main = {"ok": False, "status": "task_error", "reason": str(exc), "timed": False, "device": device}
    on_gpu = value_of(main, "device", device) != "cpu"
    regime = _regime(skill) if timed else {}
    result = {"skill": skill.name, "ok": bool(value_of(main, "ok")), "status": value_of(main, "status"),
              "reason": value_of(main, "reason"), "summary": _summary(main), "timed": bool(value_of(main, "timed")),
              "date": date, "provenance": None, "state": None, "records": [], "alternatives": []}
    main_ms = median_ms(main, "kernel_ms")
    outcome = outcome_from_verdict(main)
    if result["timed"] and outcome:
        result["records"].append(record(skill, main, transformations=skill.transformations,
                                        outcome=outcome, variant="kernel", regime=regime, date=date))
    if result["timed"] and result["ok"]:
        result["provenance"] = provenance(main, date)
        result["review"] = review_state(skill.review_state, main)
        result["state"] = result["review"]["state"]
    elif not result["ok"] and on_gpu and value_of(main, "status") != "not_checkable":
        result["state"] = "needs_review"
    for alt in (skill.alternatives() if alternatives else []):
        variant = f"alternatives/{alt.name}"
        try:
            tids = alternative_transformations(alt)
        except Exception as exc:
            result["alternatives"].append({"variant": variant, "status": "skipped", "summary": str(exc)})
            continue
        try:
            v = verify_fn(str(skill.reference_path), str(alt), **options)
        except KernelRAGError as exc:
            result["alternatives"].append({"variant": variant, "status": "task_error", "summary": str(exc)})
            continue
        alt_outcome = outcome_from_verdict(v)
        alt_ms = median_ms(v, "kernel_ms")
        if value_of(v, "ok") and alt_ms is not None and main_ms is not None and alt_ms > main_ms:
            alt_outcome = "slower"
        result["alternatives"].append({"variant": variant, "transformations": tids, "ok": bool(value_of(v, "ok")),
                                       "status": value_of(v, "status"), "outcome": alt_outcome,
                                       "summary": _summary(v)})
        if value_of(v, "timed") and alt_outcome and result["timed"]:
            result["records"].append(record(skill, v, transformations=tids, outcome=alt_outcome,
                                            variant=variant, regime=regime, date=date))
    return result


def _summary(v: Any) -> str:
    fn = getattr(v, "summary", None)
    return fn() if callable(fn) else f"{value_of(v, 'status')}: {value_of(v, 'reason')}"


def apply(library: SkillLibrary, result: dict[str, Any], evidence_path: Path) -> None:
    """Write one measured result into skill.toml and the evidence file."""
    if result.get("state"):
        library.record_measurement(result["skill"], result.get("provenance"), result["state"],
                                   (result.get("review") or {}).get("flags"))
    append_evidence(evidence_path, result.get("records", []))


def _session(**options: Any) -> VerifySession:
    """The verifier session for a run (a seam: tests put a stand-in here)."""
    return VerifySession(**options)


def never_timed(skill: Skill) -> bool:
    """No kernel time recorded in the skill's provenance."""
    return not (skill.provenance or {}).get("kernel_ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kernelrag.bench.measure_skills",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu", "auto"))
    ap.add_argument("--only", action="append", default=[], help="skill name(s), comma-separated or repeated")
    ap.add_argument("--skip-done", action="store_true", help="skip skills whose measurement holds here")
    ap.add_argument("--write", action="store_true", help="write skill.toml and the evidence file")
    ap.add_argument("--out-evidence", type=Path, default=None, help="default: <seed dir>/evidence.jsonl")
    ap.add_argument("--results", type=Path, default=None, help="also append results (JSON lines) here")
    ap.add_argument("--apply", type=Path, default=None, help="apply a --results file; no verification")
    ap.add_argument("--seed-dir", type=Path, default=None)
    ap.add_argument("--budget-s", type=float, default=None, help="start no new skill after this many seconds")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    ap.add_argument("--no-alternatives", action="store_true")
    ap.add_argument("--untimed", action="store_true", help="only skills never timed (no kernel_ms recorded)")
    ap.add_argument("--compile-baseline", choices=("cached", "interleaved"), default="cached",
                    help="torch.compile timed once per reference (cached) or beside every kernel")
    args = ap.parse_args(argv)
    settings = load_settings()
    library = SkillLibrary(settings, seed_dir=args.seed_dir)
    evidence_path = args.out_evidence or library.seed_dir / "evidence.jsonl"
    if args.apply:
        for line in args.apply.read_text().splitlines():
            if line.strip():
                result = json.loads(line)
                apply(library, result, evidence_path)
                print(f"applied {result['skill']}: state {result.get('state')}, "
                      f"{len(result.get('records', []))} evidence records")
        return 0
    wanted = {n.strip() for item in args.only for n in item.split(",") if n.strip()}
    skills = [library.get(n) for n in sorted(wanted)] if wanted else library.list(source="seed")
    if args.untimed:
        skills = [s for s in skills if never_timed(s)]
        print(f"{len(skills)} skill(s) never timed: {', '.join(s.name for s in skills) or 'none'}")
    with _session(device=args.device, timeout_s=args.timeout_s, trials=args.trials,
                  measure_time=args.device != "cpu", compile_baseline=args.compile_baseline) as session:
        for skill in skills:             # every reference's torch.compile baseline, compiled ahead
            if not _holds(args, library, skill):
                getattr(session, "prefetch", lambda *_: None)(skill.reference_path.read_text())
        return _measure_all(args, library, skills, session.verify, evidence_path,
                            at_once=getattr(session, "workers", 1))


def _holds(args: argparse.Namespace, library: SkillLibrary, skill: Skill) -> bool:
    """``--skip-done`` on a GPU, and the skill's measurement still holds here."""
    return (args.skip_done and args.device != "cpu" and skill.review_state in ("verified", "approved")
            and library.is_stale(skill) is None)


def _measure_all(args: argparse.Namespace, library: SkillLibrary, skills: list[Skill], verify: Callable[..., Any],
                 evidence_path: Path, at_once: int = 1) -> int:
    """Measure ``skills``, ``at_once`` at a time through the session (its workers time one at a
    time on the GPU); each result is printed and written as it finishes."""
    start, lock, failed = time.monotonic(), threading.Lock(), []

    def one(i: int, skill: Skill) -> None:
        if args.budget_s is not None and time.monotonic() - start > args.budget_s:
            with lock:
                print(f"budget of {args.budget_s:.0f} s spent; {skill.name} not started (rerun with --skip-done)")
            return
        if _holds(args, library, skill):
            with lock:
                print(f"[{i}/{len(skills)}] {skill.name}: measurement holds here, skipped")
            return
        t0 = time.monotonic()
        result = measure(skill, verify, device=args.device, timeout_s=args.timeout_s, trials=args.trials,
                         alternatives=not args.no_alternatives)
        with lock:
            failed.append(not result["ok"])
            print(f"[{i}/{len(skills)}] {skill.name}: {result['summary']} ({time.monotonic() - t0:.0f} s)")
            for alt in result["alternatives"]:
                print(f"    {alt['variant']}: {alt.get('outcome') or alt['status']}: {alt['summary']}")
            if args.results:
                args.results.parent.mkdir(parents=True, exist_ok=True)
                with open(args.results, "a") as fh:
                    fh.write(json.dumps(result, sort_keys=True) + "\n")
            if args.write:
                apply(library, result, evidence_path)
            sys.stdout.flush()

    with ThreadPoolExecutor(max_workers=max(1, at_once)) as pool:
        for future in [pool.submit(one, i, skill) for i, skill in enumerate(skills, 1)]:
            future.result()
    return 1 if any(failed) else 0


if __name__ == "__main__":
    raise SystemExit(main())
