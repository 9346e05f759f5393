"""Command-line arguments of the verifier, shared by ``kernelrag verify`` and
``python -m kernelrag.verify TASK CAND [CAND ...] [--device cuda] [--json]`` (the latter
runs where only torch and triton exist, e.g. the GPU machine).

With several candidates (batch mode) they are verified in one ``VerifySession``:
references, the torch.compile baseline and warm processes are shared, one verdict per
candidate is printed (``--json``: a list, each with its ``candidate`` path).

Exit status: 0 when every candidate is ok, 1 when any is not, 2 on bad usage.
"""
from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kernelrag.verify",
        description="Verify candidate kernels (ModelNew) against a KernelBench task (Model).",
        epilog=EXIT_HELP + "\nexample: PYTHONPATH=. python3 -m kernelrag.verify skills/relu/relu/reference.py "
               "skills/relu/relu/kernel.py --device cuda --json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


EXIT_HELP = ("exit status: 0 when every candidate is ok (compiled, correct, no rule broken), 1 when any is "
             "not, 2 on bad usage.\nbatch mode: several candidates share one session (same trial seeds, "
             "references and torch.compile baseline computed once, warm processes); one verdict each.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="KernelBench task file (class Model, get_inputs, get_init_inputs)")
    parser.add_argument("candidate", nargs="+", help="candidate file(s) defining class ModelNew; several: batch mode")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                        help="cpu: Triton interpreter, shrunk sizes, no timing (default: auto)")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials (default 5)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per stage (default 300)")
    parser.add_argument("--seed", type=int, default=None, help="fix the trials' seeds to reproduce a run")
    parser.add_argument("--no-time", action="store_true", help="skip timing on a GPU")
    parser.add_argument("--require-isolation", action="store_true", default=None,
                        help="refuse to run the candidate without an OS sandbox (namespaces); "
                             "exit 2 when none is available")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON (a list in batch mode)")
    parser.add_argument("--workers", type=int, default=None,
                        help="batch mode: candidates in flight at once (default 2 on a GPU, 1 on a CPU; timing never overlaps)")
    parser.add_argument("--compile-baseline", choices=["cached", "interleaved"], default="cached",
                        help="batch mode: time torch.compile once per task (cached, scaled by eager's drift) "
                             "or beside every candidate (interleaved)")
    parser.add_argument("--profile", action="store_true",
                        help="on a GPU, profile the verified kernel once with ncu (limiter, SOL %%, occupancy); "
                             "one candidate only")


def run_args(args: argparse.Namespace, device: str = "auto", timeout_s: float = 300.0,
             require_isolation: bool = False, profile: bool = False) -> int:
    from kernelrag.errors import KernelRAGError
    from kernelrag.verify import verify

    candidates = args.candidate if isinstance(args.candidate, list) else [args.candidate]
    options = dict(device=args.device or device, timeout_s=args.timeout or timeout_s, trials=args.trials,
                   seed=args.seed, measure_time=not args.no_time,
                   require_isolation=bool(args.require_isolation or require_isolation))
    try:
        if len(candidates) > 1:
            return _run_batch(args, candidates, options)
        verdict = verify(args.task, candidates[0], **options, profile=bool(args.profile or profile))
    except KernelRAGError as exc:
        print(f"verify: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        print(verdict.summary())
        if not verdict.ok:
            print()
            print(verdict.feedback())
    return 0 if verdict.ok else 1


def _run_batch(args: argparse.Namespace, candidates: list[str], options: dict) -> int:
    from kernelrag.verify.session import VerifySession

    with VerifySession(**options, workers=getattr(args, "workers", None),
                       compile_baseline=getattr(args, "compile_baseline", "cached")) as session:
        def progress(i: int, verdict) -> None:
            if not args.json:
                print(f"[{i + 1}/{len(candidates)}] {candidates[i]}: {verdict.summary()}", flush=True)

        verdicts = session.verify_many(args.task, candidates, on_verdict=progress)
    if args.json:
        print(json.dumps([{"candidate": c, **v.to_dict()} for c, v in zip(candidates, verdicts)], indent=2))
    else:
        ok = sum(v.ok for v in verdicts)
        print(f"{ok} of {len(verdicts)} candidates ok; total {sum(v.wall_s for v in verdicts):.1f} s of "
              f"verification")
        for c, v in zip(candidates, verdicts):
            if not v.ok:
                print(f"\n{c}:\n{v.feedback()}")
    return 0 if all(v.ok for v in verdicts) else 1


def main(argv: list[str] | None = None) -> int:
    return run_args(build_parser().parse_args(argv))
