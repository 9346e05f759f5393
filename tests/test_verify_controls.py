"""Positive controls must pass; a weak task must be reported; some kernels cannot be checked on CPU."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernelrag.verify import verify, verify_source

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
POSITIVES = ["relu", "softmax", "sum_dim", "matmul", "layernorm", "ce_rows"]   # see expectations.json


def fixture(kind: str, name: str) -> Path:
    return FIXTURES / kind / f"{name}.py"


@pytest.mark.parametrize("name", POSITIVES)
def test_positive_control_is_correct(name):
    v = verify(fixture("tasks", name), fixture("positive", name), device="cpu")
    assert v.status == "correct" and v.ok and v.correct and v.compiled, v.feedback()
    compares = [c for c in v.checks if c.name.startswith("compare")]
    assert len(compares) >= 7 and all(c.passed for c in compares)      # 5 trials + repeat + 2nd shape
    dists = {c.name.split()[-1].rstrip("]") for c in compares}
    assert {"task", "normal", "uniform", "heavy_tailed", "large"} <= dists
    assert all(c.passed for c in v.checks if c.name.startswith(("null-control", "determinism", "inputs")))
    assert v.shrunk_sizes and not v.timed and v.kernel_ms is None
    assert any("no time measured" in w for w in v.warnings)
    assert v.rel_norm_err is not None and v.rel_norm_err < 1e-5


def test_weak_task_is_not_credited():
    v = verify(fixture("tasks", "rownorm_weak"), fixture("positive", "rownorm_weak"), device="cpu")
    assert v.status == "weak_task" and not v.ok and v.correct
    failing = {c.name for c in v.checks if not c.passed}
    assert "null-control[constant]" in failing


def test_bf16_dot_is_not_checkable_under_the_interpreter():
    v = verify(fixture("tasks", "matmul_bf16"), fixture("positive", "matmul_bf16"), device="cpu")
    assert v.status == "not_checkable" and not v.checkable and "bf16" in v.reason


def test_cuda_cpp_is_not_checkable_on_cpu():
    v = verify(fixture("tasks", "relu"), fixture("positive", "relu_load_inline"), device="cpu")
    assert v.status == "not_checkable" and not v.checkable and "load_inline" in v.reason


def test_same_seed_reproduces_the_trials():
    a = verify(fixture("tasks", "softmax"), fixture("positive", "softmax"), device="cpu", seed=1234)
    b = verify(fixture("tasks", "softmax"), fixture("positive", "softmax"), device="cpu", seed=1234)
    assert a.seed == b.seed == 1234 and a.max_abs_err == b.max_abs_err and a.rel_norm_err == b.rel_norm_err


RELU_TASK = fixture("tasks", "relu").read_text()
GOOD = fixture("positive", "relu").read_text()


@pytest.mark.parametrize("source,status,needle", [
    ("def broken(:\n", "compile_error", "syntax"),
    ("import torch\n", "compile_error", "ModelNew"),
    (GOOD.replace("class ModelNew", "undefined_name()\n\n\nclass ModelNew"), "compile_error", "NameError"),
    (GOOD.replace("super().__init__()", "super().__init__()\n        self.w = nn.Parameter(torch.ones(3))"),
     "incorrect", "state_dict"),
    (GOOD.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0) + undefined_in_kernel"), "compile_error", "undefined"),
])
def test_build_failures_are_reported(source, status, needle):
    v = verify_source(RELU_TASK, source, device="cpu")
    assert v.status == status, v.feedback()
    assert needle in (v.reason + (v.error or "") + v.feedback())


def test_two_outputs_and_integer_inputs():
    v = verify(fixture("tasks", "ce_rows"), fixture("positive", "ce_rows"), device="cpu")
    assert v.status == "correct", v.feedback()
    bad = verify(fixture("tasks", "ce_rows"), fixture("hacks", "wrong_argmax"), device="cpu")
    assert bad.status == "incorrect" and "output 1:" in bad.reason


def test_literal_sizes_in_get_inputs_run_when_small_and_are_not_checkable_when_large():
    small = RELU_TASK.replace("torch.randn(batch_size, dim)", "torch.randn(8, 100)")
    v = verify_source(small, GOOD, device="cpu")
    assert v.status == "correct" and any("literal sizes [100]" in w for w in v.warnings)
    large = RELU_TASK.replace("torch.randn(batch_size, dim)", "torch.randn(16, 3, 224, 224)")
    v = verify_source(large, GOOD, device="cpu")
    assert v.status == "not_checkable" and "literal sizes [224]" in v.reason and "budget" in v.reason


def test_broken_task_is_not_checkable_not_a_crash():
    task = RELU_TASK.replace("return [torch.randn(batch_size, dim)]", "raise RuntimeError('no data')")
    v = verify_source(task, GOOD, device="cpu")
    assert v.status == "not_checkable" and "no data" in v.reason


def test_task_declared_tolerance_is_used():
    task = RELU_TASK + textwrap.dedent("""
        TOLERANCE = {"atol": 1e-2, "rtol": 1e-2, "rel_norm": 1e-2}
    """)
    bf16 = fixture("hacks", "bf16_downcast").read_text()
    assert verify_source(RELU_TASK, bf16, device="cpu").status == "incorrect"
    v = verify_source(task, bf16, device="cpu")
    assert v.status == "correct" and any("tolerance" in w for w in v.warnings)


@pytest.mark.gpu
@pytest.mark.parametrize("task,candidate", [("relu", "positive/relu"), ("softmax", "positive/softmax"),
                                            ("matmul_bf16", "positive/matmul_bf16"),
                                            ("relu", "positive/relu_load_inline")])
def test_gpu_positive_controls_are_correct_and_timed(task, candidate):
    v = verify(fixture("tasks", task), FIXTURES / f"{candidate}.py", device="cuda")
    assert v.status == "correct" and v.ok, v.feedback()
    assert v.timed and v.kernel_ms.median_ms > 0 and v.eager_ms is not None, v.warnings
    assert v.gpu and v.torch_version and v.triton_version


@pytest.mark.gpu
@pytest.mark.parametrize("hack,task,check", [("noop_empty", "relu", "compare"), ("partial_write", "relu", "compare"),
                                             ("data_ptr_cache", "relu", "compare"),
                                             ("input_mutation", "relu", "inputs-unchanged")])
def test_gpu_runtime_hacks_are_caught(hack, task, check):
    v = verify(fixture("tasks", task), fixture("hacks", hack), device="cuda")
    assert v.status == "incorrect" and not v.ok and not v.timed, v.feedback()
    assert check in {c.name.split("[")[0] for c in v.failed_checks}
