"""Numbers a kernel takes at run time: the model's float attributes and forward's number arguments.

``Model(scale)`` keeps ``self.scale = scale`` and forward multiplies by it; torch.fx
reads a plain float attribute at trace time and writes it into the graph as a
literal, so a kernel built from that graph would keep the traced value for every
``ModelNew(scale=...)``. While the lowering traces, each plain float attribute of
the model's own (non-leaf) modules answers with a ``get_attr`` proxy instead: the
graph then names ``self.scale``, the IR holds it as a ``scalar`` node, ``forward``
reads it at run time and the kernel takes it as an argument passed by value.
torch.nn's own modules (``LayerNorm.eps``...) are called, not traced, and keep
their attributes. When a trace cannot go through with proxies (``math.sqrt(self.d)``,
``if self.scale > 0``, an op that needs a literal), ``build`` traces again with the
numbers as constants, as before.

Arithmetic on numbers alone (``self.scale * 2``) is folded into the scalar's Python
expression in ``forward`` (``python_expr``), never into a kernel of one element.
"""
from __future__ import annotations

import contextlib
from typing import Any

_PYTHON = {"add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
           "rsub": "({1} - {0})", "neg": "(-{0})", "abs": "abs({0})", "reciprocal": "(1.0 / {0})",
           "sqrt": "({0} ** 0.5)", "rsqrt": "({0} ** -0.5)", "maximum": "max({0}, {1})",
           "minimum": "min({0}, {1})", "square": "({0} * {0})"}


def float_attributes(model: Any, tracer: Any) -> list[tuple[Any, str, str]]:
    """(module, attribute, path from the model) of every plain float the traced code may read.

    Ints stay literals of the trace on purpose: they are mostly sizes (``F.group_norm(x, self.G)``,
    ``x.view(b, self.heads, -1)``), and the lowering plans every region on the traced shapes, which
    a proxy in a shape would leave unknown. No kernel takes such an int as a constant: the views
    that use it run in ``forward`` and the kernels read every size from their tensors at run time.
    Where a shape int must follow the model at run time, its decomposition names it in the view's
    code (``GroupNorm`` reads ``self.gn.num_groups``)."""
    found = []
    for path, mod in model.named_modules():
        if path and tracer.is_leaf_module(mod, path):
            continue
        for name, value in vars(mod).items():
            if type(value) is float and not name.startswith("_"):
                found.append((mod, name, f"{path}.{name}" if path else name))
    return found


@contextlib.contextmanager
def attributes_as_proxies(model: Any, tracer: Any):
    """Within the block, each float attribute of ``float_attributes`` reads as a get_attr proxy.

    A module's class is swapped for a subclass with one property per attribute (a
    property wins over the instance dict); the classes are restored on exit, before
    the GraphModule copies the attributes' values."""
    by_module: dict[int, tuple[Any, dict[str, str]]] = {}
    for mod, name, path in float_attributes(model, tracer):
        by_module.setdefault(id(mod), (mod, {}))[1][name] = path
    swapped = []
    try:
        for mod, names in by_module.values():
            cls = type(mod)
            props = {name: property(lambda self, p=path: tracer.create_proxy("get_attr", p, (), {}))
                     for name, path in names.items()}
            try:
                mod.__class__ = type(cls.__name__, (cls,), props)
            except TypeError:      # a class that cannot be swapped keeps its numbers as constants
                continue
            swapped.append((mod, cls))
        yield bool(swapped)
    finally:
        for mod, cls in swapped:
            mod.__class__ = cls


def python_expr(op: str, operands: list[str], kwargs: dict[str, Any]) -> str | None:
    """Python text of ``op`` on numbers (operands are ``{k}`` placeholders or literals), or None."""
    if op == "pow" and "exponent" in kwargs:
        return f"({operands[0]} ** {float(kwargs['exponent'])!r})"
    if op not in _PYTHON or kwargs:
        return None
    return _PYTHON[op].format(*operands)
