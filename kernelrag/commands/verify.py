"""``kernelrag verify TASK CAND``: verify a candidate kernel against a KernelBench task.

Exit status: 0 when the candidate is ok (compiled, correct, no rule broken), 1 when it
is rejected, incorrect or could not be checked, 2 on bad usage.
"""
from __future__ import annotations

import argparse

from kernelrag.config import load_settings
from kernelrag.verify.cli import add_arguments as verify_arguments
from kernelrag.verify.cli import run_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verify_arguments(parser)
    parser.epilog = ("example: kernelrag verify skills/softmax/softmax_online/reference.py "
                     "skills/softmax/softmax_online/kernel.py --device cpu")


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    return run_args(args, device=settings.device, timeout_s=settings.verify_timeout_s,
                    require_isolation=bool(settings.require_isolation))
