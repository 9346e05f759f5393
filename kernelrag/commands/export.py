"""``kernelrag export``: verified optimization trajectories as a training dataset."""
from __future__ import annotations

import argparse
import json

from kernelrag.api import KernelRAG

EXAMPLE = """examples:
  kernelrag export --format jsonl
  kernelrag export --out trajectories.jsonl --include-failed

One JSON object per line: {"type": "sft", ...} pairs (prompt -> final verified kernel) and
{"type": "transcript", ...} multi-turn trajectories (draft, verifier feedback, next draft)
with every round's verdict. Read from the optimization logs under $KERNELRAG_HOME/logs."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EXAMPLE
    parser.add_argument("--format", choices=("jsonl",), default="jsonl", help="output format (jsonl)")
    parser.add_argument("--out", help="output file (default: $KERNELRAG_HOME/exports/trajectories.jsonl)")
    parser.add_argument("--include-failed", action="store_true",
                        help="also export transcripts of runs that never verified (no SFT pair)")
    parser.add_argument("--json", action="store_true", help="print the ExportResult as JSON")


def run(args: argparse.Namespace) -> int:
    result = KernelRAG().export(args.out, include_failed=args.include_failed)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(f"wrote {result.sft_pairs} SFT pairs and {result.transcripts} transcripts to {result.path} "
              f"({result.runs_read} logs read, {result.runs_skipped} skipped)")
    return 0
