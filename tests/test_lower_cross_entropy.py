"""Cross-entropy and NLL lowered onto the row-wise template: label smoothing, class weights,
ignore_index and the three reductions, each variant against PyTorch."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import types
from pathlib import Path

import pytest
import torch

from kernelrag.draft.lower.lowering import lower, variant_choices

SUITE = Path(__file__).parents[1] / "bench" / "tasks"
HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def task(forward: str, body: str = "pass", init: str = "", init_inputs: str = "[]", ignored: int = -100) -> str:
    return HEAD + f"""class Model(nn.Module):
    def __init__(self{init}):
        super().__init__()
        {body}

    def forward(self, x, t):
        return {forward}


def get_inputs():
    t = torch.randint(0, 37, (9,))
    t[2] = {ignored}                      # an ignored row
    return [torch.randn(9, 37), t]


def get_init_inputs():
    return {init_inputs}
"""


WEIGHT = "self.w = nn.Parameter(torch.rand(37) + 0.5)"
CASES = {
    "smoothing_from_init": task("F.cross_entropy(x, t, label_smoothing=self.ls)", "self.ls = ls", ", ls", "[0.1]"),
    "smoothing_sum": task("F.cross_entropy(x, t, label_smoothing=0.2, reduction='sum')"),
    "smoothing_none": task("F.cross_entropy(x, t, label_smoothing=0.2, reduction='none')"),
    "smoothing_positional": task("F.cross_entropy(x, t, None, None, -100, None, 'mean', 0.25)"),
    "weights_mean": task("F.cross_entropy(x, t, weight=self.w)", WEIGHT),
    "weights_sum": task("F.cross_entropy(x, t, weight=self.w, reduction='sum')", WEIGHT),
    "weights_smoothing_mean": task("F.cross_entropy(x, t, weight=self.w, label_smoothing=0.3)", WEIGHT),
    "weights_smoothing_none": task("F.cross_entropy(x, t, weight=self.w, label_smoothing=0.3, reduction='none')",
                                   WEIGHT),
    "module_weights_smoothing": task("self.loss(x, t)",
                                     "self.loss = nn.CrossEntropyLoss(weight=torch.rand(37) + 0.5, "
                                     "label_smoothing=0.15)"),
    "ignore_index_other": task("F.cross_entropy(x, t, ignore_index=3, label_smoothing=0.1)", ignored=3),
    "nll_weights": task("F.nll_loss(F.log_softmax(x, dim=1), t, weight=self.w)", WEIGHT),
    "nll_module_sum": task("self.loss(F.log_softmax(x, dim=1), t)", "self.loss = nn.NLLLoss(reduction='sum')"),
}


def module_of(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_variant_matches_pytorch(name):
    src = CASES[name]
    t = module_of(src, "t")
    torch.manual_seed(0)
    ref_model = t.Model(*t.get_init_inputs())
    with torch.no_grad():
        for p in ref_model.parameters():
            p.uniform_(0.2, 2.0)
    inputs = t.get_inputs()
    with torch.no_grad():
        ref = ref_model(*inputs).double()
    for combo in variant_choices(src):
        d = lower(src, name, combo)
        assert d.ok, d.reason
        new = module_of(d.source, "c").ModelNew(*t.get_init_inputs())
        new.load_state_dict(ref_model.state_dict())
        with torch.no_grad():
            out = new(*inputs)
        assert out.shape == ref.shape, (combo, out.shape, ref.shape)
        torch.testing.assert_close(out.double(), ref, rtol=2e-5, atol=2e-6, msg=f"{combo}: {d.reason}")


def test_the_smoothing_term_divides_by_the_class_count_at_run_time():
    d = lower(CASES["smoothing_sum"], "s")
    new = module_of(d.source, "c").ModelNew()
    x, t = torch.randn(5, 11), torch.randint(0, 11, (5,))     # 11 classes, not the traced 37
    torch.testing.assert_close(new(x, t), torch.nn.functional.cross_entropy(x, t, label_smoothing=0.2,
                                                                              reduction="sum"))


def test_probability_targets_say_what_is_lowered():
    src = task("F.cross_entropy(x, t)").replace(
        "    t = torch.randint(0, 37, (9,))\n", "    t = torch.randn(9, 37).softmax(dim=1)\n").replace("    t[2] = -100", "")
    d = lower(src, "p")
    assert not d.ok and "int64 class targets" in d.reason, d.reason


def test_label_smoothing_suite_task_passes_the_verifier():
    verify = pytest.importorskip("kernelrag.verify")
    src = (SUITE / "cross_entropy_label_smoothing.py").read_text()
    d = lower(src, "cross_entropy_label_smoothing")
    assert d.ok, d.reason
    assert "self.label_smoothing" in d.source
    verdict = verify.verify_source(src, d.source, device="cpu")
    assert verdict.ok, verdict.feedback()
