"""The task's forward traced into the lowering IR (``ir.Graph``).

The model is built and traced exactly as ``kernelrag.patterns.trace`` does it (meta
device, torch.fx, shapes propagated on meta tensors), in the mode the task leaves it
in (a fresh ``nn.Module`` trains: batch norm uses batch statistics). Each fx node is
mapped to primitives by ``decompose``; parameters and buffers become ``param`` nodes
named by their state-dict path.
"""
from __future__ import annotations

import operator
from typing import Any

from kernelrag.draft.codegen import CodegenError, _function_name
from kernelrag.draft.lower.decompose import Decomposer
from kernelrag.draft.lower.decompose_conv import fold_conv_crops
from kernelrag.draft.lower.values import IrRef, Unsupported, kind_of_dtype
from kernelrag.draft.lower.ir import Graph
from kernelrag.patterns.canon import normalise_name
from kernelrag.patterns.trace import _meta_device


def _shape(node: Any) -> tuple[int, ...]:
    meta = node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "shape"):
        return ()
    return tuple(int(s) for s in meta.shape)


def build_graph(module: Any) -> tuple[Graph, Any]:
    """(IR graph, the meta model) for a loaded task module; raises Unsupported saying what failed."""
    import torch
    import torch.fx
    from torch.fx.passes.shape_prop import ShapeProp

    with _meta_device():           # as patterns.trace builds it, but in the mode the task leaves it in
        model = module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as exc:     # data-dependent control flow and friends
        raise Unsupported(f"torch.fx cannot trace the model ({type(exc).__name__}: {exc})") from None
    with _meta_device():
        ShapeProp(gm).propagate(*inputs)
    graph = Graph()
    dec = Decomposer(graph, gm, model)
    env: dict[Any, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            meta = node.meta.get("tensor_meta")
            if meta is None:
                raise Unsupported(f"forward argument {node.target} is not a tensor")
            env[node] = IrRef(graph.add("input", shape=_shape(node), kind=kind_of_dtype(meta.dtype),
                                        name=str(node.target), index=len(graph.input_names)))
            graph.input_names.append(str(node.target))
        elif node.op == "get_attr":
            env[node] = dec.param(str(node.target))
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
            if node.op == "call_module":
                env[node] = dec.module(gm.get_submodule(node.target), node.target, args, kwargs, _shape(node))
                continue
            if node.op == "call_function" and node.target is operator.getitem:
                env[node] = dec.getitem(args[0], args[1])
                continue
            name = _function_name(node.target) if node.op == "call_function" else str(node.target)
            name = normalise_name(name) if name not in ("rsub", "max", "min") else name
            try:
                env[node] = dec.function(name, list(args), kwargs, _shape(node))
            except CodegenError as exc:
                raise Unsupported(str(exc)) from None
    if not graph.outputs:
        raise Unsupported("the model returns nothing")
    dec.check_no_pending(graph.outputs)
    fold_conv_crops(graph)       # conv(x)[..., :-k]: the conv computes only the kept outputs
    return graph, model
