"""``kernelrag verify TASK CAND [CAND ...]``: verify candidate kernels against a KernelBench task.

Several candidates run in batch mode (one session: shared references, torch.compile
baseline and warm processes; one verdict each). Exit status: 0 when every candidate is ok
(compiled, correct, no rule broken), 1 when any is rejected, incorrect or could not be
checked, 2 on bad usage.
"""
from __future__ import annotations

import argparse

from kernelrag.config import load_settings
from kernelrag.verify.cli import add_arguments as verify_arguments
from kernelrag.verify.cli import run_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verify_arguments(parser)
    from kernelrag.verify.cli import EXIT_HELP

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (EXIT_HELP + "\nexample: kernelrag verify skills/softmax/softmax_online/reference.py "
                     "skills/softmax/softmax_online/kernel.py --device cpu\nbatch: kernelrag verify "
                     "skills/relu/relu/reference.py skills/relu/relu/kernel.py skills/elu/elu/kernel.py --json")


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    return run_args(args, device=settings.device, timeout_s=settings.verify_timeout_s,
                    require_isolation=bool(settings.require_isolation), profile=settings.profile)
