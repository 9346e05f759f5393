"""Tasks lowered onto the GEMM, conv and pooling templates, run at the verifier's CPU sizes
against the task's own Model (float64 reference, parameters copied as the verifier does)."""
from __future__ import annotations

import os
import types
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from kernelrag.draft.lower.lowering import lower
from kernelrag.verify.task import ShrinkLevel, shrink

TASKS = Path(__file__).parent / "fixtures" / "gemm_tasks"
SUITE = Path(__file__).parents[1] / "bench" / "tasks"


def module_of(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def run_lowered(path: Path, region_templates: list[str]) -> None:
    source = path.read_text()
    draft = lower(source, path.stem)
    assert draft.ok, draft.reason
    for name in region_templates:
        assert f"{name}:" in draft.reason, draft.reason
    small = module_of(shrink(source, ShrinkLevel(16, 4), "small", cpu=True).source, f"task_{path.stem}")
    torch.manual_seed(0)
    inputs = small.get_inputs()
    model = small.Model(*small.get_init_inputs())
    for p in model.parameters():          # not the default init: a bias of zeros would hide a missing add
        torch.nn.init.normal_(p)
    candidate = module_of(draft.source, f"cand_{path.stem}")
    new = candidate.ModelNew(*small.get_init_inputs())
    new.load_state_dict(model.state_dict())
    ref = model.double()(*[x.double() if isinstance(x, torch.Tensor) else x for x in inputs])
    out = new(*inputs)
    assert out.shape == ref.shape
    err = (out.double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
    assert err < 1e-5, f"{path.stem}: relative error {err:.3g}"


@pytest.mark.parametrize("task,templates", [
    ("matmul_transposed_both", ["gemm"]),
    ("tensor4d_einsum", ["gemm"]),
    ("tril_matmul", ["gemm"]),
    ("matvec", ["gemm"]),
    ("diag_matmul", ["elementwise"]),
    ("gemm_bias_gelu_residual", ["gemm"]),
    ("gemm_logsumexp", ["gemm"]),
    ("conv2d_bias_relu", ["conv"]),
    ("conv2d_depthwise", ["conv"]),
    ("conv_transpose2d_strided", ["conv"]),
    ("max_pool1d_dilated", ["pool"]),
    ("avg_pool3d_ceil", ["pool"]),
    ("gemm_rowmax_squeezed", ["gemm", "elementwise"]),    # the squeeze of the row max closes the tile
    ("matmul_transposed_b", ["gemm"]),
    ("tensor3d_matmul", ["gemm"]),
    ("matmul_large_k", ["gemm"]),
    ("matrix_scalar", ["elementwise"]),
    ("conv1d_strided", ["conv"]),
    ("conv2d_grouped", ["conv"]),
    ("conv3d_basic", ["conv"]),
    ("max_pool3d_basic", ["pool"]),
])
def test_fixture_task_lowers_and_matches(task, templates):
    run_lowered(TASKS / f"{task}.py", templates)


@pytest.mark.parametrize("task,templates", [
    ("matmul_transposed_a", ["gemm"]),
    ("linear_gelu", ["gemm"]),
    ("bmm", ["gemm"]),
    ("linear_geglu", ["gemm", "elementwise"]),                   # chunk: two views of one GEMM output
    ("depthwise_conv1d_causal_silu", ["conv"]),                  # x[..., :-k] folded into the conv as a crop
    ("depthwise_separable_conv2d_relu6", ["conv"]),              # direct depthwise, implicit-GEMM pointwise
    ("conv_transpose2d_bias_silu", ["conv"]),                    # one GEMM per output phase
    ("conv2d_batch_norm_eval_relu", ["conv"]),                   # the whole batch norm in the epilogue
    ("batch_norm_eval_relu", ["channelwise"]),
    ("adaptive_avg_pool2d_linear", ["pool", "gemm"]),            # a global pool: many short rows per program
    ("linear_l2_normalize", ["gemm", "rowwise"]),                # N = 1024, K = 2048: the norm in a second pass
])
def test_suite_task_lowers_and_matches(task, templates):
    run_lowered(SUITE / f"{task}.py", templates)


def test_attention_is_two_gemms_around_a_softmax():
    draft = lower((SUITE / "attention.py").read_text(), "attention")
    assert draft.ok, draft.reason
    assert draft.reason.count("gemm:") == 2 and "softmax" in draft.reason


def test_fusion_plan_is_one_kernel_for_a_gemm_chain():
    draft = lower((TASKS / "gemm_bias_gelu_residual.py").read_text(), "gemm_bias_gelu_residual")
    assert draft.reason.count("[tf32x3]") == 1 and "linear > gelu > add" in draft.reason
    assert "epilogue_fusion" in draft.transformations and "tf32x3" in draft.transformations


def test_a_row_reduction_joins_the_gemm_tile_only_while_the_tile_stays_wide():
    """One tile must span the reduced row: at N = 1024 and a long K the GEMM writes y + b and a
    row kernel normalises it (the GEMM would otherwise keep y * y in its region while y itself
    is needed outside, and run 16-row tiles); a narrow row, or a short K, stays in the tile."""
    source = (SUITE / "linear_l2_normalize.py").read_text()
    wide = lower(source, "l2")
    assert wide.ok and "gemm: linear [tf32x3]; rowwise: normalize" in wide.reason, wide.reason
    for sizes in (("embed_dim = 1024", "embed_dim = 128"), ("in_features = 2048", "in_features = 256")):
        narrow = lower(source.replace(*sizes), "l2_narrow")
        assert narrow.ok and narrow.reason.count("gemm:") == 1 and "rowwise" not in narrow.reason, narrow.reason


def test_unsupported_einsum_says_why():
    source = (TASKS / "tensor4d_einsum.py").read_text().replace('"bijl,lk->bijk"', '"bijl,lk->bk"')
    draft = lower(source, "einsum_sum")
    assert not draft.ok and "einsum" in draft.reason


def test_a_row_reduction_without_keepdim_joins_the_gemm_tile():
    """``amax(dim=1)`` squeezes the row it reduces: the GEMM template takes the squeeze and closes
    its tile on it. The partition asked the template twice, and the second answer, from a
    closed region, was no: "no template places max"."""
    draft = lower((TASKS / "gemm_rowmax_squeezed.py").read_text(), "rowmax")
    assert draft.ok and "gemm: linear > max [" in draft.reason, draft.reason


def test_a_product_bound_by_its_output_write_defaults_to_exact_fp32_fmas():
    """K = 16: the FMAs take less time than writing the M x N output, so ``ieee`` is the one fp32
    path offered (exact, no operand splits, and the fastest there: the graph's evidence from
    square products cannot rank 3xTF32 ahead of it); a long K keeps 3xTF32 first."""
    from kernelrag.draft.lower.lowering import variant_choices

    assert variant_choices((SUITE / "matmul_tall_skinny.py").read_text()) == [("ieee",)]
    assert variant_choices((SUITE / "matmul_fp32.py").read_text()) == [("tf32x3",), ("bf16x6",), ("ieee",)]
    draft = lower((SUITE / "matmul_tall_skinny.py").read_text(), "tall")
    assert draft.ok and "ieee_fp32_dot" in draft.transformations, draft.reason
