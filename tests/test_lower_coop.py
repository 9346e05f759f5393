"""The row-wise template's cooperative variant: a long row's chunks combine inside one launch.

On the CPU the launcher runs the kernel as two launches (partials, then combine and write):
these tests check that arithmetic, the launch the GPU gets, and the kernel's compile for sm_90."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from kernelrag.draft.lower.lowering import lower, variant_choices
from test_lower import assert_close, run_both, task
from test_lower_rowwise import compile_cases

FEW_LONG = "batch_size = 3\ndim = 70000"      # few rows of 17 chunks and a ragged tail
LONG = "batch_size = 3\ndim = 33000"


def test_long_norm_rows_default_to_one_cooperative_launch_that_keeps_the_variance_far_from_zero():
    """Inputs at mean 1000, std 1: each chunk's squared deviations about its own mean, combined by
    Chan's rule, keep the variance that sum(x^2) - n mean^2 would lose in fp32."""
    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=FEW_LONG,
               inputs="torch.randn(batch_size, dim) + 1000.0")
    d = lower(src, "ln")
    assert d.ok, d.reason
    assert "[coop]" in d.reason and "cooperative_rows" in d.transformations
    assert "_arrive_and_wait(count_ptr, row, n_split)" in d.source
    # one launch on a GPU where a row's chunks fit one an SM; two launches otherwise (and here)
    assert "n_split <= torch.cuda.get_device_properties(a0.device).multi_processor_count" in d.source
    assert "for phase in ((0,) if together else (1, 2)):" in d.source
    ref, out = run_both(src, d.source)
    assert_close(ref, out, rtol=1e-3, atol=1e-3)


def test_cooperative_softmax_rescales_each_chunks_sum_and_survives_all_masked_chunks():
    """Chunks of 8192: the first wholly -inf, the second partly, the third not at all."""
    src = task("torch.softmax(x.masked_fill(m, float('-inf')) * 2.0, dim=-1)", args="x, m",
               dims="batch_size = 3\ndim = 20000", inputs="torch.randn(batch_size, dim), torch.arange(dim)[None, :] < 9000")
    d = lower(src, "masked", ("coop",))
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert torch.isfinite(out).all()
    assert_close(ref, out)


@pytest.mark.parametrize("forward", ["torch.log_softmax(x, dim=-1)", "torch.relu(self.ln(x)) + x"])
def test_cooperative_rows_match_the_reference(forward):
    src = task(forward, body="self.ln = nn.LayerNorm(dim)", dims=LONG)
    d = lower(src, "coop", ("coop",))
    assert d.ok, d.reason
    assert_close(*run_both(src, d.source))


def test_a_row_output_beside_the_full_size_one_is_stored_once_per_row():
    """Every chunk combines the row's statistics; only the row's first chunk stores its row-level
    outputs."""
    src = task("(x - x.mean(dim=-1, keepdim=True), x.mean(dim=-1))", dims=LONG)
    d = lower(src, "centred", ("coop",))
    assert d.ok, d.reason
    assert "if split == 0:" in d.source
    (ref_full, ref_row), (full, row) = run_both(src, d.source)
    assert_close(ref_full, full)
    assert_close(ref_row, row)


def test_16bit_inputs_accumulate_in_fp32_and_store_their_dtype():
    src = task("torch.softmax(x, dim=-1)", dims="batch_size = 3\ndim = 9000",
               inputs="torch.randn(batch_size, dim).to(torch.bfloat16)")
    d = lower(src, "soft16", ("coop",))
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert out.dtype == torch.bfloat16
    assert_close(ref.float(), out.float(), rtol=1e-2, atol=1e-6)


def test_cooperative_is_offered_for_long_rows_only():
    """From 32768 elements a row; at 16384 the registers variant holds a row and tied with it."""
    def choices(dims: str, forward: str = "self.ln(x)"):
        return variant_choices(task(forward, body="self.ln = nn.LayerNorm(dim)", dims=dims))

    assert not any("coop" in combo for combo in choices("batch_size = 4096\ndim = 16384"))
    assert not any("coop" in combo for combo in choices(FEW_LONG, "torch.sum(x, dim=-1)"))   # no full-size output
    assert choices("batch_size = 4096\ndim = 32768")[0] == ("coop",)


def test_every_listed_configuration_computes_the_same():
    """The configuration search pins each CONFIGS entry in turn (``pinned_source``): each chunk
    size still covers the row exactly once, its ragged last chunk masked."""
    from kernelrag.memory.tuning import pinned_source, source_configs

    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=LONG)
    d = lower(src, "ln", ("coop",))
    configs = source_configs(d.source)
    assert len(configs) >= 4 and all(set(c) == {"BLOCK_R", "num_warps"} for c in configs)
    for cfg in configs:
        assert_close(*run_both(src, pinned_source(d.source, cfg)))



@pytest.mark.parametrize("channels, hw, weight_once_a_chunk", [(32, 128, True), (8, 100, False)])
def test_a_group_norm_picks_its_lane_offsets_at_launch(tmp_path, channels, hw, weight_once_a_chunk):
    """The activation's reduced dims form one run (offset r); the weight and bias, broadcast over
    the spatial dims, are one load a chunk where every chunk lies inside one channel (128 x 128
    pixels a channel, chunks of 8192) and per lane where chunks straddle channels (100 x 100)."""
    from cuda_compile import launches_of

    src = task("self.gn(x)", body=f"self.gn = nn.GroupNorm(4, {channels})", dims=FEW_LONG,
               inputs=f"torch.randn(2, {channels}, {hw}, {hw})")
    d = lower(src, "gn", ("coop",))
    assert d.ok, d.reason
    assert_close(*run_both(src, d.source), rtol=1e-3, atol=1e-4)
    launches = launches_of(src, d.source, name="gn")   # the launch's flags: no program runs
    flags = launches[0]["kwargs"]
    assert (flags["IN0_FLAT"], flags["IN0_CHUNK"], flags["OUT0_FLAT"]) == (True, False, True)
    assert flags["IN1_CHUNK"] is flags["IN2_CHUNK"] is weight_once_a_chunk
    assert not flags["IN1_FLAT"]            # strides (1, 0) over (channel, pixel): not one run


@pytest.mark.slow
def test_the_cooperative_kernel_compiles_for_sm90_without_spills(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    group_norm = task("F.silu(self.gn(x))", body="self.gn = nn.GroupNorm(4, 32)", dims=FEW_LONG,
                      inputs="torch.randn(2, 32, 128, 128)")
    cases = [(task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=FEW_LONG), ("coop",)),
             (task("torch.log_softmax(x, dim=-1)", dims=LONG), ("coop",)), (group_norm, ("coop",)),
             (task("torch.softmax(x * 0.125, dim=-1)", dims="batch_size = 2\ndim = 32768"), ("coop",))]
    results = compile_cases(cases, tmp_path, gpu_launch)
    assert len(results) == 4 and all(r["ok"] for r in results), [r["error"][-800:] for r in results if not r["ok"]]
    assert all(r["spill_bytes"] in (0, None) for r in results), results
    # the group norm's chunk (32 fp32 a thread) and a few scalars: it took 154 registers with an
    # int offset a lane for each of its four tensors and its weight and bias gathered per lane
    assert results[2]["registers"] is None or results[2]["registers"] <= 80, results[2]
    # launched without FMA contraction: x * 0.125 - max contracted kept x beside x * 0.125 (101)
    assert results[3]["registers"] is None or results[3]["registers"] <= 80, results[3]


def gpu_launch(launches: list[dict]) -> list[dict]:
    """The launch a GPU gets: the interpreter's two (PHASE 1, then 2) as the one with the wait."""
    for launch in launches:
        if launch["kwargs"].get("PHASE") == 1:
            launch["kwargs"]["PHASE"] = 0
    return [launch for launch in launches if launch["kwargs"].get("PHASE") != 2]


def test_a_default_the_graph_never_saw_gets_the_first_round(tmp_path):
    """Evidence for the older variants on log_softmax would rank the new default last for ever;
    untried, it goes first. Once it has a record (here a failure), the evidence orders it."""
    from kernelrag.draft.lower.rank import lower_order
    from kernelrag.memory.graph import ReasoningGraph
    from kernelrag.patterns import op_pattern

    src = task("torch.log_softmax(x, dim=-1)", dims="batch_size = 64\ndim = 32768")
    combos = variant_choices(src)
    assert combos == [("coop",), ("registers",), ("three_pass",)]
    graph = ReasoningGraph(path=tmp_path / "graph.json")
    pattern = op_pattern(src)
    for transformation, speedup in (("row_in_registers", 1.1), ("separate_passes_l2", 1.2)):
        graph.record_outcome(pattern, [transformation], "NVIDIA H200", "success", speedup_vs_eager=2.0,
                             speedup_vs_compile=speedup, kernel_ms=1.0, log_id=f"ab/{transformation}")
    assert lower_order(combos, pattern, graph)[0] == ("coop",)
    graph.record_outcome(pattern, ["cooperative_rows"], "NVIDIA H200", "incorrect", log_id="ab/coop")
    assert lower_order(combos, pattern, graph)[-1] == ("coop",)


def test_a_new_variant_gets_its_round_beside_the_other_regions_best_measured_variant(tmp_path):
    """conv3d > group_norm > silu on the H100 (2026-12-06): the default (implicit GEMM, coop) went
    first because coop was new, though the graph had timed implicit GEMM at 0.45x and channels-last
    at 0.94x on this pattern; both rounds ran the slow conv (0.46x)."""
    from pathlib import Path

    from kernelrag.draft.lower.rank import lower_order
    from kernelrag.memory.graph import ReasoningGraph
    from kernelrag.patterns import op_pattern

    graph = ReasoningGraph(path=tmp_path / "graph.json")
    source = (Path(__file__).resolve().parents[1] / "bench" / "tasks" / "conv3d_group_norm_silu.py").read_text()
    pattern = op_pattern(source)
    for variant, speedup in (("implicit_gemm", 0.45), ("channels_last", 0.94)):
        graph.record_outcome(pattern, [variant, "chunked_rows"], "NVIDIA H200", "slower", speedup_vs_compile=speedup,
                             kernel_ms=1.0, log_id=f"ab/{variant}")
    combos = [("implicit_gemm", "coop"), ("implicit_gemm", "chunked"), ("channels_last", "coop"),
              ("channels_last", "chunked")]
    assert lower_order(combos, pattern, graph)[:2] == [("channels_last", "coop"), ("channels_last", "chunked")]
