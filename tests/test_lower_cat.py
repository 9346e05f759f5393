"""Slices read as strided operands, and cat / stack fused into the elementwise chain as a per-lane choice."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from kernelrag.config import REPO_ROOT
from kernelrag.draft.lower.lowering import lower, plan_task
from kernelrag.draft.lower.protocol import Region
from kernelrag.task import load_task
from kernelrag.verify.task import ShrinkLevel, shrink
from test_lower import assert_close, run_both, task

ROTARY = REPO_ROOT / "bench" / "tasks" / "rotary_embedding_qk.py"
THREE = "torch.randn(4, 5, 7), torch.randn(4, 3, 7), torch.randn(4, 1, 7)"

CASES = {   # name -> (task source, kernels expected)
    "cat_middle_dim": (task("torch.cat((x, torch.sigmoid(y) * 2.0), dim=1) - 1.0", args="x, y",
                            inputs="torch.randn(4, 3, 5), torch.randn(4, 6, 5)"), 1),
    "cat_three_widths": (task("torch.cat((x[..., :2], torch.relu(y), z * 3.0), dim=-1) + b", args="x, y, z, b",
                              inputs="torch.randn(6, 9), torch.randn(6, 7), torch.randn(6, 4), torch.randn(13)"), 1),
    "cat_broadcast_piece": (task("torch.cat((x, y + z), dim=1)", args="x, y, z", inputs=THREE), 1),
    "cat_first_dim_int": (task("torch.cat((x, y + 1), dim=0) * 3", args="x, y",
                               inputs="torch.randint(0, 9, (2, 5)), torch.randint(0, 9, (3, 5))"), 1),
    "stepped_slice": (task("x[:, ::2] * y[:, 1::3] + x[:, 1:10:2]", args="x, y",
                           inputs="torch.randn(5, 10), torch.randn(5, 15)"), 1),
    "stack_new_middle_dim": (task("torch.stack((x, -x, x * y), dim=1).exp()", args="x, y",
                                  inputs="torch.randn(4, 6), torch.randn(4, 6)"), 1),
    "split_narrow_cat": (task("torch.cat((x.split([3, 5], dim=1)[1], x.narrow(1, 1, 2) * 2.0), dim=1)",
                              inputs="torch.randn(4, 8)"), 1),
    "nested_cat": (task("torch.cat((torch.cat((x, y), dim=-1) * 2.0, z.chunk(2, dim=0)[1]), dim=0)",
                        args="x, y, z", inputs="torch.randn(3, 4), torch.randn(3, 2), torch.randn(2, 6)"), 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cat_and_slices_fuse_into_one_elementwise_kernel(name):
    src, kernels = CASES[name]
    graph, steps = plan_task(src)
    assert sum(isinstance(s, Region) for s in steps) == kernels, graph.dump()
    d = lower(src, name)
    assert d.ok, d.reason
    ref, out = run_both(src, d.source)
    assert_close(ref, out)


def test_a_slice_is_a_strided_view_not_a_copy():
    d = lower(CASES["stepped_slice"][0], "stepped_slice")
    assert d.ok, d.reason
    assert "x[:, ::2]   # a view: free" in d.source and ".contiguous()" not in d.source


def test_rotary_embedding_is_one_kernel_that_matches_on_the_cpu():
    """q * cos + rotate_half(q) * sin for q and k: one launch; each half of the rotation is a
    masked load of the other half of q (or k), chosen per lane."""
    src = ROTARY.read_text()
    graph, steps = plan_task(src)
    regions = [s for s in steps if isinstance(s, Region)]
    assert len(regions) == 1 and len(regions[0].outputs) == 2, graph.dump()
    d = lower(src, "rotary_embedding_qk")
    assert d.ok, d.reason
    assert d.source.count("tl.where(i3 < cat") == 2, d.source
    small = shrink(src, ShrinkLevel(64, 16), "small", cpu=True)
    ref, out = run_both(small.source, d.source)
    for r, o in zip(ref, out):
        assert_close(r, o)


def test_operands_laid_out_as_the_domain_are_read_at_the_flat_index():
    """A contiguous operand (or a piece of one, or a trailing broadcast table) is read at the lane
    index, no per-dim index math; any other layout goes through its strides, with the same result."""
    import torch

    src = ROTARY.read_text()
    d = lower(src, "rotary_embedding_qk", ("block1024",))      # the flat kernel (the hoisted one: test_lower_hoisted)
    assert d.ok, d.reason
    assert "IN0_FLAT" in d.source and "tl.store(out0_ptr + offs," in d.source
    c = load_task(d.source, "flat_cand")
    t = load_task(src, "flat_ref")
    q, k = torch.randn(2, 5, 3, 8), torch.randn(2, 3, 5, 8)
    cos, sin = torch.randn(5, 8), torch.randn(5, 8)
    qt = q.transpose(1, 2)                      # not laid out as the domain: read through its strides
    cos_t = cos.t().contiguous().t()            # nor is a transposed table
    for args in ((qt.contiguous(), k, cos, sin), (qt, k, cos, sin), (qt, k, cos_t, sin)):
        for r, o in zip(t.Model()(*args), c.ModelNew()(*args)):
            assert_close(r, o)

    launches = []                               # the flags the launcher computes, kernel not run
    kernel = c.elementwise_0_kernel
    try:
        c.elementwise_0_kernel = type("Stub", (), {"__getitem__": lambda self, grid: lambda *a, **kw: launches.append(a)})()
        for args in ((qt.contiguous(), k, cos, sin), (qt, k, cos_t, sin)):
            c.ModelNew()(*args)
    finally:
        c.elementwise_0_kernel = kernel
    # operands in order: q, cos, q's two halves, sin, k, k's two halves; the flags close the positional arguments
    assert [list(a[-8:]) for a in launches] == [[True] * 8, [False, False, False, False, True, True, True, True]]


def test_rotary_embedding_passes_the_verifier():
    verify = pytest.importorskip("kernelrag.verify")
    src = ROTARY.read_text()
    d = lower(src, "rotary_embedding_qk")
    assert d.ok, d.reason
    verdict = verify.verify_source(src, d.source, device="cpu")
    assert verdict.ok, verdict.feedback()


def test_pieces_that_disagree_off_the_cat_dim_are_refused_at_run_time():
    import torch

    src = CASES["cat_middle_dim"][0]
    d = lower(src, "cat_middle_dim")
    from kernelrag.task import load_task
    cand = load_task(d.source, "t_cand")
    with pytest.raises(ValueError, match="the other dims differ"):
        cand.ModelNew()(torch.randn(4, 3, 5), torch.randn(4, 6, 4))


def test_broadcast_operands_and_cat_pieces_are_kept_in_l2():
    """torch.compile's rotary kernel marks cos, sin and the rotated halves ``evict_last`` and
    streams q and k; the flat kernel's loads carry the same hints."""
    d = lower(ROTARY.read_text(), "rotary_hints", ("block1024",))
    assert d.ok, d.reason
    loads = {line.split(" = ")[0].strip(): line for line in d.source.splitlines() if "= tl.load(" in line}
    kept = {name for name, line in loads.items() if 'eviction_policy="evict_last"' in line}
    assert kept == {"v2", "v3", "v6_f1", "v5_f2", "v13_f3", "v12_f4"}, kept     # cos, sin, four pieces
    assert set(loads) - kept == {"v0", "v1"}                                     # q and k
