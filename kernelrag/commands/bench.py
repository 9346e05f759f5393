"""kernelrag bench: generate and verify every task of a suite; resumable; writes a results file."""
from __future__ import annotations

import argparse
from pathlib import Path

from kernelrag.bench.report import write_report
from kernelrag.bench.runner import build_parser
from kernelrag.bench.runner import run as run_bench

EXAMPLE = """examples:
  kernelrag bench bench/tasks --device cuda --budget-s 540     # re-run until it prints "complete"
  kernelrag bench ~/KernelBench/KernelBench/level1 --device cuda --results bench/results/kb-level1.json
  kernelrag bench --report bench/results/h200-2026-11-29.json  # Markdown table + roofline plot"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    build_parser(parser)
    parser.add_argument("--report", metavar="RESULTS_JSON", help="only write the table and plot of a results file")


def run(args: argparse.Namespace) -> int:
    if args.report:
        for path in write_report(Path(args.report)):
            print(path)
        return 0
    return run_bench(args)
