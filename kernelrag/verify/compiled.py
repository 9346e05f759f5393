"""The torch.compile baseline of a task, inside a reference process (which never runs
candidate code): compiled with inductor while holding no GPU, first run and timed only
when the parent grants the GPU (``baselines.Baselines`` schedules it).

Protocol: messages go out through the ``send`` the reference process gives ``Baseline``;
the one command read here is the parent's ``{"cmd": "gpu"}`` that answers ``need_gpu``.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from typing import Any

import torch

from kernelrag.verify import compile_cache, correctness as C
from kernelrag.verify.tolerances import tolerance_for


_send: list = []     # the reference process's message writer (set by Baseline)


def send(message: dict[str, Any]) -> None:
    _send[0](message)


_GPU_GRANTED: list[bool] = []       # for the compile under way (every graph of it); reset per compile


def _gated_inductor(gm: Any, example_inputs: list) -> Any:
    """torch.compile's default backend (inductor), compiled here with no GPU work; before the
    compiled code first runs (its first call, and any config autotuning inductor does then),
    ask the parent for the GPU and wait until it is granted (``Baselines``)."""
    from torch._inductor.compile_fx import compile_fx

    compiled_fn = compile_fx(gm, example_inputs)

    def run(*args: Any) -> Any:
        if not _GPU_GRANTED:
            send({"phase": "need_gpu"})
            line = sys.stdin.readline()
            if json.loads(line or "{}").get("cmd") != "gpu":
                raise RuntimeError("the parent did not grant the GPU for the baseline's first call")
            _GPU_GRANTED.append(True)
        return compiled_fn(*args)

    return run


_WARMING: list[threading.Thread] = []


def warm_in_background() -> None:
    """Start inductor in this reference process ahead of its first baseline, on a thread.

    A fresh process's first torch.compile spent 10-23 s on the H200 (2026-12-02), with the
    compiled code loaded from an earlier session's cache as much as without it: importing
    inductor and starting its code generation and Triton's compiler, where the same
    process's later compiles took 0.1-0.6 s. The warm-up compiles one tiny graph (a
    pointwise chain and a reduction) to Triton kernels and never runs it: no GPU work, so
    it may overlap any measurement. ``Baseline.compile`` waits for it (dynamo is not
    compiled from two threads at once); a failure only means the first baseline pays."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not torch.cuda.is_available():
        return
    thread = threading.Thread(target=_warm, name="kernelrag-warm-inductor", daemon=True)
    thread.start()
    _WARMING.append(thread)


class _Tiny(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(x) * 2.0 + 1.0, x.sum(dim=-1)


def _warm() -> None:
    try:
        import torch._dynamo  # noqa: F401 - it rewraps torch.manual_seed: before the guard's snapshot
        from torch._inductor.compile_fx import compile_fx

        with torch.no_grad():
            compile_fx(torch.fx.symbolic_trace(_Tiny()), [torch.empty(64, 1024, device="cuda")])
    except Exception:   # noqa: BLE001 - an optimisation only
        pass


def wait_warm() -> float:
    """Wait for the warm-up (if any); the seconds waited."""
    t0 = time.monotonic()
    while _WARMING:
        _WARMING.pop().join()
    return time.monotonic() - t0


def _cache_tag() -> str:
    import triton

    return compile_cache.tag(torch.__version__, triton.__version__, torch.cuda.get_device_name())


class Baseline:
    """The torch.compile baseline of one task, in two steps the parent schedules apart:
    ``compile`` (build the model and inputs: untimed GPU work; "built"; compile with
    inductor: no GPU work, so nothing held; "need_gpu", then after the parent's "gpu" the
    first call at the task's sizes, with the GPU alone) and ``time`` (100 calls
    interleaved with eager, with the GPU to itself). The compiled model lives here between
    the two, never elsewhere. Inductor's and Triton's cache files from an earlier session's
    compile of the same task, when the parent offers them, are loaded first, and a fresh
    compile's files go back to the parent for the next session (``compile_cache``).

    The timing code is the candidates' own (``timing.time_against_baselines``, the compiled
    model in the candidate's seat); its integrity findings are kept as warnings only, since
    no candidate code runs here.
    """

    def __init__(self, send_message):
        _send[:] = [send_message]
        self.held: dict[str, Any] | None = None

    def compile(self, cmd: dict[str, Any]) -> dict[str, Any]:
        import importlib

        warm_wait_s = wait_warm()
        importlib.import_module("torch._dynamo")    # it rewraps torch.manual_seed: before timing's snapshot
        from kernelrag.verify import guard

        guard.take_snapshot()
        self.drop()
        seed, t0 = int(cmd["seed"]), time.monotonic()
        C.pin_fp32_semantics()      # as in the candidate's process: eager and compile without TF32
        try:
            torch.set_grad_enabled(False)
            mod = C.load_task(cmd["source"], "baseline")
            model = C.build_model(mod, seed, "cuda")
            counter = itertools.count(1)

            def make_inputs() -> list:
                return C.make_inputs(mod, seed + next(counter), "task", "cuda")

            inputs = make_inputs()
            torch.cuda.synchronize()
            _GPU_GRANTED.clear()
            send({"phase": "built"})          # the GPU is not needed while inductor compiles
            dirs, name = compile_cache.cache_dirs(), _cache_tag()
            hit = compile_cache.restore(cmd.get("cache"), name, dirs)   # an earlier session's compile
            before = compile_cache.snapshot(dirs)
            compiled = torch.compile(model, backend=_gated_inductor)
            out = compiled(*inputs)
            torch.cuda.synchronize()
            kept = {"hit": hit}
            if not hit:                       # the files this compile wrote, for the next session
                kept.update(compile_cache.pack(dirs, compile_cache.added(dirs, before), name) or {})
        except Exception as exc:   # noqa: BLE001 - said in the verdict of every candidate
            self.drop()
            return {"ok": True, "compile": None, "error": f"{type(exc).__name__}: {exc}"[:300],
                    "seconds": {"compile": time.monotonic() - t0}}
        finally:
            torch.set_grad_enabled(True)
        outs, _ = C.flatten_outputs(out)
        floats = [o.dtype for o in outs if o.is_floating_point()] or [torch.float32]
        rel_norm = 2 * max(tolerance_for(d, cmd.get("tolerance")).rel_norm for d in floats)
        self.held = {"compiled": compiled, "model": model, "make_inputs": make_inputs, "rel_norm_tol": rel_norm}
        return {"ok": True, "compiled": True, "seconds": {"compile": time.monotonic() - t0, "warm_wait": warm_wait_s},
                "cache": kept}

    def time(self, cmd: dict[str, Any]) -> dict[str, Any]:
        from kernelrag.verify.timing import time_against_baselines

        held, seconds = self.held, {}
        if held is None:
            return {"ok": True, "compile": None, "error": "no compiled baseline to time (compile it first)"}
        C.pin_fp32_semantics()
        try:
            torch.set_grad_enabled(False)
            timing = time_against_baselines(held["compiled"], held["model"], None, held["make_inputs"],
                                            iters=int(cmd.get("iters", 100)), rel_norm_tol=held["rel_norm_tol"])
            seconds.update(timing.get("phases") or {})
            return {"ok": True, "compile": timing["kernel"], "eager": timing["eager"], "seconds": seconds,
                    "warnings": timing.get("warnings", [])}
        except Exception as exc:   # noqa: BLE001 - the baseline failed: the candidates are timed without it
            return {"ok": True, "compile": None, "error": f"{type(exc).__name__}: {exc}"[:300], "seconds": seconds}
        finally:
            torch.set_grad_enabled(True)
            self.drop()

    def drop(self) -> None:
        if self.held is not None:
            self.held = None
            torch._dynamo.reset()            # drop the compiled graph (and the model it holds)
            torch.cuda.empty_cache()


__all__ = ["Baseline", "wait_warm", "warm_in_background"]
