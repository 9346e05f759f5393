"""The elementwise template's hoisted variant: operands broadcast over the leading dims are loaded
once per program, which then loops over those dims.

On the CPU the interpreter runs the same loop: these tests check which tasks it serves, the
arithmetic on planes smaller than a block and through strided operands, the launch the GPU gets,
and that the kernel compiles for sm_90 with the hoisted loads outside the loop."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path

import pytest

from kernelrag.draft.lower.lowering import lower, variant_choices
from test_lower import assert_close, run_both, task
from test_lower_rowwise import compile_cases

SUITE = Path(__file__).parents[1] / "bench" / "tasks"
ROTARY = ("q * cos + torch.cat((-q[..., 4:], q[..., :4]), dim=-1) * sin, "
          "k * cos + torch.cat((-k[..., 4:], k[..., :4]), dim=-1) * sin")
ROTARY_IN = ("torch.randn(batch_size, 3, dim, 8), torch.randn(batch_size, 3, dim, 8), "
             "torch.randn(dim, 8), torch.randn(dim, 8)")


def test_rotary_embedding_defaults_to_hoisting_cos_and_sin():
    src = (SUITE / "rotary_embedding_qk.py").read_text()
    assert variant_choices(src) == [("hoisted",), ("block1024",)]
    d = lower(src, "rot")
    assert d.ok and "[hoisted]" in d.reason and "broadcast_hoisting" in d.transformations, d.reason
    loop = d.source.index("for o in range(o_lo, tl.minimum(o_lo + OUTER, n_outer))")
    # cos and sin (operands 1 and 4) before the loop, at the plane's lanes; q and k inside it
    assert d.source.index("v2 = tl.load(in1_ptr + ((inner % (n2 * n3))") < loop
    assert d.source.index("v3 = tl.load(in4_ptr + ((inner % (n2 * n3))") < loop
    assert loop < d.source.index("v0 = tl.load(in0_ptr + ((offs)") and loop < d.source.index("v1 = tl.load(in5_ptr")


@pytest.mark.parametrize("forward, args, inputs, dims", [
    (ROTARY, "q, k, cos, sin", ROTARY_IN, "batch_size = 2\ndim = 5"),
    # a bias over the last dim: the loop runs over the two leading dims
    ("torch.relu(x + b) * 0.5", "x, b", "torch.randn(batch_size, 7, dim), torch.randn(dim)",
     "batch_size = 3\ndim = 300"),
    # a table over the last two dims read through a transposed view, and x through one too
    ("x.transpose(1, 2) * t.t() - 1.0", "x, t", "torch.randn(batch_size, dim, 6), torch.randn(dim, 6)",
     "batch_size = 9\ndim = 40"),
], ids=["rotary_plane_of_40", "bias_over_the_last_dim", "strided_table"])
def test_hoisted_kernels_match_the_reference(forward, args, inputs, dims):
    src = task(forward, args=args, inputs=inputs, dims=dims)
    d = lower(src, "hoist", ("hoisted",))
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    for r, o in zip(ref if isinstance(ref, tuple) else (ref,), out if isinstance(out, tuple) else (out,)):
        assert_close(r, o)


@pytest.mark.parametrize("forward, args, inputs", [
    ("x + y", "x, y", "torch.randn(batch_size, dim), torch.randn(batch_size, dim)"),
    ("x * s", "x, s", "torch.randn(batch_size, dim), torch.randn(batch_size, 1)"),
])
def test_no_operand_broadcast_over_a_leading_dim_leaves_the_flat_kernel(forward, args, inputs):
    """Same-shaped operands, or one broadcast over the last dim only: nothing is the same on
    every step of a loop over the leading dims."""
    src = task(forward, args=args, inputs=inputs, dims="batch_size = 64\ndim = 4096")
    assert variant_choices(src) == [("block1024",)]
    d = lower(src, "flat", ("hoisted",))
    assert not d.ok and "no operand is broadcast over a leading dim" in d.reason, d.reason


def test_few_loop_steps_or_a_small_plane_are_not_worth_a_round():
    """Four rows reuse a bias four times; a plane of 300 lanes would leave most of a block idle.
    Asked for, the variant is still drafted (the tests above run such shapes)."""
    few = task("x + b", args="x, b", inputs="torch.randn(batch_size, dim), torch.randn(dim)",
               dims="batch_size = 4\ndim = 4096")
    small = task("x + b", args="x, b", inputs="torch.randn(batch_size, dim), torch.randn(dim)",
                 dims="batch_size = 4096\ndim = 300")
    assert variant_choices(few) == [("block1024",)] and variant_choices(small) == [("block1024",)]
    assert lower(few, "few", ("hoisted",)).ok
    many = task("x + b", args="x, b", inputs="torch.randn(batch_size, dim), torch.randn(dim)",
                dims="batch_size = 4096\ndim = 4096")
    assert variant_choices(many) == [("hoisted",), ("block1024",)]


def test_the_loop_steps_keep_the_grid_within_its_second_dim():
    """600,000 rows of a 4-lane plane: eight steps a program would need 75,000 programs along the
    grid's second dim (at most 65,535), so each takes ten. The launch is recorded, not run."""
    from cuda_compile import launches_of

    src = task("x + b", args="x, b", inputs="torch.empty(batch_size, dim), torch.empty(dim)",
               dims="batch_size = 600000\ndim = 4")
    d = lower(src, "wide", ("hoisted",))
    assert d.ok, d.reason
    (launch,) = launches_of(src, d.source, name="wide")
    n_outer, steps = launch["args"][-2:]
    assert (n_outer, steps, launch["kwargs"]["BLOCK"]) == (600000, 10, 128), launch


@pytest.mark.slow
def test_the_hoisted_rotary_kernel_compiles_for_sm90(tmp_path):
    """The loop's variables keep one type (a scalar step beside the lanes' int32 index), and the
    kernel holds no spill."""
    pytest.importorskip("triton.backends.nvidia")
    src = (SUITE / "rotary_embedding_qk.py").read_text().replace("batch_size = 16", "batch_size = 1") \
        .replace("num_heads = 32", "num_heads = 4").replace("seq_len = 2048", "seq_len = 64")
    (c,) = compile_cases([(src, ("hoisted",))], tmp_path)
    assert c["ok"], c["error"][-800:]
    assert c["spill_bytes"] == 0, c
