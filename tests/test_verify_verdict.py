"""The Verdict: plain data, summary and feedback."""
from __future__ import annotations

import json

from kernelrag.verify.verdict import Check, Finding, Timing, Verdict


def sample() -> Verdict:
    return Verdict(status="incorrect", reason="compare[t2 heavy_tailed]: 3/64 out of tolerance", compiled=True,
                   checks=[Check("compare[t0 task]", True, "ok"), Check("compare[t2 heavy_tailed]", False, "3/64 bad")],
                   findings=[Finding("result-cache", 12, "cache keyed by x.data_ptr()", False)],
                   max_abs_err=0.5, max_rel_err=0.1, rel_norm_err=0.01, mismatch_count=3,
                   first_bad_indices=[[0, 1], [2, 3]], nonfinite_mismatch=1, trials=5,
                   shrunk_sizes={"dim": [4095, 25, 37]}, kernel_ms=Timing(1.5, 0.1, 100),
                   warnings=["checked under Triton's CPU interpreter; no time measured"])


def test_round_trip_through_json():
    v = sample()
    again = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert again == v
    assert isinstance(again.kernel_ms, Timing) and isinstance(again.checks[0], Check)


def test_from_dict_ignores_unknown_keys():
    assert Verdict.from_dict({"status": "correct", "ok": True, "future_field": 1}).ok


def test_feedback_carries_what_an_llm_needs():
    text = sample().feedback()
    assert "incorrect" in text
    assert "3 elements out of tolerance" in text and "max abs err 0.5" in text
    assert "[[0, 1], [2, 3]]" in text
    assert "NaN/Inf disagree" in text
    assert "compare[t2 heavy_tailed]" in text
    assert "line 12" in text and "result-cache" in text


def test_feedback_lists_blocking_rules_first():
    v = Verdict(status="rejected", reason="try-except at line 3",
                findings=[Finding("try-except", 3, "try/except is not allowed", True)])
    lines = v.feedback().splitlines()
    assert lines[1].startswith("Rules broken") and "line 3: [try-except]" in lines[2]


def test_summary_is_one_line_with_sizes_and_no_timing_note():
    v = Verdict(ok=True, status="correct", reason="matches the reference on 7 trials", correct=True,
                device="cpu", trials=5, rel_norm_err=1e-8, max_abs_err=1e-7, shrunk_sizes={"dim": [4095, 25]})
    text = v.summary()
    assert "\n" not in text and "no time measured" in text and "dim 4095->25" in text


def test_recommendation_judges_against_the_better_baseline():
    from kernelrag.verify.verdict import recommend

    # faster than eager but slower than torch.compile: recommend torch.compile, never the kernel
    line = recommend(True, True, 1.5, 0.8, 0.4)
    assert line.startswith("use torch.compile") and "1.25x slower" in line
    assert recommend(True, True, 2.0, 1.3, 0.5).startswith("use the kernel: 1.30x faster than torch.compile")
    tie = recommend(True, True, 0.99, 1.4, 0.97)
    assert tie.startswith("use eager PyTorch") and "hardware limit" in tie
    assert recommend(True, False, None, None, None).startswith("verified for correctness only")
    assert recommend(False, False, None, None, None, "incorrect").startswith("keep the PyTorch reference")
