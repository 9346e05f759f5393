"""The task's forward traced into the lowering IR (``ir.Graph``).

The model is built and traced exactly as ``kernelrag.patterns.trace`` does it (meta
device, torch.fx, shapes propagated on meta tensors), in the mode the task leaves it
in (a fresh ``nn.Module`` trains: batch norm uses batch statistics). Each fx node is
mapped to primitives by ``decompose``; parameters and buffers become ``param`` nodes
named by their state-dict path. Numbers read at run time (a float attribute such as
``self.scale``, a float argument of ``forward``) become ``scalar`` nodes (see ``scalars``).
"""
from __future__ import annotations

import contextlib
import operator
from typing import Any

from kernelrag.draft.codegen import CodegenError, _function_name
from kernelrag.draft.lower.decompose import Decomposer
from kernelrag.draft.lower.decompose_conv import fold_conv_crops
from kernelrag.draft.lower.values import IrRef, Unsupported, kind_of_dtype
from kernelrag.draft.lower.ir import FLOAT, INDEX, Graph
from kernelrag.draft.lower.scalars import attributes_as_proxies
from kernelrag.patterns.canon import normalise_name
from kernelrag.patterns.trace import _meta_device


def _shape(node: Any) -> tuple[int, ...]:
    meta = node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "shape"):
        return ()
    return tuple(int(s) for s in meta.shape)


def build_graph(module: Any, partial: bool = False) -> tuple[Graph, Any]:
    """(IR graph, the meta model) for a loaded task module; raises Unsupported saying what failed.

    ``partial``: an op no decomposition places stays a PyTorch call in ``forward`` (a ``torch``
    node, listed in ``graph.unplaced``) instead of failing the whole task: a starting point for
    the LLM drafter, never a candidate of the offline drafter."""
    with _meta_device():           # as patterns.trace builds it, but in the mode the task leaves it in
        model = module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
    try:
        return _build(model, inputs, True, partial)
    except _ProxiesUsed:           # a number the trace or a decomposition needs as a literal
        return _build(model, inputs, False, partial)


class _ProxiesUsed(Exception):
    """The trace with float attributes as proxies failed; the plain trace is tried next."""


def _trace(model: Any, numbers: bool) -> tuple[Any, bool]:
    """(graph module, whether float attributes were traced as proxies)."""
    import torch
    import torch.fx

    tracer = torch.fx.Tracer()
    proxies = attributes_as_proxies(model, tracer) if numbers else contextlib.nullcontext(False)
    used = False
    try:
        with proxies as used:
            graph = tracer.trace(model)
    except Exception as exc:     # data-dependent control flow and friends
        if used:
            raise _ProxiesUsed() from exc
        raise Unsupported(f"torch.fx cannot trace the model ({type(exc).__name__}: {exc})") from None
    return torch.fx.GraphModule(tracer.root, graph, type(model).__name__), used


def _build(model: Any, inputs: list, numbers: bool, partial: bool) -> tuple[Graph, Any]:
    gm, used = _trace(model, numbers)
    try:
        return _convert(gm, model, inputs, partial), model
    except Exception as exc:
        if used:
            raise _ProxiesUsed() from exc
        raise


def _number_kind(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return FLOAT if isinstance(value, float) else INDEX


def _convert(gm: Any, model: Any, inputs: list, partial: bool) -> Graph:
    import torch
    import torch.fx
    from torch.fx.passes.shape_prop import ShapeProp

    with _meta_device(), torch.no_grad():     # as the verifier runs it (no autograd checks on parameters)
        ShapeProp(gm).propagate(*inputs)
    graph = Graph()
    dec = Decomposer(graph, gm, model)
    env: dict[Any, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            meta = node.meta.get("tensor_meta")
            index = len(graph.input_names)
            number = _number_kind(inputs[index]) if index < len(inputs) else None
            if meta is None and number is None:
                raise Unsupported(f"forward argument {node.target} is neither a tensor nor a number")
            if meta is None:           # a Python number: read in forward, handed to the kernels by value
                env[node] = IrRef(graph.add("scalar", kind=number, origin="scalar", code=str(node.target)))
            else:
                env[node] = IrRef(graph.add("input", shape=_shape(node), kind=kind_of_dtype(meta.dtype),
                                            name=str(node.target), index=index))
            graph.input_names.append(str(node.target))
        elif node.op == "get_attr":
            value = _attribute(gm, str(node.target))
            number = _number_kind(value)
            env[node] = (IrRef(graph.add("scalar", kind=number, origin="scalar", code=f"self.{node.target}"))
                         if number else dec.param(str(node.target)))
        elif node.op == "output":
            result = node.args[0]
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            for r in results:
                value = env.get(r) if isinstance(r, torch.fx.Node) else None
                if not isinstance(value, IrRef):
                    raise Unsupported("the model returns something other than tensors")
                graph.outputs.append(value.id)
                graph.out_dtypes.append(str(r.meta["tensor_meta"].dtype))
        else:
            args = torch.fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = dict(torch.fx.node.map_arg(node.kwargs, lambda n: env[n]))
            kwargs.pop("inplace", None)
            kwargs.pop("out", None)
            try:
                env[node] = _decompose(dec, gm, node, args, kwargs)
            except (Unsupported, CodegenError) as exc:
                if not partial:
                    raise Unsupported(str(exc)) from None
                env[node] = _left_in_torch(graph, node, args, kwargs, str(exc))
    if not graph.outputs:
        raise Unsupported("the model returns nothing")
    dec.check_no_pending(graph.outputs)
    fold_conv_crops(graph)       # conv(x)[..., :-k]: the conv computes only the kept outputs
    return graph


def _decompose(dec: Decomposer, gm: Any, node: Any, args: Any, kwargs: dict) -> Any:
    if node.op == "call_module":
        return dec.module(gm.get_submodule(node.target), node.target, args, kwargs, _shape(node))
    if node.op == "call_function" and node.target is operator.getitem:
        return dec.getitem(args[0], args[1])
    name = _function_name(node.target) if node.op == "call_function" else str(node.target)
    name = normalise_name(name) if name not in ("rsub", "max", "min") else name
    return dec.function(name, list(args), kwargs, _shape(node))


def _left_in_torch(graph: Graph, node: Any, args: Any, kwargs: dict, why: str) -> Any:
    """The fx node as a PyTorch call in ``forward`` (partial lowering): one ``torch`` node per tensor result."""
    from torch.fx.node import _get_qualified_name

    refs: list[int] = []

    def text(v: Any) -> str:
        if isinstance(v, IrRef):
            refs.append(v.id)
            return "{%d}" % (len(refs) - 1)
        if isinstance(v, (list, tuple)):
            inner = ", ".join(text(x) for x in v)
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
        return repr(v)

    parts = [text(a) for a in args] + [f"{k}={text(v)}" for k, v in kwargs.items()]
    if node.op == "call_method":
        code = f"{parts[0]}.{node.target}({', '.join(parts[1:])})"
    elif node.op == "call_module":
        code = f"self.{node.target}({', '.join(parts)})"
    else:
        code = f"{_get_qualified_name(node.target).replace('_operator.', 'operator.')}({', '.join(parts)})"
    name = str(node.target).split(".")[-1] if node.op != "call_function" else _function_name(node.target)
    graph.unplaced.append(f"{name} ({why})")
    meta = node.meta.get("tensor_meta")
    metas = list(meta) if isinstance(meta, (list, tuple)) else [meta]
    if any(m is None or not hasattr(m, "shape") for m in metas):
        raise Unsupported(f"{name} returns something other than tensors; it cannot stay in PyTorch here")
    if not isinstance(meta, (list, tuple)):
        return IrRef(graph.add("torch", list(refs), tuple(int(x) for x in meta.shape), kind_of_dtype(meta.dtype),
                               name, code=code))
    whole = graph.add("torch", list(refs), (), FLOAT, name, code=code)        # called once; its parts are views
    return tuple(IrRef(graph.add("view", [whole], tuple(int(x) for x in m.shape), kind_of_dtype(m.dtype), name,
                                 code="{0}[%d]" % k)) for k, m in enumerate(metas))


def _attribute(gm: Any, path: str) -> Any:
    value = gm
    for part in path.split("."):
        value = getattr(value, part, None)
    return value
