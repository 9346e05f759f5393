"""Elementwise ops as ``tl`` expressions: the one emitter every template's fusion points use.

``node_expr(graph, node, names)`` gives the Triton expression of one elementwise
node, its inputs named by ``names`` (node id -> code: a register variable or a
literal). All arithmetic is fp32 in registers; the store casts to the output dtype.
The activations come from ``codegen.OPS`` (one table for both generators); this
module adds comparisons, selection, min/max and the few math functions reductions
and losses decompose into.
"""
from __future__ import annotations

import math

from kernelrag.draft.codegen import OPS as _CHAIN_OPS, CodegenError, _lit
from kernelrag.draft.lower.ir import BOOL, Graph, Node


def literal(value) -> str:
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    if isinstance(value, float) and math.isnan(value):
        return "float('nan')"
    return _lit(value)


def _cmp(op: str):
    return lambda a, kw: f"({a[0]} {op} {a[1]})"


EXTRA_OPS = {
    "gt": _cmp(">"), "lt": _cmp("<"), "ge": _cmp(">="), "le": _cmp("<="), "eq": _cmp("=="), "ne": _cmp("!="),
    "where": lambda a, kw: f"tl.where({a[0]}, {a[1]}, {a[2]})",
    "maximum": lambda a, kw: f"tl.maximum({a[0]}, {a[1]})",
    "minimum": lambda a, kw: f"tl.minimum({a[0]}, {a[1]})",
    "reciprocal": lambda a, kw: f"(1.0 / {a[0]})",
    "log1p": lambda a, kw: f"tl.log(1.0 + {a[0]})",
    "expm1": lambda a, kw: f"(tl.exp({a[0]}) - 1.0)",
    "log2": lambda a, kw: f"tl.log2({a[0]})",
    "sin": lambda a, kw: f"tl.sin({a[0]})",
    "cos": lambda a, kw: f"tl.cos({a[0]})",
    "floor": lambda a, kw: f"tl.floor({a[0]})",
    "ceil": lambda a, kw: f"tl.ceil({a[0]})",
    "sign": lambda a, kw: f"tl.where({a[0]} > 0.0, 1.0, tl.where({a[0]} < 0.0, -1.0, 0.0))",
    # x * log(y), 0 where x == 0 (kl_div's target * log(target))
    "xlogy": lambda a, kw: f"tl.where({a[0]} == 0.0, 0.0, {a[0]} * tl.log({a[1]}))",
    "logical_not": lambda a, kw: f"({a[0]} == 0)",
    "to_float": lambda a, kw: f"{a[0]}.to(tl.float32)",
}
OPS = {**_CHAIN_OPS, **EXTRA_OPS}
ELEMENTWISE = frozenset(OPS)
_COMPARISONS = {"gt", "lt", "ge", "le", "eq", "ne", "logical_not"}


def kind_of(op: str) -> str | None:
    """The value kind an elementwise op yields when it is not the float default."""
    return BOOL if op in _COMPARISONS else None


def is_elementwise(node: Node) -> bool:
    return node.op in ELEMENTWISE


def node_expr(graph: Graph, node: Node, names: dict[int, str]) -> str:
    """The tl expression computing ``node`` from its inputs' code names."""
    if node.op not in OPS:
        raise CodegenError(f"op {node.op!r} is not an elementwise op; known: {', '.join(sorted(OPS))}")
    args = [names[i] for i in node.inputs]
    kwargs = {k: (literal(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and
                  k not in ("approximate", "rounding_mode") else v) for k, v in node.args.items()}
    return OPS[node.op](args, kwargs)
