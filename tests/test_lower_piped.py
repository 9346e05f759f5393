"""The row-wise template's pipelined variant: persistent programs whose next rows are copied ahead.

On the CPU the interpreter runs the same loop (its ``num_stages`` has no effect there): these
tests check the arithmetic over ragged rows and rows left over by the grid, the launch the GPU
gets, and that Triton's pipeliner takes the row's loads off ``ld.global`` on sm_90."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path

import pytest
import torch

from kernelrag.draft.lower.lowering import lower, variant_choices
from test_lower import assert_close, run_both, task
from test_lower_rowwise import compile_cases

SUITE = Path(__file__).parents[1] / "bench" / "tasks"
RAGGED = "batch_size = 37\ndim = 300"     # rows of 300 lanes in 512, and 37 rows on 4 programs


def test_many_long_rows_held_in_registers_default_to_the_pipelined_variant():
    for name in ("layer_norm", "layer_norm_relu_residual", "rms_norm_silu", "residual_add_layer_norm_bf16"):
        combos = variant_choices((SUITE / f"{name}.py").read_text())
        assert combos[0] == ("piped",) and ("registers",) in combos and ("looped",) in combos, (name, combos)
    d = lower((SUITE / "layer_norm.py").read_text(), "ln")
    assert d.ok and "[piped]" in d.reason and "pipelined_rows" in d.transformations, d.reason
    loop = d.source.index("for row_id in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES)")
    # the weight and bias are the same for every row: loaded once, before the loop; x inside it
    assert d.source.index("v1 = tl.load(in1_ptr + in1_lane") < loop < d.source.index("v0 = tl.load(in0_ptr + in0_row")


@pytest.mark.parametrize("dims", ["batch_size = 512\ndim = 16384", "batch_size = 4096\ndim = 4096",
                                  "batch_size = 2048\ndim = 32768"])
def test_few_short_or_too_long_rows_keep_the_other_variants(dims):
    """512 rows are under four a program; rows of 4096 fit several programs an SM; rows of 32768
    do not fit registers (the variant is then unavailable, not only dominated)."""
    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims=dims)
    assert all("piped" not in combo for combo in variant_choices(src)), variant_choices(src)


@pytest.mark.parametrize("forward, body, inputs, args", [
    ("torch.relu(self.ln(x)) + x", "self.ln = nn.LayerNorm(dim)", "torch.randn(batch_size, dim)", "x"),
    ("F.silu(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w)",
     "self.w = nn.Parameter(torch.randn(dim))", "torch.randn(batch_size, dim)", "x"),
    ("torch.softmax(x + b, dim=-1)", "", "torch.randn(batch_size, dim), torch.randn(batch_size, dim)", "x, b"),
    # a per-row operand (loaded in the loop, once a row) beside the hoisted weight and bias
    ("self.ln(x) * g", "self.ln = nn.LayerNorm(dim)", "torch.randn(batch_size, dim), torch.rand(batch_size, 1)",
     "x, g"),
], ids=["layer_norm_relu_residual", "rms_norm_silu", "softmax_of_a_sum", "per_row_scale"])
def test_pipelined_rows_match_the_reference(forward, body, inputs, args):
    src = task(forward, body=body, inputs=inputs, args=args, dims=RAGGED)
    d = lower(src, "piped", ("piped",))
    assert d.ok, d.reason
    assert_close(*run_both(src, d.source))


def test_16bit_rows_accumulate_in_fp32_and_store_their_dtype():
    src = task("self.ln(x + r)", body="self.ln = nn.LayerNorm(dim).to(torch.bfloat16)", args="x, r",
               inputs="torch.randn(batch_size, dim).to(torch.bfloat16), torch.randn(batch_size, dim).to(torch.bfloat16)",
               dims=RAGGED)
    d = lower(src, "piped16", ("piped",))
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert out.dtype == torch.bfloat16
    assert_close(ref.float(), out.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("args, inputs, stages", [
    ("x", "torch.empty(2048, 16384)", 3),
    ("x, r", "torch.empty(2048, 16384), torch.empty(2048, 16384)", 2),
    ("x, r", "torch.empty(2048, 16384).half(), torch.empty(2048, 16384).half()", 3)])
def test_the_rows_copied_ahead_fit_shared_memory(args, inputs, stages):
    """CONFIGS[0] asks for three stages at 32 warps: two rows copied ahead, 128 KB at 16384 fp32
    for one streamed operand (a layer norm's x); with two fp32 operands (a softmax of x + r) that
    would be 256 KB, so two stages run. The launch is recorded, not run."""
    from cuda_compile import launches_of

    src = task("self.ln(x)" if args == "x" else "torch.softmax(x + r, dim=-1)", body="self.ln = nn.LayerNorm(dim)", args=args,
               inputs=inputs, dims="batch_size = 2048\ndim = 16384")
    d = lower(src, "clamp", ("piped",))
    assert d.ok, d.reason
    (launch,) = launches_of(src, d.source, name="clamp")
    assert (launch["kwargs"]["BLOCK_R"], launch["kwargs"]["STAGES"]) == (16384, stages), launch


@pytest.mark.slow
def test_the_row_loads_leave_ld_global_on_sm90(tmp_path):
    """Layer norm over rows of 16384 fp32 at 32 warps: with three stages the row's loads become
    cp.async copies into two 64 KB buffers; only the weight's and bias's loads, before the loop,
    stay ``ld.global`` (four 16-byte loads a thread each)."""
    pytest.importorskip("triton.backends.nvidia")
    src = task("self.ln(x)", body="self.ln = nn.LayerNorm(dim)", dims="batch_size = 4\ndim = 16384")

    def stages(n):
        def adjust(launches):
            return [{**launch, "kwargs": {**launch["kwargs"], "STAGES": n}} for launch in launches]
        return adjust

    piped = compile_cases([(src, ("piped",))], tmp_path, adjust=stages(3))
    held = compile_cases([(src, ("piped",))], tmp_path, adjust=stages(1))
    (p,), (h,) = piped, held
    assert p["ok"] and h["ok"], (p["error"][-800:], h["error"][-800:])
    assert p["shared_bytes"] >= 2 * 16384 * 4 and h["shared_bytes"] < 16384
    assert (p["ld_global"], h["ld_global"]) == (8, 12), (p, h)
    assert p["spill_bytes"] == 0 and p["registers"] <= 64, p


def test_an_operand_the_same_for_every_row_is_checked_at_run_time():
    """The weight is loaded once for every row; handed one that varies over the rows, the
    launcher refuses rather than normalize every row with the first row's weight."""
    from kernelrag.task import load_task

    src = task("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w", args="x, w",
               inputs="torch.randn(batch_size, dim), torch.randn(dim)", dims=RAGGED)
    d = lower(src, "guard", ("piped",))
    assert d.ok, d.reason
    cand = load_task(d.source, "guard_cand")
    x = torch.randn(37, 300)
    assert_close(cand.ModelNew()(x, torch.ones(300)), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    with pytest.raises(ValueError, match="varies over the rows"):
        cand.ModelNew()(x, torch.randn(37, 300))


def test_a_looped_regions_configs_list_is_kept_beside_the_pipelined_one():
    """A module holds one ``CONFIGS`` list. The looped launcher reads ``BLOCK_R`` from it
    unchecked, so the pipelined region's list yields and its launcher takes its own first row."""
    src = task("(self.ln(x), torch.log_softmax(y, dim=-1))", body="self.ln = nn.LayerNorm(dim)", args="x, y",
               inputs="torch.randn(batch_size, dim), torch.randn(3, 9000)", dims=RAGGED)
    d = lower(src, "two", ("piped", "looped"))
    assert d.ok and "[piped]" in d.reason and "[looped]" in d.reason, d.reason
    assert d.source.count("CONFIGS = [") == 1 and '{"BLOCK_R": 4096}' in d.source and '{"STAGES"' not in d.source
    (ref_ln, ref_sm), (ln, sm) = run_both(src, d.source)
    assert_close(ref_ln, ln)
    assert_close(ref_sm, sm)
