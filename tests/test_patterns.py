"""Op patterns: tracing KernelBench tasks on the meta device into canonical signatures."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernelrag.errors import TaskError
from kernelrag.patterns import (OpPattern, category_of, from_signature, op_attrs, op_pattern, similarity,
                                slug, split_ops)
from kernelrag.patterns.canon import norm_dim

TASKS = Path(__file__).parent / "fixtures" / "tasks"
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("task, signature, category", [
    ("linear_relu.py", "matmul>add>relu", "fused"),
    ("softmax.py", "softmax[dim=-1]", "softmax"),            # dim=1 on a 2-D input is the last dim
    ("layernorm.py", "layer_norm", "normalization"),
    ("sum_dim.py", "sum[dim=1]", "reduction"),               # dim=1 of 3 is not the last: kept positive
    ("rmsnorm_composed.py", "rms_norm", "normalization"),    # x * rsqrt(mean(x^2)+eps) * w
    ("rmsnorm_kernelbench.py", "rms_norm[dim=1]", "normalization"),
    ("gelu_tanh.py", "gelu[approximate=tanh]", "elementwise"),
    ("attention_manual.py", "scaled_dot_product_attention[mask]", "attention"),
    ("conv_gelu_sdpa_mix.py", "conv2d>gelu[approximate=tanh]>adaptive_avg_pool2d>cumsum[dim=-1]", "fused"),
])
def test_fixture_tasks(task, signature, category):
    p = op_pattern(TASKS / task)
    assert p.known, p.reason
    assert (p.signature, p.category) == (signature, category)
    assert p.ops == split_ops(signature)


def test_regime_from_meta_shapes_without_allocating():
    # 4096 x 393216 fp32 is 6 GiB: only the meta device makes this instant
    p = op_pattern(TASKS / "softmax.py")
    assert p.regime["input_shapes"] == [[4096, 393216]]
    assert p.regime["output_shape"] == [4096, 393216]
    assert p.regime["dtypes"] == ["float32"]
    assert p.regime["size_class"] == "huge"
    small = op_pattern(TASKS / "linear_relu.py")
    assert small.regime["output_shape"] == [128, 512] and small.regime["size_class"] == "small"


def test_untraceable_model_is_unknown_with_reason():
    p = op_pattern(TASKS / "untraceable.py")
    assert not p.known and p.signature == "unknown"
    assert "torch.fx" in p.reason and "torch.export" in p.reason
    assert p.regime["input_shapes"] == [[16]]


def test_source_text_and_export_fallback():
    src = (TASKS / "attention_manual.py").read_text()   # math.sqrt(k.size(-1)) defeats torch.fx
    p = op_pattern(src)
    assert p.known and p.traced_with == "export"


def test_not_a_task_raises(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import torch\n\ndef f():\n    return 1\n")
    with pytest.raises(TaskError, match="no class Model"):
        op_pattern(f)
    with pytest.raises(TaskError, match="does not exist"):
        op_pattern(tmp_path / "missing.py")


def _task(forward: str, inputs: str, init: str = "        pass") -> str:
    return ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
            "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"{init}\n\n    def forward(self, x, y=None):\n        return {forward}\n\n"
            f"def get_inputs():\n    return {inputs}\n\ndef get_init_inputs():\n    return []\n")


@pytest.mark.parametrize("forward, inputs, signature", [
    ("torch.cumsum(x, dim=1)", "[torch.randn(8, 10, 4)]", "cumsum[dim=1]"),
    ("torch.cumsum(x, dim=1)", "[torch.randn(8, 10)]", "cumsum[dim=-1]"),
    ("x.mean(dim=(1, 2))", "[torch.randn(8, 10, 3, 3)]", "mean[dim=(1,2)]"),
    ("torch.max(x, dim=1)[0]", "[torch.randn(8, 10, 4)]", "max[dim=1]"),
    ("torch.max(x, y)", "[torch.randn(8, 10), torch.randn(8, 10)]", "maximum"),
    ("torch.bmm(x, y)", "[torch.randn(2, 3, 4), torch.randn(2, 4, 5)]", "bmm"),
    # an operand read transposed changes the product (a skill for A @ B is wrong for A.T @ B)
    ("torch.matmul(x.T, y)", "[torch.randn(4, 3), torch.randn(4, 5)]", "matmul[ta]"),
    ("x @ y.transpose(-2, -1)", "[torch.randn(2, 4, 3), torch.randn(2, 5, 3)]", "matmul[tb,ranks=3x3]"),
    ("torch.bmm(x.permute(0, 2, 1), y.mT)", "[torch.randn(2, 4, 3), torch.randn(2, 5, 4)]", "bmm[ta,tb]"),
    ("torch.matmul(x.transpose(0, 1), y)", "[torch.randn(4, 2, 3), torch.randn(2, 3, 5)]", "matmul[ranks=3x3]"),
    # operand ranks other than 2x2: a 2-D GEMM skill cannot take the product
    ("torch.matmul(x, y)", "[torch.randn(2, 4, 3), torch.randn(3, 5)]", "matmul[ranks=3x2]"),
    ("x @ y", "[torch.randn(4, 3), torch.randn(3)]", "matmul[ranks=2x1]"),
    ("F.scaled_dot_product_attention(x, x, x, is_causal=True)", "[torch.randn(1, 2, 8, 4)]",
     "scaled_dot_product_attention[causal]"),
    ("F.cross_entropy(x, y)", "[torch.randn(8, 10), torch.randint(0, 10, (8,))]", "cross_entropy"),
    ("torch.mean((x - y) ** 2)", "[torch.randn(8, 10), torch.randn(8, 10)]", "mse_loss"),
    ("x.view(x.size(0), -1).contiguous().relu()", "[torch.randn(8, 2, 5)]", "relu"),
    ("torch.relu(x)", "[torch.randn(8, 10).cuda()]", "relu"),               # .cuda() on meta is a no-op
    ("self.s(x)", "[torch.randn(8, 10, 3)]", "softmax[dim=1]"),
])
def test_canonical_forms(forward, inputs, signature):
    init = "        self.s = nn.Softmax(dim=1)"
    assert op_pattern(_task(forward, inputs, init)).signature == signature


def test_linear_without_bias_and_manual_softmax():
    assert op_pattern(_task("self.l(x)", "[torch.randn(4, 8)]",
                            "        self.l = nn.Linear(8, 3, bias=False)")).signature == "matmul"
    manual = "torch.exp(x - x.max(dim=1, keepdim=True)[0]) / torch.exp(x - x.max(dim=1, keepdim=True)[0]).sum(dim=1, keepdim=True)"
    # the max/sub/exp chain is computed twice, so its parts escape: not folded
    assert op_pattern(_task(manual, "[torch.randn(4, 8)]")).signature != "softmax[dim=-1]"


def test_composition_not_folded_when_intermediate_escapes():
    # the squared input is also returned: the chain is not a self-contained RMSNorm
    src = _task("(x * torch.rsqrt((sq := x.pow(2)).mean(-1, keepdim=True) + 1e-6), sq)", "[torch.randn(4, 8)]")
    assert op_pattern(src).signature == "pow>mean[dim=-1]>add>rsqrt>mul"
    folded = _task("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)", "[torch.randn(4, 8)]")
    assert op_pattern(folded).signature == "rms_norm"


def test_dim_rule():
    assert norm_dim(1, 2) == "-1" and norm_dim(-1, 3) == "-1"
    assert norm_dim(1, 3) == "1" and norm_dim(-2, 3) == "1"
    assert norm_dim((2, -3), 4) == "(1,2)"
    assert norm_dim(-1, None) == "-1" and norm_dim(1, None) == "1"    # rank unknown: as written


def test_string_helpers():
    assert split_ops("matmul>add>relu") == ["matmul", "add", "relu"]
    assert split_ops("sum[dim=(1,2)]>relu") == ["sum[dim=(1,2)]", "relu"]
    assert op_attrs("sum[dim=(1,2),causal]") == {"dim": "(1,2)", "causal": ""}
    assert slug("matmul>add>relu") == "matmul_add_relu"
    assert slug("softmax[dim=-1]") == "softmax"
    assert slug(OpPattern(signature="gelu[approximate=tanh]")) == "gelu"
    assert category_of("matmul") == "matmul" and category_of("relu") == "elementwise"
    assert category_of("matmul>add>relu") == "fused" and category_of("scaled_dot_product_attention") == "attention"
    assert from_signature(" matmul > add ").signature == "matmul>add"
    with pytest.raises(TaskError):
        from_signature("")


def test_similarity():
    assert similarity("softmax[dim=-1]", "softmax[dim=-1]") == 1.0
    near = similarity("matmul>add>relu", "matmul>add>gelu")
    far = similarity("matmul>add>relu", "add>sigmoid")
    assert 0 < far < near < 1
    assert similarity("matmul>add>relu", "softmax[dim=-1]") == 0.0
    # same op family, different attribute: closer than an unrelated op of the same category
    assert similarity("softmax[dim=-1]", "softmax[dim=1]") > similarity("softmax[dim=-1]", "log_softmax[dim=-1]")


def test_seed_skill_references_trace_to_their_declared_pattern():
    from kernelrag.memory.skills import SkillLibrary

    lib = SkillLibrary(seed_dir=REPO / "skills")
    skills = lib.list(source="seed")
    if not skills:
        pytest.skip("no seed skills in skills/ yet")
    wrong = {}
    for s in skills:
        p = op_pattern(s.reference_path)
        if p.signature != s.pattern:
            wrong[s.name] = (s.pattern, p.signature, p.reason)
    assert not wrong, f"skill.toml pattern != traced reference.py pattern: {wrong}"
