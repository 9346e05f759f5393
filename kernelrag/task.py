"""The task value: a KernelBench task resolved once, read once, hashed once.

    task = Task.of("bench/tasks/softmax.py")       # or the task's source text
    task.source, task.path, task.name, task.sha256
    task.module()                                  # executed once, on first use
    task.init_inputs()                             # get_init_inputs() on the meta device

One rule decides whether a string is a path or source (``is_source``). Whatever is
derived from the task (its module, its traced graph, its op pattern) is computed on
first use and kept on the value, so one ``generate`` run reads, executes and traces
the task once. torch is imported only when init inputs are built.
"""
from __future__ import annotations

import hashlib
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

from kernelrag.errors import TaskError

T = TypeVar("T")
MODULE_NAME = "kernelrag_task"


def is_source(text: str) -> bool:
    """The one rule: text with a line break or a ``class Model`` is source; anything else
    names a file."""
    return "\n" in text or "class Model" in text


def names_task(value: Any) -> bool:
    """Whether ``value`` is a task (a Task, a Path, source, an existing or ``.py`` file) rather
    than an op-pattern signature such as ``matmul>add>relu``."""
    if isinstance(value, (Task, Path)):
        return True
    text = str(value)
    return is_source(text) or text.endswith(".py") or Path(text).expanduser().is_file()


def read_source(value: "str | Path") -> str:
    """The text of a file path, or ``value`` itself when it is source (candidates as well as tasks)."""
    if isinstance(value, Path) or not is_source(str(value)):
        path = Path(value).expanduser()
        if not path.is_file():
            raise TaskError(f"file {str(value)!r} does not exist; give a file path or the source text")
        return path.read_text()
    return str(value)


def load_task(source: str, name: str = MODULE_NAME, label: str | None = None) -> types.ModuleType:
    """Execute source as a fresh module (it is the user's own code); no checks on what it defines."""
    module = types.ModuleType(name)
    module.__file__ = label or f"<{name}>"
    sys.modules[name] = module          # some task code looks itself up (dataclasses, pickling)
    try:
        exec(compile(source, module.__file__, "exec"), module.__dict__)
    finally:
        sys.modules.pop(name, None)
    return module


@dataclass(eq=False)
class Task:
    """A KernelBench task (``Model``, ``get_inputs``, ``get_init_inputs``) as one value."""

    source: str
    path: str | None = None
    name: str = "task"
    sha256: str = ""
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, task: "Task | str | Path") -> "Task":
        """The task value of a Task (itself), a file path or source text."""
        if isinstance(task, Task):
            return task
        if isinstance(task, Path) or not is_source(str(task)):
            path = Path(task).expanduser()
            if not path.is_file():
                raise TaskError(f"task file {str(task)!r} does not exist; give a KernelBench task file "
                                "(class Model, get_inputs, get_init_inputs) or its source text")
            return cls.from_source(path.read_text(), str(path))
        return cls.from_source(str(task))

    @classmethod
    def from_source(cls, source: str, path: str | None = None) -> "Task":
        return cls(source=source, path=path, name=Path(path).stem if path else "task",
                   sha256=hashlib.sha256(source.encode()).hexdigest())

    @property
    def label(self) -> str:
        return self.path or "<task source>"

    def memo(self, key: str, make: Callable[[], T]) -> T:
        """``make()`` once per task value; later calls return the same result."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def executed(self) -> types.ModuleType:
        """The source executed as a module (once), whatever it defines; TaskError when it does
        not parse."""
        return self.memo("executed", self._execute)

    def _execute(self) -> types.ModuleType:
        try:
            return load_task(self.source, label=self.label)
        except SyntaxError as exc:
            raise TaskError(f"{self.label} is not valid Python: {exc}; fix the task file") from None

    def module(self) -> types.ModuleType:
        """The task as a module (executed once); TaskError when it is not a KernelBench task."""
        module = self.executed()
        if not isinstance(getattr(module, "Model", None), type):
            raise TaskError(f"{self.label} defines no class Model; a KernelBench task needs Model, "
                            "get_inputs() and get_init_inputs()")
        return module

    def init_inputs(self) -> list[Any]:
        """``get_init_inputs()`` built on the meta device (tensors in them cost nothing)."""
        return self.memo("init_inputs", self._init_inputs)

    def _init_inputs(self) -> list[Any]:
        import torch

        with torch.device("meta"):
            inputs = self.module().get_init_inputs()
        return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
