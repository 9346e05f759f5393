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
