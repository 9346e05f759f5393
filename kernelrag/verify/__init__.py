"""The verifier: static checks, correctness in fresh processes, and (on a GPU) timing.

    from kernelrag.verify import verify, verify_source, Verdict
    verdict = verify("task.py", "candidate.py", device="cpu")
    print(verdict.summary())

    with VerifySession(device="cuda") as session:         # many candidates, caches kept warm
        verdicts = session.verify_many("task.py", ["a.py", "b.py"])

This package imports only the standard library, torch, triton and numpy, and torch
only inside the worker processes, so it runs on a bare GPU machine:
``PYTHONPATH=. python3 -m kernelrag.verify TASK CAND --device cuda --json``.
"""
from kernelrag.verify.pipeline import verify, verify_source
from kernelrag.verify.session import VerifySession, verify_many
from kernelrag.verify.static import StaticPolicy
from kernelrag.verify.verdict import Check, Finding, Phases, Timing, Verdict

__all__ = ["verify", "verify_source", "verify_many", "VerifySession", "Verdict", "Check", "Finding", "Timing",
           "Phases", "StaticPolicy"]
