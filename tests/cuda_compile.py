"""Compile, for an sm_90 GPU, the Triton kernels a module launches under the CPU interpreter.

The interpreter runs a kernel as Python: it does not check what Triton's code generator
checks (a loop-carried variable keeping one type, constexpr-only arguments, what
``tl.associative_scan`` accepts). Triton's compiler itself runs on a CPU: ``record``
notes every launch of a module's kernels while the interpreter runs them (argument
types, the integers and floats, the keyword options), and ``compile_launches`` hands
each kernel, launched that way, to Triton's own binder (the specialisation of a launch
on the GPU: an integer equal to 1 becomes a constant, pointers get their alignment) and
compiles it to a cubin for ``GPUTarget("cuda", 90, 32)``. No GPU is needed.

The compile runs in another process without ``TRITON_INTERPRET``: the interpreter
leaves ``triton.language`` patched once a kernel has called ``tl.max`` or ``tl.sum``,
and the code generator cannot run on the patched module. That process never runs the
interpreter, so one is kept for the whole pytest run (``--serve``: a batch of jobs per
line) rather than paying the torch and Triton imports again for every test.
"""
from __future__ import annotations

import atexit
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import types
from typing import Any

TARGET = ("cuda", 90, 32)
LAUNCH_OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion")


def load(source: str, path: str) -> types.ModuleType:
    """The module ``source`` written to ``path`` and imported (Triton reads a kernel's text from its file)."""
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _describe(value: Any) -> Any:
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return {"tensor": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return {"repr": repr(value)}


def record(module: types.ModuleType, execute: bool = True) -> list[dict]:
    """Hooks on every ``@triton.jit`` function of ``module`` (interpreted); the list fills as they run.

    ``execute=False`` records each launch exactly as the interpreter would see it (its
    hooks run on the same arguments) but runs no program of the grid: the kernel bodies,
    which the interpreter runs as Python at a cost that grows with the tile sizes, are left
    to the sm_90 compile. For launchers whose launches do not depend on tensor values."""
    from triton.runtime.interpreter import InterpretedFunction

    seen: list[dict] = []
    options: dict[str, dict] = {}       # the launch options (LAUNCH_OPTIONS) of the call in flight

    def hook(name: str):
        return lambda *args, **kwargs: seen.append(
            {"kernel": name, "args": [_describe(a) for a in args],
             "kwargs": {k: _describe(v) for k, v in kwargs.items()}, "options": options.pop(name, {})})

    def keep_options(name: str, run):
        def wrapped(*args, **kwargs):   # the interpreter drops these before its hooks see the call
            options[name] = {k: kwargs[k] for k in LAUNCH_OPTIONS if k in kwargs}
            if not execute:
                kwargs["grid"] = (0,)       # the hooks see the launch; no program runs
            return run(*args, **kwargs)
        return wrapped

    for name, value in vars(module).items():
        if isinstance(value, InterpretedFunction):
            value.add_pre_run_hook(hook(name))
            value.run = keep_options(name, value.run)
    return seen


def launches_of(task_source: str, draft_source: str, path: str | None = None, name: str = "cand") -> list[dict]:
    """The launches a draft makes on its task's inputs, recorded without running a program
    (``record(..., execute=False)``): the draft loaded (written to ``path`` when the launches go
    on to ``compile_launches``, which reads a kernel's text from its file), the task loaded, its
    ``ModelNew`` built from ``get_init_inputs()`` and called on ``get_inputs()``."""
    from kernelrag.task import load_task

    cand = load(draft_source, path) if path else load_task(draft_source, name)
    launches = record(cand, execute=False)
    task = load_task(task_source, f"{name}_task")
    cand.ModelNew(*task.get_init_inputs())(*task.get_inputs())
    return launches


RESULT_MARK = "@@compiled "
_server: dict[str, Any] = {}      # the compile process kept for this pytest run: proc, env, errlog


def _stop_server() -> None:
    proc = _server.pop("proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def _compile_process(env: dict[str, str]) -> subprocess.Popen:
    """The kept compile process, (re)started where it is gone or was started with another environment."""
    # per-test homes and pytest's current-test name change nothing here
    key = {k: v for k, v in env.items() if not k.startswith(("KERNELRAG_", "PYTEST_"))}
    proc = _server.get("proc")
    if proc is None or proc.poll() is not None or _server.get("env") != key:
        _stop_server()
        errlog = tempfile.TemporaryFile(mode="w+")
        _server.update(env=key, errlog=errlog, proc=subprocess.Popen(
            [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=errlog, text=True, env=env))
        if not _server.get("atexit"):
            atexit.register(_stop_server)
            _server["atexit"] = True
    return _server["proc"]


def compile_launches(modules: list[tuple[str, list[dict]]], timeout_s: int = 900) -> list[dict]:
    """Compile each distinct launch of each (module path, launches) in the compile process, with
    its launch options: ``[{"path", "kernel", "ok", "error", "registers", "spill_bytes",
    "shared_bytes"}]`` (the last three from ptxas and the compiler, None where unknown)."""
    jobs = []
    for path, launches in modules:
        seen: set[str] = set()
        for launch in launches:
            key = json.dumps(launch, sort_keys=True)
            if key not in seen:
                seen.add(key)
                jobs.append({"path": path, **launch})
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_CACHE_DIR", os.path.join(tempfile.gettempdir(), "kernelrag-sm90-cache"))
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = _compile_process(env)
    timer = threading.Timer(timeout_s, proc.kill)       # a limit on waiting, as subprocess.run's timeout was
    timer.start()
    try:
        proc.stdin.write(json.dumps(jobs) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith(RESULT_MARK):
                return json.loads(line[len(RESULT_MARK):])
    except (BrokenPipeError, OSError):
        pass
    finally:
        timer.cancel()
    code = proc.wait()
    errlog = _server["errlog"]
    errlog.seek(0)
    _stop_server()
    raise RuntimeError(f"the compile process failed ({code}): {errlog.read()[-3000:]}")


def _compile_one(module: types.ModuleType, launch: dict) -> None:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import MockTensor, create_function_from_signature

    def value(v: Any) -> Any:
        if isinstance(v, dict) and "tensor" in v:
            return MockTensor(getattr(torch, v["tensor"]))
        if isinstance(v, dict) and "tensordesc" in v:    # a host-built TMA descriptor over such a tensor
            from triton.tools.tensor_descriptor import TensorDescriptor
            return TensorDescriptor(MockTensor(getattr(torch, v["tensordesc"])), v["shape"], v["strides"], v["block"])
        if isinstance(v, dict):
            raise ValueError(f"argument {v['repr']} cannot be re-created for the compile")
        return v

    jit = getattr(module, launch["kernel"])
    args = [value(a) for a in launch["args"]]
    kwargs = {k: value(v) for k, v in launch["kwargs"].items()}
    kwargs.update(launch.get("options") or {})
    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    opts, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
    compiled = triton.compile(ASTSource(jit, signature, constexprs, attrs), target=target, options=opts.__dict__)
    ptx = compiled.asm.get("ptx")
    return {**_ptxas_usage(ptx), **_mma_loop(ptx), "shared_bytes": getattr(compiled.metadata, "shared", None)}


def _mma_loop(ptx: str | None) -> dict:
    """The first loop of the PTX that issues wgmma (the K loop), per trip: its wgmma, those that
    start their accumulator afresh (scale-d 0: the tile's earlier value not added in), its
    ``wgmma.wait_group`` and its fp32 adds and subtractions (what the CUDA cores add in).
    Triton folds an fp32 add of a dot begun from zero into the dot's accumulator; this is
    where that shows."""
    import re

    stats = {"loop_wgmma": None, "loop_fresh_wgmma": None, "loop_wgmma_waits": None, "loop_f32_adds": None}
    lines = (ptx or "").splitlines()
    for i, line in enumerate(lines):
        head = re.match(r"^(\$L__BB\d+_\d+):.*Loop Header", line)
        if not head:
            continue
        end = next((j for j in range(i + 1, len(lines)) if re.search(rf"\bbra(\.uni)?\s+{re.escape(head.group(1))};", lines[j])), None)
        body = lines[i:end] if end else []
        mma = [x for x in body if "wgmma.mma_async" in x]
        if mma:
            return {"loop_wgmma": len(mma),
                    "loop_fresh_wgmma": sum(bool(re.search(r"%rd\d+, 0, ", x)) for x in mma),
                    "loop_wgmma_waits": sum("wgmma.wait_group" in x for x in body),
                    "loop_f32_adds": sum(bool(re.match(r"\s+(add|sub)(\.rn)?\.f32\b", x)) for x in body)}
    return stats


def _ptxas_usage(ptx: str | None) -> dict:
    """Registers and spill bytes of the kernel, from ``ptxas -v`` on its PTX (Triton's own
    ptxas; on a GPU the driver reports these, here nothing loads the cubin)."""
    import re

    from triton.backends.nvidia.compiler import get_ptxas

    usage = {"registers": None, "spill_bytes": None}
    if not ptx:
        return usage
    # global memory instructions by width: scalar loads where v4 were expected mean the
    # compiler could not prove contiguity or alignment (a bandwidth signal without a GPU)
    for op in ("ld", "st"):
        lines = [line for line in ptx.splitlines() if re.search(rf"\b{op}\.global\b", line)]
        usage[f"{op}_global"] = len(lines)
        usage[f"{op}_global_v4"] = sum(".v4." in line for line in lines)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        done = subprocess.run([get_ptxas(TARGET[1]).path, f"-arch=sm_{TARGET[1]}a", "-v", src,
                               "-o", os.path.join(tmp, "kernel.cubin")], capture_output=True, text=True)
    text = done.stdout + done.stderr
    if m := re.search(r"Used (\d+) registers", text):
        usage["registers"] = int(m.group(1))
    if m := re.search(r"(\d+) bytes spill stores", text):
        usage["spill_bytes"] = int(m.group(1))
    return usage


def _compile_jobs(jobs: list[dict]) -> list[dict]:
    modules: dict[str, types.ModuleType] = {}      # fresh for each batch: a path is imported as it is now
    results = []
    for job in jobs:
        path = job["path"]
        try:
            if path not in modules:
                spec = importlib.util.spec_from_file_location(f"compiled_{len(modules)}", path)
                modules[path] = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(modules[path])
            usage = _compile_one(modules[path], job)
            results.append({"path": path, "kernel": job["kernel"], "ok": True, "error": "", **usage})
        except Exception as exc:     # noqa: BLE001 - the compiler's message is the result
            results.append({"path": path, "kernel": job["kernel"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                            "registers": None, "spill_bytes": None, "shared_bytes": None})
    return results


def _main() -> int:
    if "--serve" in sys.argv[1:]:            # one JSON list of jobs per line in, one marked result line out
        for line in sys.stdin:
            print(RESULT_MARK + json.dumps(_compile_jobs(json.loads(line))), flush=True)
        return 0
    print(json.dumps(_compile_jobs(json.loads(sys.stdin.read()))))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
