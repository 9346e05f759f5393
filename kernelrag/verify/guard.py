"""Run-time integrity checks inside the candidate process.

Installed before the candidate is imported, a ``Guard``:

* pins numerics flags (no TF32) and remembers them;
* snapshots the identity of every function the verifier relies on (comparisons,
  synchronisation, timers, serialisation, module calls, its own helpers) so that a
  replacement made at import or during a call is found by ``check()``;
* counts Triton kernel launches (wrapping ``JITFunction.run`` and, under the
  interpreter, ``InterpretedFunction.run``), the CPU-side proof that a kernel ran,
  and notes the ``tl.dot`` precision strings ("ieee", "tf32x3", ...) passed to them
  as constexprs, so the verdict can say which precision path ran;
* remembers how many Python threads exist, and checks that no TorchFunctionMode or
  TorchDispatchMode is active and no trace/profile hook is installed.

On CPU it makes ``torch.cuda.synchronize`` a no-op (candidates often call it) and,
under the interpreter, makes ``triton.autotune`` use its first config instead of
benchmarking every config in the interpreter.
"""
from __future__ import annotations

import importlib
import inspect
import json  # noqa: F401  (watched by dotted path in WATCHED; resolved through sys.modules)
import os
import sys
import sysconfig
import threading
import time  # noqa: F401  (watched)
import types
from typing import Any

import torch

from kernelrag.verify import correctness, tolerances  # noqa: F401  (watched)
from kernelrag.verify.precision import DOT_PRECISIONS
from kernelrag.verify.verdict import Finding

# Every function the verifier relies on, by dotted path: comparisons, synchronisation,
# timers, serialisation, module calls and its own helpers. ``Guard.check`` reports any
# that was replaced after the guard was installed; ``tamper_check`` (run around timing)
# also requires each to come from torch, triton, the standard library or kernelrag.
WATCHED: tuple[str, ...] = (
    "torch.allclose", "torch.isclose", "torch.equal", "torch.isnan", "torch.isfinite", "torch.where",
    "torch.save", "torch.load", "torch.empty", "torch.empty_like", "torch.zeros_like", "torch.full_like",
    "torch.no_grad", "torch.manual_seed", "torch.use_deterministic_algorithms", "torch.testing.assert_close",
    "torch.Tensor.__eq__", "torch.Tensor.__sub__", "torch.Tensor.sub", "torch.Tensor.abs",
    "torch.Tensor.double", "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.to", "torch.Tensor.cpu",
    "torch.Tensor.sum", "torch.Tensor.max", "torch.Tensor.detach", "torch.Tensor.data_ptr",
    "torch.Tensor.__torch_function__",
    "torch.nn.Module.__call__", "torch.nn.Module.load_state_dict", "torch.nn.Module.state_dict",
    "torch.nn.Module.to",
    "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.cuda.Event.query", "torch.cuda.current_stream",
    "torch.cuda.set_stream", "torch.cuda.is_available", "torch._C._cuda_synchronize",
    "torch.profiler.profile", "torch.profiler.profile.events",
    "time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.sleep",
    "threading.active_count", "threading.enumerate", "json.dump", "json.dumps",
    "kernelrag.verify.tolerances.compare", "kernelrag.verify.tolerances.compare_outputs",
    "kernelrag.verify.correctness.output_problems", "kernelrag.verify.correctness.flatten_outputs",
    "kernelrag.verify.correctness.make_inputs", "kernelrag.verify.correctness.digest",
    "kernelrag.verify.correctness.build_model", "kernelrag.verify.correctness.set_poison_fill",
)
enumerate_threads = threading.enumerate   # captured before any candidate is imported
_MISSING = object()


def _owner_attr(path: str) -> tuple[Any, str] | None:
    """(object, attribute) for a dotted path, or None when the owner does not exist here."""
    owner_path, _, attr = path.rpartition(".")
    owner = _resolve(owner_path)
    return None if owner is _MISSING else (owner, attr)


class Guard:
    def __init__(self, device: str, interpret: bool):
        self.device = device
        self.launches = 0
        self.dot_precisions: set[str] = set()
        self._pin_flags()
        if device == "cpu":
            torch.cuda.synchronize = lambda *a, **k: None
        else:   # torch._dynamo rewraps torch.manual_seed when imported (torch.compile, later): import it now
            importlib.import_module("torch._dynamo")
        watched = [oa for path in WATCHED if (oa := _owner_attr(path))]
        watched += self._wrap_triton(interpret) + self._count_threads()
        self._ids = {(id(owner), attr): (owner, attr, _lookup(owner, attr)) for owner, attr in watched}
        self._flags = self._read_flags()
        self._threads = threading.active_count()
        self.reported: set[str] = set()
        take_snapshot()   # after torch._dynamo's rewraps and the guard's own wrappers

    # ------------------------------------------------------------ setup
    @staticmethod
    def _pin_flags() -> None:
        correctness.pin_fp32_semantics()

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
                    guard.dot_precisions.update(v for v in kwargs.values()
                                                if isinstance(v, str) and v in DOT_PRECISIONS)
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


# ---- tampered timers and foreign threads (hacks 9 and 11) -------------------------


_BUILTIN_TYPES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                  types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType)


def _library_roots() -> tuple[str, ...]:
    """Directories whose code is trusted: torch, triton, the standard library, installed
    packages and kernelrag itself. Candidates live in none of them."""
    import importlib.util

    paths = sysconfig.get_paths()
    roots = [paths.get("stdlib"), paths.get("purelib"), paths.get("platlib"),
             os.path.dirname(threading.__file__), os.path.dirname(torch.__file__),
             os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        roots.append(os.path.dirname(spec.origin))
    return tuple(sorted({os.path.realpath(p) for p in roots if p}))


_ROOTS = _library_roots()
_TORCH_TRITON_ROOTS = tuple(r for r in _ROOTS if os.path.basename(r) in ("torch", "triton"))


def _resolve(path: str) -> Any:
    """The object at a dotted path, as stored (a classmethod object, not a fresh bound method)."""
    root, *rest = path.split(".")
    obj = sys.modules.get(root, _MISSING)
    for part in rest:
        if obj is _MISSING:
            break
        obj = inspect.getattr_static(obj, part, _MISSING)
    return obj


_SNAPSHOT: dict[str, Any] = {}


def take_snapshot() -> None:
    """Remember what each watched path is now (at import, and again when a Guard is installed)."""
    _SNAPSHOT.clear()
    _SNAPSHOT.update({path: _resolve(path) for path in WATCHED})


take_snapshot()


def _trusted_file(path: str | None) -> bool:
    if not path or not os.path.isabs(path):
        return False
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in _ROOTS)


def _code_file(obj: Any) -> str | None:
    for _ in range(4):   # unwrap partials and bound methods
        if hasattr(obj, "func") and type(obj).__name__ == "partial":
            obj = obj.func
        elif isinstance(obj, types.MethodType):
            obj = obj.__func__
        else:
            break
    code = getattr(obj, "__code__", None)
    if not isinstance(code, types.CodeType):
        code = getattr(getattr(type(obj), "__call__", None), "__code__", None)
    return code.co_filename if isinstance(code, types.CodeType) else None


def _provenance_problem(path: str, obj: Any) -> str | None:
    leaf = path.rsplit(".", 1)[-1]
    if isinstance(obj, (classmethod, staticmethod, types.MethodType)):
        obj = obj.__func__
    if isinstance(obj, _BUILTIN_TYPES):
        name = getattr(obj, "__name__", "")
        return None if name == leaf else f"is the built-in {name!r}, not {leaf!r}"
    if isinstance(obj, type):
        module = sys.modules.get(getattr(obj, "__module__", ""))
        return None if _trusted_file(getattr(module, "__file__", None)) else f"is a class from {obj.__module__}"
    if isinstance(obj, types.FunctionType):
        file = obj.__code__.co_filename
        return None if _trusted_file(file) else f"is defined in {file}, not in torch or the standard library"
    return f"is a {type(obj).__name__}, not the library function"


def tamper_check() -> list[str]:
    """Timer, synchronize and comparison functions that were replaced or are not the library's.

    Each guarded name must still be the object it was when this module was imported,
    and must come from torch or the standard library (a lambda, a wrapper from
    another file or a swapped built-in does not).
    """
    issues = []
    for path, original in _SNAPSHOT.items():
        current = _resolve(path)
        if current is _MISSING and original is _MISSING:
            continue
        if current is not original and original is not _MISSING:
            issues.append(f"{path} was replaced after the verifier loaded")
            continue
        problem = _provenance_problem(path, current)
        if problem:
            issues.append(f"{path} {problem}")
    return issues


def _thread_code_file(t: threading.Thread) -> tuple[bool, str | None]:
    """(whether there is code to judge, the file of the code the thread runs)."""
    target = t.__dict__.get("_target") or t.__dict__.get("function")   # Thread / Timer
    if target is None and type(t).run is threading.Thread.run:
        return False, None        # finished running its target: nothing left to judge
    return True, _code_file(target) if target is not None else _code_file(type(t).run)


def _library_thread(t: threading.Thread) -> bool:
    """A thread that torch or triton started for itself (compile workers and the like)."""
    judged, file = _thread_code_file(t)
    if not judged or not file or not os.path.isabs(file):
        return not judged
    real = os.path.realpath(file)
    return any(real.startswith(root + os.sep) for root in _TORCH_TRITON_ROOTS)


def foreign_threads() -> list[str]:
    """Live Python threads whose code is not torch's, triton's, the standard library's or kernelrag's."""
    out = []
    main, current = threading.main_thread(), threading.current_thread()
    for t in enumerate_threads():
        if t is main or t is current or type(t).__name__ == "_DummyThread" or not t.is_alive():
            continue
        judged, file = _thread_code_file(t)
        if judged and not _trusted_file(file):
            out.append(f"{t.name} (code in {file or 'an unknown file'})")
    return out
