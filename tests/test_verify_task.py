"""Loading KernelBench tasks and shrinking their sizes for CPU checks."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from kernelrag.errors import TaskError
from kernelrag.verify import task as T

FIXTURES = Path(__file__).parent / "fixtures" / "verify" / "tasks"
BODY = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""


def constants(source: str) -> dict:
    return T.size_constants(ast.parse(source))


def test_malformed_task_raises_task_error():
    with pytest.raises(TaskError, match="get_init_inputs"):
        T.check_task_source("class Model: pass\ndef get_inputs(): pass\n")
    with pytest.raises(TaskError, match="does not parse"):
        T.check_task_source("def (")


def test_constant_expressions_and_tuples_are_sizes():
    src = "M = 1024 * 2\nK = 2 ** 12\ninput_shape = (32768,)\nname = 'x'\neps = 1e-5\nN = M // 2\n" + BODY
    assert constants(src) == {"M": 2048, "K": 4096, "input_shape": (32768,)}


def test_shrink_keeps_relations():
    src = "batch_size = 4096\ndim = 4095\nsame = 4096\nreduce_dim = 1\ngroups = 3\nchannels = 96\n" + BODY
    variant = T.shrink(src, T.ShrinkLevel(64, 16), "small")
    new = constants(variant.source)
    assert new["reduce_dim"] == 1 and new["groups"] == 3            # small constants untouched
    assert new["batch_size"] == new["same"]                          # equal originals stay equal
    assert new["batch_size"] & (new["batch_size"] - 1) == 0           # power of two stays one
    assert new["dim"] % 2 == 1                                       # odd stays odd (ragged tail)
    assert new["channels"] % 3 == 0                                  # still divisible by groups
    assert 16 <= new["channels"] < 96
    assert new["batch_size"] > new["dim"] > new["channels"]           # order kept
    assert variant.sizes["dim"] == [4095, new["dim"]]
    assert "same" in variant.sizes and "reduce_dim" not in variant.sizes


def test_tuple_sizes_shrink_element_wise():
    variant = T.shrink("input_shape = (32768, 3)\nbatch_size = 128\ndim = 1\n" + BODY, T.ShrinkLevel(64, 16), "s")
    shape = constants(variant.source)["input_shape"]
    assert shape[1] == 3 and shape[0] < 32768
    assert variant.sizes["input_shape[0]"] == [32768, shape[0]]


def test_rewritten_task_still_runs_and_expressions_follow():
    src = textwrap.dedent("""
        hidden = 4096
        heads = 8
        head_dim = hidden // heads
    """) + BODY.replace("batch_size, dim", "heads, head_dim")
    variant = T.shrink(src, T.ShrinkLevel(64, 16), "s")
    namespace: dict = {}
    exec(variant.source, namespace)
    assert namespace["head_dim"] * namespace["heads"] == namespace["hidden"] < 4096


def test_cpu_variants_retarget_cuda_tensors():
    src = "batch_size = 4096\ndim = 4096\n" + BODY.replace(
        "torch.randn(batch_size, dim)", "torch.randn(batch_size, dim, device='cuda').cuda()")
    primary, second = T.variants(src, "cpu")
    assert "'cuda'" not in primary[0].source and ".cuda()" not in primary[0].source
    original, _ = T.variants(src, "cuda")
    assert original[0].name == "original" and original[0].source == src


def test_variants_give_a_ladder_and_a_second_shape():
    primary, second = T.variants((FIXTURES / "sum_dim.py").read_text(), "cpu")
    assert [v.name for v in primary][0] == "shrunk-16"
    assert second and second[0].sizes != primary[0].sizes
    for v in primary + second:
        assert v.sizes["dim2"][1] % 2 == 1        # 4095 keeps an odd tail at every level


def test_literal_sizes_in_get_inputs_are_reported():
    tree = ast.parse("batch_size = 16\n" + BODY.replace("torch.randn(batch_size, dim)",
                                                        "torch.randn(batch_size, 3, 224, 224)"))
    assert T.literal_sizes_in_get_inputs(tree, 64) == [224]


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.py")))
def test_fixture_tasks_shrink_below_their_originals(name):
    primary, second = T.variants((FIXTURES / f"{name}.py").read_text(), "cpu")
    for original, new in primary[0].sizes.values():
        assert new < original
