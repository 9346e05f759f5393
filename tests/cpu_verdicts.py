"""One CPU verification per (task source, candidate source), shared by the tests that verify
the same seed-skill kernel against the same reference: test_seed_skills checks each seed
skill's kernel.py, and test_draft checks what the offline drafter instantiates for the
skill's reference, which is that same kernel.py unless the drafter picked or specialised
another source (a different pair, verified afresh). The verifier is the thing under test
in neither; a pair is verified once per pytest process, under one random seed."""
from __future__ import annotations

_VERDICTS: dict[tuple[str, str], object] = {}


def verify_on_cpu(task_src: str, candidate_src: str):
    from kernelrag.verify import verify_source

    key = (task_src, candidate_src)
    if key not in _VERDICTS:
        _VERDICTS[key] = verify_source(task_src, candidate_src, device="cpu")
    return _VERDICTS[key]
