"""Static rules of the verifier (no processes run)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernelrag.verify.static import StaticPolicy, check_source

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
SKILLS = Path(__file__).resolve().parent.parent / "skills"

HEADER = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""


def candidate(forward_body: str, extra: str = "", init: str = "pass") -> str:
    body = textwrap.indent(textwrap.dedent(forward_body).strip(), " " * 8)
    return HEADER + textwrap.dedent(extra) + f"""

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
{body}
"""


LAUNCH = "y = torch.empty_like(x)\nk[(1,)](x, y, x.numel(), BLOCK=16)\n"


def rules(source: str, policy: StaticPolicy | None = None, blocking: bool = True) -> set[str]:
    return {f.rule for f in check_source(source, policy).findings if f.blocking == blocking}


@pytest.mark.parametrize("name", sorted(p.stem for p in (FIXTURES / "positive").glob("*.py")))
def test_positive_controls_have_no_findings(name):
    report = check_source((FIXTURES / "positive" / f"{name}.py").read_text())
    assert report.has_model_new and not report.syntax_error
    assert report.findings == []


@pytest.mark.parametrize("path", sorted(SKILLS.glob("*/*/kernel.py")) + sorted(SKILLS.glob("*/*/alternatives/*.py")),
                         ids=lambda p: str(p.relative_to(SKILLS)))
def test_shipped_skills_pass_the_static_rules(path):
    assert [f for f in check_source(path.read_text()).findings if f.blocking] == []


@pytest.mark.parametrize("body,extra,rule", [
    (LAUNCH + "return torch.softmax(y, dim=1)", "", "torch-op"),
    (LAUNCH + "return F.relu(y)", "import torch.nn.functional as F\n", "torch-op"),
    (LAUNCH + "return relu(y)", "from torch.nn.functional import relu\n", "torch-op"),
    (LAUNCH + "return torch.ops.aten.relu(y)", "", "torch-op"),
    (LAUNCH + "return y.softmax(-1)", "", "torch-op"),
    (LAUNCH + "return y.exp_()", "", "torch-op"),
    (LAUNCH + "return y @ y", "", "torch-op"),
    (LAUNCH + "return mm(y, y)", "mm = torch.matmul\n", "torch-op"),
    (LAUNCH + "return helper(y)", "def helper(t):\n    return t.sum(dim=0)\n", "torch-op"),
    ("try:\n    " + LAUNCH.replace("\n", "\n    ") + "\nexcept Exception:\n    y = x\nreturn y", "", "try-except"),
    (LAUNCH + "return y", "import threading\n", "concurrency"),
    ("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    " + LAUNCH.replace("\n", "\n    ") + "\nreturn y",
     "", "side-stream"),
    (LAUNCH + "return y", "torch.allclose = lambda *a, **k: True\n", "monkeypatch"),
    (LAUNCH + "return y", "import time as t\nt.perf_counter = lambda: 0.0\n", "monkeypatch"),
    (LAUNCH + "return y", "clock = torch.cuda\nclock.synchronize = lambda: None\n", "monkeypatch"),
    (LAUNCH + "return y", "setattr(torch, 'equal', lambda *a: True)\n", "monkeypatch"),
    (LAUNCH + "return y", "torch.backends.cuda.matmul.allow_tf32 = True\n", "monkeypatch"),
    (LAUNCH + "return y", "torch.set_float32_matmul_precision('medium')\n", "monkeypatch"),
    (LAUNCH + "return y", "class T(torch.Tensor):\n    pass\n", "tensor-subclass"),
    (LAUNCH + "return y", "class M:\n    def __torch_function__(self, *a):\n        pass\n", "tensor-subclass"),
    (LAUNCH + "open('x').read()\nreturn y", "", "file-io"),
    (LAUNCH + "torch.save(y, 'y.pt')\nreturn y", "", "file-io"),
    (LAUNCH + "return y", "import os\n", "forbidden-import"),
    (LAUNCH + "return y", "import subprocess\n", "forbidden-import"),
    (LAUNCH + "return y", "import pickle\n", "forbidden-import"),
    (LAUNCH + "return y", "import ctypes\n", "forbidden-import"),
    (LAUNCH + "return y", "from torch._C import _disabled_torch_function_impl\n", "forbidden-import"),
    (LAUNCH + "return y", "g = globals()\n", "introspection"),
    (LAUNCH + "return y.__class__", "", "introspection"),
    (LAUNCH + "return getattr(y, name)", "name = 'clone'\n", "introspection"),
    ("return x.clamp_min(0)", "", "no-kernel"),
])
def test_rule_fires(body, extra, rule):
    assert rule in rules(candidate(body, extra))


def test_clean_candidate_has_no_findings():
    source = candidate(LAUNCH + "return y.view(x.shape).contiguous()")
    assert check_source(source).findings == []


def test_glue_calls_are_allowed_on_the_hot_path():
    body = """
    n, d = x.shape
    y = torch.empty((n, d), device=x.device, dtype=torch.float32)
    z = torch.zeros_like(x).reshape(-1)
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)
    k[grid](x.contiguous(), y, x.numel(), BLOCK=triton.next_power_of_2(d))
    torch.cuda.synchronize()
    return y.view(n, d).to(x.dtype)
    """
    assert check_source(candidate(body)).findings == []


def test_inheriting_model_or_a_torch_module_is_rejected():
    assert "inherits-model" in rules(HEADER + "class Model(nn.Module):\n    pass\n\n"
                                     "class ModelNew(Model):\n    def forward(self, x):\n        return x\n")
    assert "inherits-model" in rules(HEADER + "class ModelNew(nn.Softmax):\n    pass\n")


def test_calling_an_nn_submodule_is_a_torch_op_but_reading_its_weights_is_not():
    calls = candidate("return self.ln(x)", init="self.ln = nn.LayerNorm(16)")
    reads = candidate(LAUNCH + "w = self.ln.weight\nreturn y", init="self.ln = nn.LayerNorm(16)")
    assert "torch-op" in rules(calls)
    assert "torch-op" not in rules(reads)


def test_torch_ops_outside_the_hot_path_are_allowed():
    extra = "def init_table(n):\n    return torch.softmax(torch.arange(n).float(), 0)\n"
    source = candidate(LAUNCH + "return y", extra, init="self.t = init_table(4)")
    assert "torch-op" not in rules(source)


def test_decoy_kernel_is_reported_when_another_kernel_is_launched():
    extra = "@triton.jit\ndef decoy(x_ptr):\n    pass\n"
    found = check_source(candidate(LAUNCH + "return y", extra)).findings
    assert [(f.rule, f.blocking) for f in found] == [("unused-kernel", False)]


def test_result_cache_is_a_warning():
    extra = "_cache = {}\n"
    source = candidate(LAUNCH + "_cache[x.data_ptr()] = y\nreturn y", extra)
    assert rules(source, blocking=False) == {"result-cache"}
    assert rules(source) == set()


def test_cuda_extension_counts_as_a_kernel(tmp_path):
    report = check_source((FIXTURES / "positive" / "relu_load_inline.py").read_text())
    assert report.uses_cuda_extension
    assert report.findings == []


def test_tl_dot_is_noticed():
    assert check_source((FIXTURES / "positive" / "matmul.py").read_text()).uses_tl_dot
    assert not check_source((FIXTURES / "positive" / "relu.py").read_text()).uses_tl_dot


def test_policy_disables_and_downgrades_rules():
    source = candidate(LAUNCH + "return y", "import os\n")
    assert rules(source, StaticPolicy(disabled=frozenset({"forbidden-import"}))) == set()
    report = check_source(source, StaticPolicy(warn_only=frozenset({"forbidden-import"})))
    assert [(f.rule, f.blocking) for f in report.findings] == [("forbidden-import", False)]


def test_findings_carry_line_numbers():
    source = candidate(LAUNCH + "return torch.softmax(y, 1)")
    (finding,) = [f for f in check_source(source).findings if f.rule == "torch-op"]
    assert source.splitlines()[finding.line - 1].strip() == "return torch.softmax(y, 1)"


def test_syntax_error_and_missing_model_new():
    assert check_source("def f(:\n").syntax_error
    assert not check_source(HEADER).has_model_new


@pytest.mark.parametrize("body,extra", [
    (LAUNCH + "return getattr(torch, 'softmax')(y, 1)", ""),
    (LAUNCH + "return sm(y)", "sm = lambda t: torch.softmax(t, 1)\n"),
    (LAUNCH + "return sm(y)", "import functools\nsm = functools.partial(torch.softmax, dim=1)\n"),
    (LAUNCH + "return list(map(F.relu, [y]))[0]", "import torch.nn.functional as F\n"),
    (LAUNCH + "f = self.sm\nreturn f(y)", ""),
    (LAUNCH + "return torch.Tensor._make_subclass(torch.Tensor, y)", ""),
])
def test_indirect_pytorch_calls_are_caught(body, extra):
    init = "self.sm = nn.Softmax(dim=1)" if "self.sm" in body else "pass"
    found = rules(candidate(body, extra, init=init))
    assert found & {"torch-op", "introspection"}, found
