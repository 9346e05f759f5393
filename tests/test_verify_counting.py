"""FLOPs and bytes for the roofline: declared by the task, or counted on the meta device."""
from __future__ import annotations

from pathlib import Path

from kernelrag.verify.correctness import load_task
from kernelrag.verify.counting import count

TASKS = Path(__file__).parent / "fixtures" / "verify" / "tasks"


def test_declared_counts_win():
    counts = count(load_task((TASKS / "matmul.py").read_text(), "matmul"))
    assert counts.source == "declared" and counts.flops == 2 * 8205 * 5921 * 2949


def test_counted_on_meta_without_allocating():
    counts = count(load_task((TASKS / "layernorm.py").read_text(), "layernorm"))
    n = 2048 * 8191
    assert counts.source == "counted" and counts.flops == 0          # no matmul: memory-bound
    assert counts.bytes_moved == 4 * (2 * n + 2 * 8191)              # x in, y out, weight and bias


def test_matmul_flops_are_counted():
    src = (TASKS / "matmul.py").read_text().split("def get_flops")[0]
    counts = count(load_task(src, "matmul_undeclared"))
    assert counts.source == "counted" and counts.flops == 2 * 8205 * 5921 * 2949


SUM_DIM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(16))

    def forward(self, x):
        return x.sum(dim=1) * self.scale


def get_inputs():
    return [torch.randn(4, 8, 16)]


def get_init_inputs():
    return []
'''


def test_bytes_are_split_into_read_and_written():
    counts = count(load_task(SUM_DIM, "sum_dim"))
    assert counts.source == "counted"
    assert counts.bytes_read == 4 * (4 * 8 * 16 + 16)                # x and the parameter, read once
    assert counts.bytes_written == 4 * 4 * 16                        # the (4, 16) sum, written once
    assert counts.bytes_read + counts.bytes_written == counts.bytes_moved
    assert {"bytes_read", "bytes_written"} <= set(counts.to_dict())


def test_a_declared_task_keeps_the_split_only_when_its_bytes_are_the_counted_ones():
    honest = count(load_task(SUM_DIM + "\ndef get_flops():\n    return 512\n\n\ndef get_bytes():\n"
                             "    return 4 * (4 * 8 * 16 + 16) + 4 * 4 * 16\n", "sum_dim_declared"))
    assert honest.source == "declared" and honest.flops == 512
    assert (honest.bytes_read, honest.bytes_written) == (4 * (4 * 8 * 16 + 16), 4 * 4 * 16)
    other = count(load_task(SUM_DIM + "\ndef get_flops():\n    return 512\n\n\ndef get_bytes():\n"
                            "    return 10**6\n", "sum_dim_other_bytes"))
    assert other.bytes_moved == 10**6 and other.bytes_read is None and other.bytes_written is None
    broken = SUM_DIM.replace("return x.sum(dim=1) * self.scale", "raise RuntimeError('not on meta')")
    uncountable = count(load_task(broken + "\ndef get_flops():\n    return 1\n\n\ndef get_bytes():\n"
                                  "    return 7\n", "sum_dim_uncountable"))
    assert (uncountable.source, uncountable.bytes_moved, uncountable.bytes_read) == ("declared", 7, None)


def test_layernorm_reads_its_weight_and_bias():
    counts = count(load_task((TASKS / "layernorm.py").read_text(), "layernorm"))
    n = 2048 * 8191
    assert (counts.bytes_read, counts.bytes_written) == (4 * (n + 2 * 8191), 4 * n)
