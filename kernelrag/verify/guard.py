"""Run-time integrity checks inside the candidate process.

Installed before the candidate is imported, a ``Guard``:

* pins numerics flags (no TF32) and remembers them;
* snapshots the identity of every function the verifier relies on (comparisons,
  synchronisation, timers, serialisation, module calls, its own helpers) so that a
  replacement made at import or during a call is found by ``check()``;
* counts Triton kernel launches (wrapping ``JITFunction.run`` and, under the
  interpreter, ``InterpretedFunction.run``), the CPU-side proof that a kernel ran;
* remembers how many Python threads exist, and checks that no TorchFunctionMode or
  TorchDispatchMode is active and no trace/profile hook is installed.

On CPU it makes ``torch.cuda.synchronize`` a no-op (candidates often call it) and,
under the interpreter, makes ``triton.autotune`` use its first config instead of
benchmarking every config in the interpreter.
"""
from __future__ import annotations

import importlib
import inspect
import json
import sys
import threading
import time
from typing import Any

import torch

from kernelrag.verify import correctness, tolerances
from kernelrag.verify.verdict import Finding

_WATCHED: list[tuple[Any, str]] = [
    (torch, "allclose"), (torch, "equal"), (torch, "isclose"), (torch, "isnan"), (torch, "isfinite"),
    (torch, "where"), (torch, "save"), (torch, "load"), (torch, "empty"), (torch, "empty_like"),
    (torch, "zeros_like"), (torch, "full_like"), (torch, "no_grad"), (torch, "manual_seed"),
    (torch, "use_deterministic_algorithms"),
    (torch.Tensor, "__eq__"), (torch.Tensor, "__sub__"), (torch.Tensor, "sub"), (torch.Tensor, "abs"),
    (torch.Tensor, "double"), (torch.Tensor, "clone"), (torch.Tensor, "copy_"), (torch.Tensor, "to"),
    (torch.Tensor, "cpu"), (torch.Tensor, "sum"), (torch.Tensor, "max"), (torch.Tensor, "detach"),
    (torch.Tensor, "data_ptr"), (torch.Tensor, "__torch_function__"),
    (torch.nn.Module, "__call__"), (torch.nn.Module, "load_state_dict"), (torch.nn.Module, "state_dict"),
    (torch.nn.Module, "to"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda, "current_stream"),
    (torch.cuda, "is_available"),
    (time, "perf_counter"), (time, "perf_counter_ns"), (time, "time"), (time, "time_ns"),
    (time, "monotonic"), (time, "monotonic_ns"), (time, "process_time"), (time, "sleep"),
    (threading, "active_count"), (threading, "enumerate"), (json, "dump"), (json, "dumps"),
    (tolerances, "compare"), (tolerances, "compare_outputs"), (correctness, "output_problems"),
    (correctness, "flatten_outputs"), (correctness, "make_inputs"), (correctness, "digest"),
    (correctness, "build_model"), (correctness, "set_poison_fill"),
]


class Guard:
    def __init__(self, device: str, interpret: bool):
        self.device = device
        self.launches = 0
        self._pin_flags()
        if device == "cpu":
            torch.cuda.synchronize = lambda *a, **k: None
        else:   # torch._dynamo rewraps torch.manual_seed when imported (torch.compile, later): import it now
            importlib.import_module("torch._dynamo")
        watched = list(_WATCHED) + self._wrap_triton(interpret) + self._count_threads()
        self._ids = {(id(owner), attr): (owner, attr, _lookup(owner, attr)) for owner, attr in watched}
        self._flags = self._read_flags()
        self._threads = threading.active_count()
        self.reported: set[str] = set()

    # ------------------------------------------------------------ setup
    @staticmethod
    def _pin_flags() -> None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")

    @staticmethod
    def _read_flags() -> dict[str, Any]:
        return {
            "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        }

    def _wrap_triton(self, interpret: bool) -> list[tuple[Any, str]]:
        import triton.runtime.jit as jit

        classes = [jit.JITFunction]
        if interpret:
            from triton.runtime import interpreter

            classes.append(interpreter.InterpretedFunction)
            from triton.runtime import autotuner

            original_prune = autotuner.Autotuner.prune_configs
            autotuner.Autotuner.prune_configs = lambda self, kwargs: original_prune(self, kwargs)[:1]
        guard = self
        self._originals = {cls: cls.run for cls in classes}
        for cls in classes:
            original = cls.run

            def run(self, *args, _original=original, **kwargs):
                if not kwargs.get("warmup", False):
                    guard.launches += 1
                return _original(self, *args, **kwargs)

            cls.run = run
        return [(cls, "run") for cls in classes]

    def stop_counting_launches(self) -> None:
        """Put Triton's own ``run`` back (before timing, so the wrapper costs the candidate nothing)."""
        for cls, original in self._originals.items():
            cls.run = original
            self._ids[(id(cls), "run")] = (cls, "run", _lookup(cls, "run"))

    def _count_threads(self) -> list[tuple[Any, str]]:
        """Count Thread.start calls: a thread that already finished is still seen."""
        self.thread_starts = 0
        original = threading.Thread.start
        guard = self

        def start(thread, *args, **kwargs):
            guard.thread_starts += 1
            return original(thread, *args, **kwargs)

        threading.Thread.start = start
        return [(threading.Thread, "start")]

    # ------------------------------------------------------------ checks
    def check(self, where: str, *, threads: bool = True) -> list[Finding]:
        """Findings for anything changed since the guard was installed (each reported once)."""
        found = []
        for owner, attr, original in self._ids.values():
            if _lookup(owner, attr) is not original:
                name = f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"
                found.append(("monkeypatch", f"{name} was replaced at run time ({where}); the verifier's "
                                             "functions must not be touched"))
        now = self._read_flags()
        for key, value in self._flags.items():
            if now[key] != value:
                found.append(("monkeypatch", f"{key} changed from {value!r} to {now[key]!r} ({where})"))
        if threads and (self.thread_starts or threading.active_count() > self._threads):
            extra = max(self.thread_starts, threading.active_count() - self._threads)
            found.append(("concurrency", f"{extra} Python thread(s) started by the candidate ({where}); work "
                                         "off the calling thread is invisible to the timer"))
        if _mode_stack_depth() > 0:
            found.append(("tensor-subclass", f"a TorchFunctionMode/TorchDispatchMode is active ({where})"))
        if sys.gettrace() is not None or sys.getprofile() is not None:
            found.append(("introspection", f"a trace or profile hook is installed ({where})"))
        out = []
        for rule, message in found:
            key = f"{rule}:{message.split(' (')[0]}"
            if key not in self.reported:
                self.reported.add(key)
                out.append(Finding(rule, None, message, True))
        return out


def _lookup(owner: Any, attr: str) -> Any:
    """The attribute as stored (a classmethod object, not a fresh bound method)."""
    return inspect.getattr_static(owner, attr, None)


def _mode_stack_depth() -> int:
    depth = 0
    for fn in ("_len_torch_function_stack", "_len_torch_dispatch_stack"):
        getter = getattr(torch._C, fn, None)
        if getter is not None:
            depth += int(getter())
    return depth
