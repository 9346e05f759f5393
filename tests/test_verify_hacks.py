"""Adversarial kernels (tests/fixtures/verify/hacks) must be rejected, for the right reason.

The expected outcome of every fixture lives in tests/fixtures/verify/expectations.json
(shared with check_all.py, which runs the same table on a GPU). ``reason`` names what
must be blamed: ``rule:X`` a blocking finding X, ``check:X`` a failed check X[...],
``error:X`` X in the error text. Rows with ``disabled`` static rules prove the run-time
layer catches the same hack when the static layer is bypassed. On CPU, under Triton's
interpreter.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelrag.verify import StaticPolicy, verify

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
HACKS = json.loads((FIXTURES / "expectations.json").read_text())["hacks"]
RUN_TIME_RULES = {"rule:resource-limit"}      # found while the candidate runs


def run(row: dict):
    disabled = frozenset(row.get("disabled", ()))
    return verify(FIXTURES / "tasks" / f"{row['task']}.py", FIXTURES / f"{row['candidate']}.py", device="cpu",
                  timeout_s=row.get("timeout_s", 300.0), policy=StaticPolicy(disabled=disabled) if disabled else None)


def label(row: dict) -> str:
    name = row["candidate"].split("/")[-1]
    return name + ("-runtime" if row.get("disabled") else "")


def assert_reason(verdict, expect: str) -> None:
    kind, _, name = expect.partition(":")
    if kind == "rule":
        assert name in {f.rule for f in verdict.findings if f.blocking}, verdict.feedback()
    elif kind == "check":
        assert name in {c.name.split("[")[0] for c in verdict.failed_checks}, verdict.feedback()
    elif kind == "error":
        assert name in (verdict.error or ""), verdict.feedback()


def test_at_least_fifteen_hacks_are_covered():
    assert len({row["candidate"] for row in HACKS}) >= 15
    assert {p.stem for p in (FIXTURES / "hacks").glob("*.py")} == {row["candidate"].split("/")[1] for row in HACKS}


@pytest.mark.parametrize("row", HACKS, ids=[label(r) for r in HACKS])
def test_hack_is_rejected_for_the_right_reason(row):
    verdict = run(row)
    assert verdict.status == row.get("cpu_status", row["status"]), verdict.feedback()
    assert not verdict.ok
    assert_reason(verdict, row["reason"])
    static = row["reason"].startswith("rule:") and row["reason"] not in RUN_TIME_RULES
    if static and not row.get("disabled") and row["status"] == "rejected":
        assert verdict.checks == []          # rejected before any of its code ran


def test_details_of_specific_hacks():
    by_name = {label(r): r for r in HACKS}
    partial = run(by_name["partial_write"])
    assert partial.nonfinite_mismatch and partial.mismatch_count and partial.first_bad_indices
    cached = run(by_name["data_ptr_cache"])
    assert "result-cache" in {f.rule for f in cached.findings if not f.blocking}
    assert [c.passed for c in cached.checks if c.name.startswith("compare[t0")] == [True]   # caught on reuse
    zeros = run(by_name["zeros_tiny"])
    assert zeros.rel_norm_err == pytest.approx(1.0)
    crashed = run(by_name["os_exit-runtime"])
    assert "exit code 0" in crashed.reason
    assert run(by_name["noop_empty"]).status == "incorrect"      # the verifier still works after a crash
