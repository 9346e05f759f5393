"""What the UI shows for the facade's typed results (no browser, no gradio)."""
from __future__ import annotations

from pathlib import Path

from kernelrag.types import OFFLINE_LABEL, Citation, Passage, Round, SkillRef, Transformation
from kernelrag.verify.verdict import Check, Timing, Verdict
from kernelrag.ui import render


def cpu_verdict(**extra) -> Verdict:
    values = dict(ok=True, status="correct", reason="matches the reference on 7 trials", compiled=True,
                  correct=True, device="cpu", trials=5, max_abs_err=0.0, rel_norm_err=0.0,
                  checks=[Check("compare[trial 1]", True), Check("inputs-unchanged", True)])
    values.update(extra)
    return Verdict(**values)


def gpu_verdict(flops: int = 8 * 2**20, bytes_moved: int = 64 * 2**20) -> Verdict:
    # 64 MiB in 0.02 ms: 3355 GB/s achieved against a measured 4194 GB/s copy roof (80%)
    return cpu_verdict(device="cuda", gpu="NVIDIA H200", timed=True, kernel_ms=Timing(0.02, 0.001, 100),
                       eager_ms=Timing(0.03, 0.001, 100), compile_ms=Timing(0.025, 0.001, 100),
                       speedup_vs_eager=1.5, speedup_vs_compile=1.25, flops=flops, bytes_moved=bytes_moved,
                       achieved_gbps=3355.4432, frac_bandwidth=0.8,
                       achieved_tflops=flops / 0.02e-3 / 1e12 if flops else None,
                       frac_compute=0.01 if flops else None, frac_roofline=0.8, roofline_floor_ms=0.016)


def test_cpu_verdict_row_says_no_time_was_measured():
    row = render.verdict_row(1, "offline (relu)", cpu_verdict())
    cells = dict(zip(render.VERDICT_HEADERS, row))
    assert cells["status"] == "correct" and cells["correct"] == "yes" and cells["checks"] == "2/2"
    assert cells["kernel ms"] == render.NO_TIME and cells["x eager"] == "-" and cells["roofline %"] == "-"


def test_gpu_verdict_row_has_times_speedups_and_roofline_share():
    cells = dict(zip(render.VERDICT_HEADERS, render.verdict_row(2, "llm", gpu_verdict())))
    assert cells["kernel ms"] == "0.02" and cells["eager ms"] == "0.03" and cells["compile ms"] == "0.025"
    assert cells["x eager"] == "1.50" and cells["x compile"] == "1.25" and cells["roofline %"] == "80"


def test_a_round_without_a_draft_is_a_row_and_a_log_line():
    r = Round(index=1, drafter="llm", draft="", verdict=None, feedback="", error="no code block in the answer")
    assert render.round_row(r)[2] == "no draft"
    assert "no code block" in render.round_markdown(r)


def test_failed_round_log_carries_the_verifier_feedback():
    v = cpu_verdict(ok=False, status="incorrect", correct=False, reason="3 elements out of tolerance",
                    mismatch_count=3, max_abs_err=1.0, checks=[Check("compare[trial 1]", False, "3 bad")])
    text = render.round_markdown(Round(index=1, drafter="offline", draft="x", verdict=v, feedback=""))
    assert "incorrect" in text and "Mismatch: 3 elements" in text


def test_roofline_figure_places_the_kernel_under_the_measured_roof():
    v = gpu_verdict()
    fig = render.roofline_figure(v)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    point = ax.collections[0].get_offsets()[0]
    assert abs(point[0] - v.flops / v.bytes_moved) < 1e-9
    assert abs(point[1] - v.achieved_tflops) < 1e-9
    roof = ax.lines[0].get_ydata()
    assert max(roof) <= v.achieved_tflops / v.frac_compute + 1e-9     # flat at the compute ceiling
    assert "80% of the roofline floor" in ax.get_title()


def test_pure_data_movement_gets_a_bandwidth_chart_and_untimed_gets_none():
    fig = render.roofline_figure(gpu_verdict(flops=0))
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights[0] == 3355.4432 and abs(heights[1] - 3355.4432 / 0.8) < 1e-6
    assert render.roofline_figure(cpu_verdict()) is None
    assert render.roofline_figure(None) is None


def test_sources_list_numbers_files_and_sections():
    p = Passage(Citation(number=1, source="corpus/bank-conflicts.md", section="Bank conflicts > Padding",
                         start_line=11, end_line=22, kind="guide"), "## Padding\nAdd one column *here*.", 0.03)
    text = render.sources_markdown([p])
    assert "**[1]** `corpus/bank-conflicts.md`" in text and "lines 11-22" in text and "guide" in text
    assert "Padding" in text and "\\*here\\*" in text                  # passage text is not Markdown
    assert "ingest" in render.sources_markdown([])


def test_offline_answer_keeps_passage_headings_from_becoming_headings():
    text = f"[{OFFLINE_LABEL}]\n\n[1] corpus/a.md § Swizzling, lines 1-3\n## Swizzling XOR the column"
    shown = render.answer_markdown(text, offline=True)
    assert "**[1] corpus/a.md § Swizzling, lines 1-3**" in shown
    assert "\n\\## Swizzling" in shown
    assert render.answer_markdown("## A real heading", offline=False) == "## A real heading"


def test_suggestions_show_each_transformation_with_its_evidence():
    t = Transformation(id="online_softmax", score=0.62, evidence=["4/4 ok, median 1.9x eager on NVIDIA H200"],
                       rationale="one pass over the row")
    ref = SkillRef(name="softmax_online", pattern="softmax[dim=-1]", category="softmax", backend="triton",
                   state="verified")
    text = render.suggestions_markdown("softmax[dim=-1]", [t], [ref])
    assert "**online_softmax** (score 0.62)" in text and "1.9x eager on NVIDIA H200" in text
    assert "`softmax_online` (verified)" in text
    assert "no evidence" in render.suggestions_markdown("relu", [])


def test_skill_rows_filter_on_every_word():
    refs = [SkillRef(name="relu", pattern="relu", category="elementwise", backend="triton", state="draft",
                     transformations=["vectorized_loads"], speedup_vs_eager=1.234, gpu="NVIDIA H200"),
            SkillRef(name="softmax_online", pattern="softmax[dim=-1]", category="softmax", backend="triton",
                     state="verified", transformations=["online_softmax"])]
    assert [r[0] for r in render.skill_rows(refs, "")] == ["relu", "softmax_online"]
    assert render.skill_rows(refs, "vectorized elementwise") == [
        ["relu", "relu", "elementwise", "triton", "draft", "1.23", "NVIDIA H200"]]
    assert render.skill_rows(refs, "matmul") == []


def test_skill_detail_shows_provenance_or_says_never_measured():
    from kernelrag.memory.skills import Skill

    skill = Skill(name="relu", pattern="relu", category="elementwise", backend="triton",
                  transformations=["vectorized_loads"], dtypes=["float32"], shapes={}, tolerance={},
                  review_state="verified", provenance={"gpu": "NVIDIA H200", "kernel_ms": 1.23456,
                                                       "speedup_vs_eager": 1.1, "iqr_ms": None},
                  path=Path("skills/relu/relu"), source="seed", cpu_checkable=True, summary="ReLU")
    from kernelrag.memory.skill_status import skill_status

    skill.provenance["date"] = "2026-11-29"
    status = skill_status("verified", skill.provenance, {"torch": "2.13.0", "triton": "3.6.0", "gpu": "NVIDIA H200"})
    text = render.skill_markdown(skill, status)
    assert "| gpu | NVIDIA H200 |" in text and "| kernel_ms | 1.235 |" in text and "iqr" not in text
    assert "**verified · timed on NVIDIA H200 · current**" in text
    skill.provenance = {}
    text = render.skill_markdown(skill, skill_status("verified", {}, {}))
    assert "verified · never measured" in text and "Provenance: never measured" in text


def test_result_shows_the_recommendation():
    from kernelrag.types import GenerateResult

    slower = gpu_verdict()
    slower.speedup_vs_compile = 0.8
    result = GenerateResult(task_path=None, pattern="relu", backend="triton", ok=True, source="", verdict=slower,
                            reason="verified in round 1")
    text = render.result_markdown(result)
    assert "**Recommendation:** use torch.compile" in text and "1.25x slower" in text
