"""The verifier: static checks, correctness in fresh processes, and (on a GPU) timing.

    from kernelrag.verify import verify, verify_source, Verdict
    verdict = verify("task.py", "candidate.py", device="cpu")
    print(verdict.summary())

This package imports only the standard library, torch, triton and numpy, and torch
only inside the worker processes, so it runs on a bare GPU machine:
``PYTHONPATH=. python3 -m kernelrag.verify TASK CAND --device cuda --json``.
"""
from kernelrag.verify.pipeline import verify, verify_source
from kernelrag.verify.static import StaticPolicy
from kernelrag.verify.verdict import Check, Finding, Timing, Verdict

__all__ = ["verify", "verify_source", "Verdict", "Check", "Finding", "Timing", "StaticPolicy"]
