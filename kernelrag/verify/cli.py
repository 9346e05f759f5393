"""Command-line arguments of the verifier, shared by ``kernelrag verify`` and
``python -m kernelrag.verify TASK CAND [--device cuda] [--json]`` (the latter runs
where only torch and triton exist, e.g. the GPU machine).

Exit status: 0 when the candidate is ok, 1 when it is not, 2 on bad usage.
"""
from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kernelrag.verify",
        description="Verify a candidate kernel (ModelNew) against a KernelBench task (Model).",
        epilog="example: PYTHONPATH=. python3 -m kernelrag.verify skills/relu/relu/reference.py "
               "skills/relu/relu/kernel.py --device cuda --json")
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="KernelBench task file (class Model, get_inputs, get_init_inputs)")
    parser.add_argument("candidate", help="candidate file defining class ModelNew")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                        help="cpu: Triton interpreter, shrunk sizes, no timing (default: auto)")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials (default 5)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per stage (default 300)")
    parser.add_argument("--seed", type=int, default=None, help="fix the trials' seeds to reproduce a run")
    parser.add_argument("--no-time", action="store_true", help="skip timing on a GPU")
    parser.add_argument("--require-isolation", action="store_true", default=None,
                        help="refuse to run the candidate without an OS sandbox (namespaces); "
                             "exit 2 when none is available")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def run_args(args: argparse.Namespace, device: str = "auto", timeout_s: float = 300.0,
             require_isolation: bool = False) -> int:
    from kernelrag.errors import KernelRAGError
    from kernelrag.verify import verify

    try:
        verdict = verify(args.task, args.candidate, device=args.device or device,
                         timeout_s=args.timeout or timeout_s, trials=args.trials, seed=args.seed,
                         measure_time=not args.no_time,
                         require_isolation=bool(args.require_isolation or require_isolation))
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


def main(argv: list[str] | None = None) -> int:
    return run_args(build_parser().parse_args(argv))
