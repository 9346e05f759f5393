"""Tracing a KernelBench task into canonical ops (the torch half of patterns.py).

The task is built on the meta device, traced with torch.fx (torch.export when fx
fails), shapes are propagated on meta tensors, and every graph node is mapped to
zero or more canonical ops (``kernelrag.patterns.canon``). Known compositions
(RMSNorm written out by hand, a manual softmax...) are then folded into one op.
"""
from __future__ import annotations

import contextlib
import io
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelrag.patterns.canon import Op, canonical_ops, compose
from kernelrag.patterns.pattern import OpPattern, category_of, size_class, unknown
from kernelrag.task import Task


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text[:240]


@contextlib.contextmanager
def _meta_device():
    """Build everything on the meta device; ``.cuda()`` in a task becomes a no-op."""
    import torch

    saved = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **k: self          # meta tensors stay meta
    try:
        with torch.device("meta"):
            yield
    finally:
        torch.Tensor.cuda = saved


def _build(module: types.ModuleType) -> tuple[Any, list | None, str]:
    """(model, inputs or None, note) built on the meta device."""
    with _meta_device():
        init = module.get_init_inputs() if hasattr(module, "get_init_inputs") else []
        model = module.Model(*init)
        model.eval()
        try:
            inputs = list(module.get_inputs())
            note = ""
        except Exception as exc:  # the pattern can still be traced without shapes
            inputs, note = None, f"get_inputs() failed on the meta device ({_short(exc)})"
    return model, inputs, note


def _trace(model: Any, inputs: list | None, errors: list[str]) -> tuple[Any, set[str], str]:
    """(graph module, names of placeholders that are parameters, tracer); ``errors`` collects
    why a tracer failed."""
    import torch

    try:
        gm = torch.fx.symbolic_trace(model)
        if inputs is not None:
            from torch.fx.passes.shape_prop import ShapeProp

            try:
                with _meta_device():
                    ShapeProp(gm).propagate(*inputs)
            except Exception:
                pass                                  # shapes unknown: dims kept as written
        return gm, set(), "fx"
    except Exception as exc:
        errors.append(f"torch.fx: {_short(exc)}")
    if inputs is None:
        errors.append("torch.export needs get_inputs(), which failed")
        raise RuntimeError("; ".join(errors))
    try:
        # export prints the whole partial graph to stderr when it fails; keep it quiet
        with _meta_device(), contextlib.redirect_stderr(io.StringIO()):
            ep = torch.export.export(model, tuple(inputs))
        user = set(ep.graph_signature.user_inputs)
        params = {n.name for n in ep.graph_module.graph.nodes
                  if n.op == "placeholder" and n.name not in user}
        return ep.graph_module, params, "export"
    except Exception as exc:
        errors.append(f"torch.export: {_short(exc)}")
    raise RuntimeError("; ".join(errors))


def _shape(value: Any) -> list[int] | None:
    shape = getattr(value, "shape", None)
    return [int(s) for s in shape] if shape is not None else None


def _regime(inputs: list | None, output_shape: list[int] | None) -> dict[str, Any]:
    if inputs is None:
        return {}
    tensors = [x for x in inputs if hasattr(x, "shape") and hasattr(x, "dtype")]
    shapes = [_shape(x) for x in tensors]
    dtypes = [str(x.dtype).replace("torch.", "") for x in tensors]
    numels = [int(x.numel()) for x in tensors]
    if output_shape is not None:
        n = 1
        for s in output_shape:
            n *= s
        numels.append(n)
    return {"input_shapes": shapes, "dtypes": dtypes, "output_shape": output_shape,
            "size_class": size_class(max(numels, default=0))}


def _node_shape(node: Any) -> list[int] | None:
    meta = getattr(node, "meta", {}) or {}
    tm = meta.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        return [int(s) for s in tm.shape]
    val = meta.get("val")
    if val is not None and hasattr(val, "shape"):
        try:
            return [int(s) for s in val.shape]
        except TypeError:
            return None
    if isinstance(tm, (tuple, list)) and tm and hasattr(tm[0], "shape"):
        return [int(s) for s in tm[0].shape]
    return None


def graph_ops(gm: Any, param_placeholders: set[str]) -> tuple[list[Op], set[int], list[int] | None]:
    """Canonical ops of a traced graph: (ops, ids of graph outputs, output shape)."""
    import torch.fx

    env: dict[Any, Any] = {}
    ops: list[Op] = []
    outputs: set[int] = set()
    out_shape = None

    def refs(node: Any) -> list[Any]:
        found: list[Any] = []
        torch.fx.node.map_arg((node.args, node.kwargs), lambda n: found.append(env.get(n, "const")))
        return found

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = "param" if node.name in param_placeholders else "input"
            continue
        if node.op == "get_attr":
            env[node] = "param"
            continue
        if node.op == "output":
            for r in refs(node):
                if isinstance(r, int):
                    outputs.add(r)
            first = node.args[0]
            first = first[0] if isinstance(first, (tuple, list)) and first else first
            out_shape = _node_shape(first) if isinstance(first, torch.fx.Node) else None
            continue
        inputs = refs(node)
        dynamic = [r for r in inputs if isinstance(r, int) or r == "input"]
        produced = canonical_ops(node, gm, _node_shape)
        if produced == "const" or not dynamic:
            env[node] = "const" if produced == "const" else "param"
            continue
        if not produced:                                  # layout op: alias its input
            env[node] = dynamic[0]
            continue
        prev = None
        for i, (name, attrs) in enumerate(produced):
            op_inputs = inputs if i == 0 else [prev, "param"]
            op = Op(id=len(ops), name=name, attrs=attrs, inputs=list(op_inputs))
            ops.append(op)
            prev = op.id
        env[node] = prev
    return ops, outputs, out_shape


@dataclass
class Traced:
    """A task built and traced on the meta device, once per task value (the pattern and the
    elementwise codegen both read it)."""

    model: Any = None
    inputs: list | None = None
    note: str = ""                         # why get_inputs() could not be used
    gm: Any = None                         # the traced graph module, None when tracing failed
    params: set[str] = field(default_factory=set)
    tracer: str = ""                       # "fx" | "export" | ""
    errors: list[str] = field(default_factory=list)   # why each tracer failed
    build_error: str = ""                  # why Model(*get_init_inputs()) could not be built


def traced(task: "Task | str | Path") -> Traced:
    """The task's model, inputs and traced graph (built and traced once per task value)."""
    task = Task.of(task)
    return task.memo("traced", lambda: _traced(task.module()))


def _traced(module: types.ModuleType) -> Traced:
    try:
        model, inputs, note = _build(module)
    except Exception as exc:
        return Traced(build_error=_short(exc))
    out = Traced(model=model, inputs=inputs, note=note)
    try:
        out.gm, out.params, out.tracer = _trace(model, inputs, out.errors)
    except Exception:
        pass                                 # out.errors says why
    return out


def trace_task(task: "Task | str | Path") -> OpPattern:
    t = traced(task)
    if t.build_error:
        return unknown(f"could not build Model(*get_init_inputs()) on the meta device: {t.build_error}")
    if t.gm is None:
        return unknown(f"untraceable: {'; '.join(t.errors)}", _regime(t.inputs, None))
    inputs = t.inputs
    try:
        ops, outputs, out_shape = graph_ops(t.gm, t.params)
    except Exception as exc:
        return unknown(f"could not canonicalise the traced graph: {_short(exc)}", _regime(inputs, None))
    ops = compose(ops, outputs)
    names = [op.token() for op in ops] or ["identity"]
    regime = _regime(inputs, out_shape)
    if t.note:
        regime["note"] = t.note
    return OpPattern(signature=">".join(names), ops=names, category=category_of(names),
                     regime=regime, known=True, traced_with=t.tracer)


def op_pattern(task: "Task | str | Path") -> OpPattern:
    """The op pattern of a KernelBench task (a Task, a file path or its source text).

    Builds ``Model(*get_init_inputs())`` and ``get_inputs()`` on the meta device
    (no memory, no compute), traces with torch.fx (torch.export as a fallback) and
    propagates shapes. A task that cannot be traced gives ``known=False`` and the
    reason; a file that is not a task at all raises TaskError. Computed once per
    task value.
    """
    task = Task.of(task)
    return task.memo("pattern", lambda: trace_task(task))
