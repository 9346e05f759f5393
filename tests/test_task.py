"""The task value: one path-or-source rule, read once, executed and traced once per value."""
from __future__ import annotations

import builtins

import pytest

from kernelrag.config import load_settings
from kernelrag.draft.offline import OfflineDrafter
from kernelrag.errors import TaskError
from kernelrag.memory.skills import SkillLibrary
from kernelrag.patterns import op_pattern
from kernelrag.task import Task, is_source, names_task, read_source

COUNTED = """import builtins
import torch
import torch.nn as nn
builtins.__dict__.setdefault("_kernelrag_task_runs", []).append(1)
N = 64

class Model(nn.Module):
    def forward(self, x):
        return torch.{op}(x)

def get_inputs():
    return [torch.randn(N, N)]

def get_init_inputs():
    return []
"""


@pytest.fixture()
def runs():
    builtins.__dict__["_kernelrag_task_runs"] = []
    yield builtins.__dict__["_kernelrag_task_runs"]
    del builtins.__dict__["_kernelrag_task_runs"]


def test_one_rule_for_path_or_source(tmp_path):
    assert is_source("import torch\nclass Model: pass\n") and is_source("class Model(nn.Module): pass")
    assert not is_source("bench/tasks/relu.py") and not is_source("softmax[dim=-1]")
    path = tmp_path / "t.py"
    path.write_text(COUNTED.format(op="relu"))
    task = Task.of(str(path))
    assert (task.path, task.name, task.source) == (str(path), "t", path.read_text())
    assert Task.of(path).sha256 == task.sha256 == Task.of(task.source).sha256 and len(task.sha256) == 64
    assert Task.of(task) is task and Task.of(task.source).path is None
    with pytest.raises(TaskError, match="does not exist"):
        Task.of(str(tmp_path / "gone.py"))
    assert names_task(path) and names_task("x.py") and names_task(task.source) and not names_task("matmul>add")
    assert read_source(path) == task.source and read_source(task.source) == task.source


def test_not_a_task_says_so():
    with pytest.raises(TaskError, match="defines no class Model"):
        Task.of("x = 1\ny = 2\n").module()
    with pytest.raises(TaskError, match="not valid Python"):
        Task.of("def (:\n").module()


def test_trace_plan_and_drafts_execute_the_task_once(runs):
    task = Task.of(COUNTED.format(op="relu"))
    pattern = op_pattern(task)
    assert pattern.known and pattern.signature == "relu"
    assert op_pattern(task) is pattern
    drafter = OfflineDrafter(SkillLibrary(load_settings()))
    first = drafter.draft(task, pattern, device="cpu")
    assert first.ok, first.reason
    drafter.draft(task, pattern, exclude={first.skill or first.method}, device="cpu")
    assert task.init_inputs() == [] and len(runs) == 1


def test_a_failing_codegen_plan_is_tried_once_per_run(monkeypatch, tmp_path, runs):
    import kernelrag.draft.offline as offline

    calls = []
    real = offline.generate_elementwise

    def counted(task, pattern=""):
        calls.append(pattern)
        return real(task, pattern)

    monkeypatch.setattr(offline, "generate_elementwise", counted)
    empty = tmp_path / "no-skills"
    empty.mkdir()
    task = Task.of(COUNTED.format(op="cumsum").replace("torch.cumsum(x)", "torch.cumsum(x, dim=1)"))
    pattern = op_pattern(task)
    drafter = OfflineDrafter(SkillLibrary(load_settings(seed_skills_dir=empty)))
    for _ in range(3):
        d = drafter.draft(task, pattern)
        assert d.ok and d.method.startswith("lowering:"), d.reason   # composed after codegen failed
    assert len(calls) == 1 and len(runs) == 1
