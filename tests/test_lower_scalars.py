"""Numbers a lowered kernel reads at run time: forward's float arguments, the model's float
attributes (a scale from ``get_init_inputs``), attention's default scale; never the traced value."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelrag.draft.lower.lowering import lower, plan_task
from kernelrag.draft.lower.protocol import Region
from kernelrag.verify.task import ShrinkLevel, shrink

GEMM_TASKS = Path(__file__).parent / "fixtures" / "gemm_tasks"
SUITE = Path(__file__).parents[1] / "bench" / "tasks"
HEAD = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def module_of(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def task(init: str, body: str, forward: str, init_inputs: str = "[]",
         inputs: str = "[torch.randn(6, 40)]") -> str:
    return HEAD + (f"class Model(nn.Module):\n    def __init__(self{init}):\n        super().__init__()\n"
                   f"        {body}\n\n    def forward(self, x):\n        return {forward}\n\n\n"
                   f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init_inputs}\n")


def test_a_float_argument_of_forward_is_a_kernel_argument():
    src = (GEMM_TASKS / "matrix_scalar.py").read_text()
    d = lower(src, "matrix_scalar")
    assert d.ok, d.reason
    assert "elementwise: mul" in d.reason and "3.14" not in d.source
    assert "in1,  " in d.source and "float(a1)" in d.source       # by value, not a pointer
    new = module_of(d.source, "cand").ModelNew()
    a = torch.randn(33, 70)
    for s in (3.14, -0.25, 7.0):
        torch.testing.assert_close(new(a, s), a * s, rtol=0, atol=0)


def test_a_scale_from_get_init_inputs_is_read_at_run_time_in_the_gemm_epilogue():
    src = (SUITE / "bmm_scale_softmax.py").read_text()
    d = lower(src, "bmm_scale_softmax")
    assert d.ok, d.reason
    assert "gemm: bmm > mul" in d.reason and "0.125" not in d.source and "self.scale" in d.source
    small = module_of(shrink(src, ShrinkLevel(16, 4), "small", cpu=True).source, "small")
    torch.manual_seed(0)
    q, k = small.get_inputs()
    cand = module_of(d.source, "cand")
    for scale in (0.125, 0.7, -1.5):          # ModelNew(scale) for any scale, as Model(scale)
        ref = small.Model(scale).double()(q.double(), k.double())
        out = cand.ModelNew(scale)(q, k)
        assert (out.double() - ref).abs().max().item() < 1e-5


def test_arithmetic_on_numbers_is_done_in_forward_not_in_a_kernel():
    src = task(", alpha", "self.alpha = alpha", "torch.softmax(x * (self.alpha * 2.0), dim=-1)", "[0.3]")
    graph, steps = plan_task(src)
    assert sum(isinstance(s, Region) for s in steps) == 1, graph.dump()
    d = lower(src, "s")
    assert d.ok, d.reason
    assert "= self.alpha   # a number" in d.source and " * 2.0)   # a number, passed to the kernels by value" in d.source
    x = torch.randn(5, 40)
    for alpha in (0.3, -2.0):
        ref = torch.softmax(x * (alpha * 2.0), dim=-1)
        torch.testing.assert_close(module_of(d.source, "c").ModelNew(alpha)(x), ref, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("forward", ["x * math.sqrt(self.d)", "x * self.d if self.d > 0 else x",
                                     "F.leaky_relu(x, self.d)"])
def test_a_number_the_trace_cannot_carry_is_a_constant_as_before(forward):
    src = task(", d", "self.d = d", forward, "[0.5]")
    d = lower(src, "c")
    assert d.ok, d.reason
    x = torch.randn(6, 40)
    ref = module_of(src, "t").Model(0.5)(x)
    torch.testing.assert_close(module_of(d.source, "c").ModelNew(0.5)(x), ref, rtol=1e-6, atol=1e-6)


def test_attention_default_scale_follows_the_head_dim_at_run_time():
    src = HEAD + ("class Model(nn.Module):\n    def forward(self, q, k, v):\n"
                  "        return F.scaled_dot_product_attention(q, k, v)\n\n\n"
                  "def get_inputs():\n    return [torch.randn(2, 3, 16, 64), torch.randn(2, 3, 16, 64), "
                  "torch.randn(2, 3, 16, 64)]\n\n\ndef get_init_inputs():\n    return []\n")
    d = lower(src, "sdpa")
    assert d.ok, d.reason
    assert "q.shape[-1] ** -0.5" in d.source and "0.125" not in d.source
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))       # a head dim the trace never saw
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    out = module_of(d.source, "c").ModelNew()(q, k, v)
    assert (out.double() - ref).abs().max().item() < 1e-5


def test_matrix_times_a_scalar_passes_the_verifier():
    verify = pytest.importorskip("kernelrag.verify")
    src = (GEMM_TASKS / "matrix_scalar.py").read_text()
    d = lower(src, "matrix_scalar")
    verdict = verify.verify_source(src, d.source, device="cpu")
    assert verdict.ok, verdict.feedback()
