"""The row-wise template's schedule for long rows: merged passes, one-pass softmax and variance,
per-row partials of a total, and the run-time hand-over of few long rows to the split."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import re

import pytest
import torch

from kernelrag.draft.lower.lowering import lower, plan_task
from kernelrag.draft.lower.protocol import Region
from test_lower import assert_close, run_both, task

LONG = "batch_size = 3\ndim = 33000"         # past row_limit (16384 at most): the looped path runs
PAIR = "torch.randn(batch_size, dim), torch.randn(batch_size, dim)"


def passes(source: str) -> int:
    """Loops over the row in the first kernel's looped branch (each one a read of the row)."""
    looped = source[source.index("    else:"):]
    looped = looped[:looped.index("\ndef ")]
    return len(re.findall(r"for start in range\(0, n_red, BLOCK_R\)", looped))


def test_softmax_statistics_take_one_pass():
    src = task("torch.softmax(x * 3.0, dim=-1)", dims=LONG)
    d = lower(src, "softmax", ("looped",))
    assert d.ok, d.reason
    assert "online_softmax" in d.source and passes(d.source) == 2     # statistics, then the output
    stats = d.source[d.source.index("# pass 0"):d.source.index("# last pass")]
    stats = stats[stats.index("for start"):stats.index("\n        v")]          # the loop body
    assert stats.count("tl.exp(") == 1                # one exponential an element: exp(-|x - max|)
    ref, out = run_both(src, d.source)
    assert_close(ref, out)


def test_masked_lanes_of_an_online_softmax_stay_finite():
    """Whole chunks of -inf (a masked row start) before the first finite value: no NaN."""
    src = task("torch.log_softmax(x.masked_fill(m, float('-inf')), dim=-1)", args="x, m", dims=LONG,
               inputs="torch.randn(batch_size, dim), torch.arange(dim)[None, :] < 5000")
    d = lower(src, "masked", ("looped",))
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert torch.isfinite(out[:, 5000:]).all()
    assert_close(ref, out)


def test_layer_norm_statistics_take_one_pass_and_keep_precision():
    """Inputs far from zero (mean 1000, std 1): sum(x^2) - n mean^2 would lose the variance in
    fp32; sums about each lane's first value keep it."""
    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=LONG,
               inputs="torch.randn(batch_size, dim) + 1000.0")
    d = lower(src, "ln", ("looped",))
    assert d.ok, d.reason
    assert "shifted_var" in d.source and passes(d.source) == 2
    ref, out = run_both(src, d.source)
    assert_close(ref, out, rtol=1e-3, atol=1e-3)


def test_independent_reductions_share_a_pass():
    """Cross-entropy with label smoothing: max, sum of exp, picked logit, row mean in one pass."""
    src = task("F.cross_entropy(x, t, label_smoothing=0.1)", args="x, t", dims=LONG,
               inputs="torch.randn(batch_size, dim), torch.randint(0, dim, (batch_size,))")
    d = lower(src, "ce", ("looped", "registers"))
    assert d.ok, d.reason
    assert passes(d.source) == 1
    ref, out = run_both(src, d.source)
    assert_close(ref, out)


def test_a_total_of_row_values_is_reduced_per_row_first():
    """A KL divergence of two log-softmaxes summed over the batch: the row kernel writes one
    partial per row, never the full-size pointwise KL."""
    src = task("F.kl_div(torch.log_softmax(x, -1), torch.log_softmax(y, -1), reduction='batchmean', "
               "log_target=True)", args="x, y", inputs=PAIR, dims=LONG)
    graph, steps = plan_task(src)
    first = next(s for s in steps if isinstance(s, Region))
    assert all(graph[o].shape == (3, 1) for o in first.outputs), [graph[o].shape for o in first.outputs]
    for combo in (("looped", "registers"), ("registers", "registers")):
        d = lower(src, "kl", combo)
        assert d.ok, d.reason
        ref, out = run_both(src, d.source)
        assert_close(ref, out)


def test_few_long_rows_go_to_the_split_at_run_time():
    """A draft planned for many short rows (``registers``) still splits a call with one long row."""
    src = task("torch.sum(x * y)", args="x, y", inputs=PAIR, dims="batch_size = 64\ndim = 8")
    d = lower(src, "total", ("registers",))
    assert d.ok, d.reason
    assert "return rowwise_0_split(" in d.source
    module: dict = {}
    exec(compile(d.source, "<total>", "exec"), module)
    calls: list[str] = []
    for name in ("rowwise_0_kernel", "rowwise_0_split_partial_kernel"):
        module[name].add_pre_run_hook(lambda *a, _n=name, **k: calls.append(_n))
    x, y = torch.randn(4, 70000), torch.randn(4, 70000)
    out = module["ModelNew"]()(x, y)
    assert calls == ["rowwise_0_split_partial_kernel"], calls
    torch.testing.assert_close(out, torch.sum(x * y), rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_the_new_schedules_compile_for_sm90(tmp_path):
    """The looped passes with riders and per-row partials, and the split hand-over, as Triton's
    code generator sees them (the interpreter does not check loop-carried types)."""
    pytest.importorskip("triton.backends.nvidia")
    kl = task("F.kl_div(torch.log_softmax(x, -1), torch.log_softmax(y, -1), reduction='batchmean', "
              "log_target=True)", args="x, y", inputs=PAIR, dims=LONG)
    cases = [(task("torch.softmax(x, dim=-1)", dims=LONG), ("looped",)),
             (task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=LONG), ("looped",)),
             (kl, ("looped", "registers")),
             (task("torch.sum(x * y)", args="x, y", inputs=PAIR, dims="batch_size = 2\ndim = 40000"), ("registers",))]
    results = compile_cases(cases, tmp_path)
    assert len(results) >= len(cases) and all(r["ok"] for r in results), \
        [r["error"][-800:] for r in results if not r["ok"]]


def compile_cases(cases: list[tuple[str, tuple[str, ...]]], tmp_path, adjust=None) -> list[dict]:
    """Each (task source, variants) lowered, its launches recorded under the interpreter (no
    program runs; ``adjust`` may rewrite them) and compiled for sm_90: the results of
    ``cuda_compile.compile_launches``."""
    from cuda_compile import compile_launches, launches_of

    modules = []
    for k, (src, combo) in enumerate(cases):
        d = lower(src, f"c{k}", combo)
        assert d.ok, d.reason
        path = tmp_path / f"c{k}.py"
        launches = launches_of(src, d.source, str(path), f"c{k}")
        modules.append((str(path), adjust(launches) if adjust else launches))
    return compile_launches(modules)


def test_a_pointwise_op_after_a_reshape_joins_the_norm_kernel():
    """Group norm's SiLU follows the (N, G, C/G, HW) -> (N, C, H, W) reshape: it moves before the
    view and becomes the norm kernel's epilogue; a slice keeps its op after it."""
    src = task("F.silu(self.gn(x))", body="self.gn = nn.GroupNorm(4, 8)", inputs="torch.randn(2, 8, 3, 5)")
    graph, steps = plan_task(src)
    (region,) = [s for s in steps if isinstance(s, Region)]
    assert "silu" in region.describe(graph)
    d = lower(src, "gn_silu")
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert_close(ref, out)
    sliced = task("F.silu(self.gn(x)[..., :-1])", body="self.gn = nn.GroupNorm(4, 8)", inputs="torch.randn(2, 8, 3, 5)")
    graph, steps = plan_task(sliced)
    assert sum(isinstance(s, Region) for s in steps) == 2


NANS_AND_TIES = ("torch.randint(0, 4, (batch_size, dim)).float().masked_fill("
                 "(torch.arange(dim)[None, :] % 997 == 400) & (torch.arange(batch_size)[:, None] % 2 == 0), "
                 "float('nan'))")


@pytest.mark.parametrize("dims", ["batch_size = 4\ndim = 3000", LONG.replace("3", "4"),
                                  "batch_size = 2\ndim = 70000"], ids=["registers", "looped", "split"])
@pytest.mark.parametrize("op", ["amax", "amin", "argmax", "argmin"])
def test_max_min_and_their_indices_keep_torchs_nan_and_tie_rules(op, dims):
    """A NaN is the extreme (max and min propagate it, argmax and argmin return the first
    NaN's index); among equal values the first index wins. tl.max and tl.maximum drop NaNs
    on a GPU, so the kernels say it themselves. Rows 0 and 2 hold NaNs, rows 1 and 3 only ties."""
    src = task(f"x.{op}(dim=-1)", dims=dims, inputs=NANS_AND_TIES)
    d = lower(src, op)
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert ref.isnan().any() if op in ("amax", "amin") else True
    assert out.shape == ref.shape and out.dtype == ref.dtype
    if op.startswith("arg"):
        assert torch.equal(out, ref), (out, ref)
    else:
        torch.testing.assert_close(out, ref, equal_nan=True)


@pytest.mark.slow
def test_the_nan_keeping_reductions_compile_for_sm90(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    from cuda_compile import compile_launches, launches_of

    modules = []
    for op, dims in (("amax", "batch_size = 4\ndim = 3000"), ("argmin", LONG), ("amin", "batch_size = 2\ndim = 70000")):
        src = task(f"x.{op}(dim=-1)", dims=dims, inputs=NANS_AND_TIES)
        path = str(tmp_path / f"{op}.py")
        modules.append((path, launches_of(src, lower(src, op).source, path, op)))
    results = compile_launches(modules)
    assert len(results) >= 4 and all(r["ok"] for r in results), [r["error"] for r in results if not r["ok"]]


@pytest.mark.parametrize("op", ["amax", "amin"])
def test_the_column_variant_keeps_torchs_nan_rule_too(op):
    """Over a middle dim (the column kernel): a NaN anywhere in a column is that column's result."""
    src = task(f"x.{op}(dim=1)", dims="batch_size = 4\ndim = 300",
               inputs="torch.randn(batch_size, 64, dim).masked_fill(torch.arange(dim) % 37 == 3, float('nan'))")
    d = lower(src, op)
    assert d.ok and "_nan_" in d.source, d.reason
    ref, out = run_both(src, d.source)
    assert ref.isnan().any()
    torch.testing.assert_close(out, ref, equal_nan=True)


@pytest.mark.parametrize("dims, warps, block", [(LONG, 32, 4096), ("batch_size = 3\ndim = 16384", 16, 4096),
                                                ("batch_size = 3\ndim = 3000", 4, 1024)])
def test_long_rows_loop_at_16_warps_or_more_so_the_rows_in_flight_fit_in_l2(dims, warps, block):
    """At 4 warps an H200 SM holds 16 programs: rows of 16384 fp32 then overflow L2 before their
    second read (layer and RMS norm at 57-63% of the roofline, 2026-12-02); rows of 32768 run
    two 32-warp programs an SM (the survey of 2026-12-05)."""
    from cuda_compile import launches_of

    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=dims)
    d = lower(src, "ln", ("looped",))
    assert d.ok, d.reason
    [launch] = launches_of(src, d.source, name="ln")
    assert launch["options"]["num_warps"] == warps and launch["kwargs"]["BLOCK_R"] == block, launch


def test_looped_is_not_offered_where_registers_loops_too():
    """Rows past row_limit at the traced size: ``registers`` emits the looped passes, so a round
    on ``looped`` would re-time the same kernel; shorter rows keep both."""
    from kernelrag.draft.lower.lowering import variant_choices

    long_rows = variant_choices(task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=LONG))
    assert ("looped",) not in long_rows and ("registers",) in long_rows, long_rows
    assert ("looped",) in variant_choices(task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)"))


def test_the_evidence_names_what_runs_at_the_traced_size():
    """``registers`` over rows past row_limit runs the looped passes: its evidence says
    recompute_over_store, never row_in_registers (which the graph would then rank elsewhere)."""
    ln = "self.ln = nn.LayerNorm(dim)"
    long_rows, short_rows = (lower(task("self.ln(x)", body=ln, dims=d), "ln", ("registers",))
                             for d in (LONG, "batch_size = 6\ndim = 300"))
    assert "recompute_over_store" in long_rows.transformations and "row_in_registers" not in long_rows.transformations
    assert "row_in_registers" in short_rows.transformations


@pytest.mark.parametrize("expr, body, dim, held", [
    ("torch.softmax(x * 0.125, dim=-1)", "", 16384, True),
    ("torch.softmax(x * 0.125, dim=-1)", "", 32768, False),
    ("x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.w",
     "self.w = nn.Parameter(torch.randn(dim))", 16384, True),
    ("self.ln(x)", "self.ln = nn.LayerNorm(dim)", 16384, True),
    ("self.ln(x)", "self.ln = nn.LayerNorm(dim)", 32768, False),
    ("torch.softmax(x + y, dim=-1)", "", 32768, False),
], ids=["softmax-16k", "softmax-32k", "rms-16k", "ln-16k", "ln-32k", "two-operands-32k"])
def test_rows_stay_in_registers_while_their_operands_fit(expr, body, dim, held):
    """One read of each row instead of two: rows past MAX_FUSED stay in registers while the row
    operands' values fit 96 a thread at 16 warps, up to 16384 (a softmax held at 32768 ran
    latency-bound on the H200);
    then ``looped`` is a real alternative and stays in the rounds."""
    from kernelrag.draft.lower.lowering import variant_choices

    pair = "y" in expr
    src = task(expr, body=body, args="x, y" if pair else "x", inputs=PAIR if pair else "torch.randn(batch_size, dim)",
               dims=f"batch_size = 2\ndim = {dim}")
    d = lower(src, "held", ("registers",))
    assert d.ok, d.reason
    assert ("row_in_registers" in d.transformations) == held, d.transformations
    assert (("looped",) in variant_choices(src)) == held


@pytest.mark.slow
def test_the_longest_rows_held_compile_for_sm90_without_spills(tmp_path):
    """ptxas for sm_90: the rows row_limit keeps in registers fit 128 registers a thread."""
    pytest.importorskip("triton.backends.nvidia")
    from cuda_compile import compile_launches, launches_of

    cases = [task("torch.softmax(x * 0.125, dim=-1)", dims="batch_size = 2\ndim = 16384"),
             task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims="batch_size = 2\ndim = 16384")]
    modules = []
    for k, src in enumerate(cases):
        d = lower(src, f"held{k}", ("registers",))
        assert "row_in_registers" in d.transformations
        path = tmp_path / f"held{k}.py"
        launches = launches_of(src, d.source, str(path), f"held{k}")
        assert launches[0]["options"]["num_warps"] == 16 and launches[0]["kwargs"]["ROW_IN_REGISTERS"]
        modules.append((str(path), launches))
    results = compile_launches(modules)
    assert results and all(r["ok"] and r["spill_bytes"] == 0 and r["registers"] <= 128 for r in results), results


FEW_LONG = "batch_size = 3\ndim = 70000"      # few rows past 64K: the chunked variant's regime
SHORT_CHUNKED = "batch_size = 3\ndim = 7000"  # seven chunks (the last ragged) where the variant is asked for:
#                                               the interpreter's time grows with the programs


def test_few_long_norm_rows_in_chunks_keep_the_variance_far_from_zero():
    """A norm over few long rows runs as rows x chunks programs. The variance combines per-chunk
    squared deviations about each chunk's own mean (Chan's rule): inputs at mean 1000, std 1,
    would lose it in fp32 as sum(x^2) - n mean^2."""
    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=FEW_LONG,
               inputs="torch.randn(batch_size, dim) + 1000.0")
    d = lower(src, "ln", ("chunked",))
    assert d.ok, d.reason
    assert "[chunked]" in d.reason and "chunked_rows" in d.transformations
    assert "_stats_kernel" in d.source and "_combine_kernel" in d.source and "_apply_kernel" in d.source
    ref, out = run_both(src, d.source)
    assert_close(ref, out, rtol=1e-3, atol=1e-3)


def test_chunked_softmax_rescales_each_chunks_sum_and_survives_all_masked_chunks():
    """The online softmax's chunk sums are rescaled to the row max; chunks wholly -inf (a masked
    row start longer than a chunk) add nothing and make no NaN."""
    src = task("torch.softmax(x.masked_fill(m, float('-inf')) * 2.0, dim=-1)", args="x, m", dims=SHORT_CHUNKED,
               inputs="torch.randn(batch_size, dim), torch.arange(dim)[None, :] < 4000")
    d = lower(src, "masked", ("chunked",))
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert torch.isfinite(out).all()
    assert_close(ref, out)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_chunked_rows_of_16bit_inputs_accumulate_in_fp32_and_store_their_dtype(dtype):
    src = task("torch.softmax(x, dim=-1)", dims=SHORT_CHUNKED, inputs=f"torch.randn(batch_size, dim).to(torch.{dtype})")
    d = lower(src, "soft16", ("chunked",))
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert out.dtype == ref.dtype == getattr(torch, dtype)
    assert_close(ref.float(), out.float(), rtol=1e-2, atol=1e-6)


def test_chunked_is_offered_only_for_one_statistics_pass_and_a_full_size_output():
    from kernelrag.draft.lower.lowering import variant_choices

    many = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims="batch_size = 4096\ndim = 70000")
    assert not any("chunked" in combo for combo in variant_choices(many))       # many rows: one program each
    total = task("torch.sum(x, dim=-1)", dims=FEW_LONG)                       # no full-size output
    assert not any("chunked" in combo for combo in variant_choices(total))
    few = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=FEW_LONG)
    # the row variants would loop in about two waves; the cooperative kernel comes first (test_lower_coop)
    assert variant_choices(few) == [("coop",), ("chunked",)]


@pytest.mark.slow
def test_the_chunked_kernels_compile_for_sm90(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    group_norm = task("self.gn(x)", body="self.gn = nn.GroupNorm(4, 32)", dims=FEW_LONG,
                      inputs="torch.randn(2, 32, 128, 128)")     # two reduced dims: sizes as constants
    cases = [(task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=FEW_LONG), ("chunked",)),
             (task("torch.softmax(x, dim=-1)", dims=FEW_LONG), ("chunked",)), (group_norm, ("chunked",))]
    assert "n3: tl.constexpr" in lower(group_norm, "gn", ("chunked",)).source
    results = compile_cases(cases, tmp_path)
    assert len(results) == 9 and all(r["ok"] for r in results), [r["error"][-800:] for r in results if not r["ok"]]
    assert all(r["spill_bytes"] in (0, None) for r in results), results


def test_long_rows_list_their_launch_configurations_and_each_computes_the_same():
    """The looped passes over long rows launch CONFIGS[0]; the configuration search pins another
    (``pinned_source``), which then launches and still matches the reference. Short rows list none."""
    import tempfile

    from cuda_compile import load, record
    from kernelrag.memory.tuning import pinned_source, source_configs
    from kernelrag.task import load_task

    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=LONG)
    d = lower(src, "ln", ("looped",))
    assert d.ok, d.reason
    configs = source_configs(d.source)
    assert configs[0] == {"BLOCK_R": 4096, "num_warps": 32} and len(configs) > 4     # rows of 33000
    for k, cfg in enumerate((configs[1], configs[-1])):
        pinned = pinned_source(d.source, cfg)
        with tempfile.TemporaryDirectory() as folder:
            cand = load(pinned, os.path.join(folder, f"cand_ln_cfg{k}.py"))
            launches = record(cand, execute=False)
            t = load_task(src, f"ln_cfg_task{k}")
            cand.ModelNew(*t.get_init_inputs())(*t.get_inputs())
        [launch] = launches
        assert (launch["kwargs"]["BLOCK_R"], launch["options"]["num_warps"]) == (cfg["BLOCK_R"], cfg["num_warps"])
        ref, out = run_both(src, pinned)
        assert_close(ref, out, rtol=1e-3, atol=1e-3)
    short = lower(task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims="batch_size = 3\ndim = 3000"),
                  "ln", ("looped",))
    assert short.ok and source_configs(short.source) == []
