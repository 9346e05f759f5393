"""The row-wise template's column variant: reductions that keep the innermost dim, tiled along it,
in one stage or split across programs, with torch's argmax / argmin ties and NaNs."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path

import pytest
import torch

from kernelrag.draft.lower.lowering import lower, plan_task, variant_choices
from kernelrag.draft.lower.protocol import Region
from kernelrag.task import load_task
from test_lower import assert_close, task

SUITE = Path(__file__).parents[1] / "bench" / "tasks"
# (4, 300, 40): 4 column tiles, fewer than MIN_TILES, so the launcher splits the 300 reduced positions;
# (264, 5, 16): 264 tiles of 16 columns whose 5 reduced positions are under one chunk: one stage
SPLIT, SINGLE = "torch.randn(4, 300, 40)", "torch.randn(264, 5, 16)"
STAGES = {SPLIT: ["rowwise_0_partial_kernel", "rowwise_0_combine_kernel"], SINGLE: ["rowwise_0_kernel"]}
# few distinct values (ties everywhere), NaNs in some columns, one column of -inf only
TIES = ("torch.randint(0, 3, {shape}).float().masked_fill(torch.rand({shape}) < 0.002, float('nan'))"
        ".index_fill(2, torch.tensor([3]), float('-inf'))")


def launches(src: str) -> tuple[list[str], list, object, object]:
    """(the kernels the default draft launched, the inputs, reference output, draft output), as
    ``test_lower.run_both`` runs them."""
    d = lower(src, "t")
    assert d.ok, d.reason
    t, c = load_task(src, "t_task"), load_task(d.source, "t_cand")
    calls: list[str] = []
    for name, value in vars(c).items():
        if name.endswith("_kernel"):
            value.add_pre_run_hook(lambda *a, _n=name, **k: calls.append(_n))
    torch.manual_seed(0)
    ref_model = t.Model(*t.get_init_inputs())
    with torch.no_grad():
        for p in ref_model.parameters():
            p.uniform_(0.5, 1.5)
    inputs = t.get_inputs()
    ours = c.ModelNew(*t.get_init_inputs())
    ours.load_state_dict(ref_model.state_dict())
    return calls, inputs, ref_model(*[x.clone() for x in inputs]), ours(*inputs)


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("shape", [(4, 300, 40), (264, 5, 16)], ids=["split", "single"])
def test_arg_reductions_break_ties_and_nans_as_torch(fn, shape):
    inputs = TIES.format(shape=shape)
    src = task(f"torch.{fn}(x, dim=1)", inputs=inputs)
    calls, (x,), ref, out = launches(src)
    assert calls == STAGES[SPLIT if shape[0] == 4 else SINGLE], calls
    nan_cols = x.isnan().any(dim=1)
    assert nan_cols.any() and not nan_cols.all(), "the inputs must hold columns with and without NaN"
    assert torch.equal(ref[:, 3], torch.zeros_like(ref[:, 3]))     # the all -inf column: index 0
    assert torch.equal(out, ref)


@pytest.mark.parametrize("inputs", [SPLIT, SINGLE], ids=["split", "single"])
@pytest.mark.parametrize("forward", ["x.sum(dim=1)", "x.mean(dim=1, keepdim=True)", "torch.amax(x, dim=1)",
                                     "torch.amin(x, dim=1, keepdim=True)", "torch.prod(1.0 + 0.01 * x, dim=1)",
                                     "x.sum(dim=(0, 1))", "x.mean(dim=(0, 1), keepdim=True)"])
def test_reductions_keeping_the_innermost_dim(forward, inputs):
    src = task(forward, inputs=inputs)
    calls, _, ref, out = launches(src)
    # keeping the last dim only leaves one tile of columns for either shape: a split
    assert calls == STAGES[SPLIT if "(0, 1)" in forward else inputs], calls
    assert_close(ref, out, rtol=1e-4, atol=1e-4)


def test_prologue_and_epilogue_fuse_with_a_per_column_operand():
    """(x * w).sum(1, keepdim=True) + b: w and b vary along the kept innermost dim only, one load per tile."""
    src = task("torch.tanh((x * self.w).sum(dim=1, keepdim=True) + self.b)", body="self.w = nn.Parameter(torch.randn(40))\n"
               "self.b = nn.Parameter(torch.randn(40))", inputs=SPLIT)
    graph, steps = plan_task(src)
    assert sum(isinstance(s, Region) for s in steps) == 1
    calls, _, ref, out = launches(src)
    assert calls == STAGES[SPLIT], calls
    assert_close(ref, out, rtol=1e-4, atol=1e-4)


def test_an_operand_strided_along_the_innermost_dim_takes_the_row_kernel():
    """A transposed operand: the reduced dim is the contiguous one, so the row kernel's lanes coalesce."""
    src = task("torch.sum(x.transpose(1, 2), dim=1)", inputs="torch.randn(4, 40, 300)")
    calls, _, ref, out = launches(src)
    assert calls == ["rowwise_0_rows_kernel"], calls
    assert_close(ref, out, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["argmax_dim", "mean_pool_linear"])
def test_the_strided_reduction_tasks_lower_to_the_column_variant(name):
    d = lower((SUITE / f"{name}.py").read_text(), name)
    assert d.ok, d.reason
    assert "rowwise: " in d.reason and "[column]" in d.reason, d.reason


@pytest.mark.parametrize("name", ["mean_dim", "mean_pool_linear"])
def test_no_row_variant_is_offered_where_the_column_rule_holds(name):
    """Graph evidence for row-in-registers elsewhere once ranked a row variant first for
    mean_pool_linear (every lane strided by 4096: 6.9 ms against column's 1.1 ms on the H200)."""
    combos = variant_choices((SUITE / f"{name}.py").read_text())
    assert combos and all(combo[0] == "column" for combo in combos), combos
    assert variant_choices(task("x.sum(dim=1)", inputs="torch.randn(64, 300, 8)"))[1:], \
        "an innermost dim of 8 is below the column rule: the row variants stay"


@pytest.mark.parametrize("outer, split", [(2048, 4), (4224, 1)])
def test_a_few_thousand_tiles_split_so_the_last_wave_is_small(outer, split):
    """argmax_dim's 2048 tiles of 4096 reduced rows ran at three resident programs an SM in 5.2
    waves, the last 17% full: under MIN_TILES tiles the reduced range splits into chunks of at
    least four tiles. The launches are recorded, not run (the inputs are never read)."""
    from cuda_compile import record

    from kernelrag.draft.lower.templates.rowwise_column import MIN_TILES

    assert MIN_TILES == 4224
    d = lower(task("torch.argmax(x, dim=1)", inputs="torch.randn(4, 512, 128)"), "t")
    assert d.ok and "[column]" in d.reason, d.reason
    cand = load_task(d.source, "t_cand")
    seen = record(cand, execute=False)
    cand.ModelNew()(torch.empty(outer, 512, 128))      # one 128-column tile a row of the outer dim
    kernels = [launch["kernel"] for launch in seen]
    if split == 1:
        assert kernels == ["rowwise_0_kernel"], kernels
    else:
        assert kernels == ["rowwise_0_partial_kernel", "rowwise_0_combine_kernel"], kernels
        n_red, chunk = seen[0]["args"][2], seen[0]["args"][-1]
        assert (n_red, -(-n_red // chunk), chunk % seen[0]["kwargs"]["BLOCK_R"]) == (512, split, 0)


def test_the_innermost_dim_reduced_keeps_the_row_kernel():
    d = lower(task("torch.argmax(x, dim=2)", inputs=SPLIT), "t")
    assert d.ok and "[column]" not in d.reason, d.reason
    assert "[column]" not in lower(task("x.sum(dim=1)", inputs="torch.randn(64, 300, 8)"), "t").reason


@pytest.mark.slow
def test_the_column_kernels_compile_for_sm90(tmp_path):
    """Single stage, partials and combine (sum with a fused epilogue, argmax), and the row
    fallback, as Triton's code generator sees them."""
    pytest.importorskip("triton.backends.nvidia")
    from cuda_compile import compile_launches, launches_of

    cases = [task("torch.argmax(x, dim=1)", inputs=SPLIT), task("torch.argmin(x, dim=1)", inputs=SINGLE),
             task("torch.tanh((x * self.w).sum(dim=(0, 1)) * 0.5)", body="self.w = nn.Parameter(torch.randn(40))",
                  inputs=SPLIT),
             task("x.mean(dim=1)", inputs=SINGLE), task("torch.prod(x, dim=1)", inputs=SPLIT),
             task("torch.sum(x.transpose(1, 2), dim=1)", inputs="torch.randn(4, 40, 300)")]
    modules, kernels = [], set()
    for k, src in enumerate(cases):
        d = lower(src, f"c{k}")
        assert d.ok and "[column]" in d.reason, d.reason
        path = tmp_path / f"c{k}.py"
        seen = launches_of(src, d.source, str(path), f"c{k}")
        kernels |= {launch["kernel"] for launch in seen}
        modules.append((str(path), seen))
    assert {"rowwise_0_kernel", "rowwise_0_partial_kernel", "rowwise_0_combine_kernel",
            "rowwise_0_rows_kernel"} <= kernels, kernels
    results = compile_launches(modules)
    assert results and all(r["ok"] for r in results), [r["error"][-800:] for r in results if not r["ok"]]
