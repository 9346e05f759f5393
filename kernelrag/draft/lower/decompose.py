"""High-level ops decomposed into the IR's primitives (elementwise, reduce, scan, view).

softmax is max, exp, sum, div; layer norm is mean, sub, mean of squares, rsqrt, the
affine; a loss is its elementwise body and a mean or sum. Every reduction is kept
with its dims (keepdim shape) and, where the op drops them, followed by a
``squeeze_row`` (free inside a kernel). Sizes are never baked in: ``mean`` divides
by the reduced element count at run time, ``batchmean`` by the batch size.
"""
from __future__ import annotations

from typing import Any

from kernelrag.draft.lower import decompose_conv, decompose_gemm, decompose_modules, decompose_norms, decompose_ops
from kernelrag.draft.lower.exprs import ELEMENTWISE, kind_of, literal
from kernelrag.draft.lower.ir import FLOAT, INDEX, Graph, broadcast
from kernelrag.draft.lower.scalars import python_expr
from kernelrag.draft.lower.values import IrRef, Unsupported, _Flip, _arg, _dims, kind_of_dtype  # noqa: F401


_REDUCE = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "prod": "prod",
           "argmax": "argmax", "argmin": "argmin", "nansum": None}
_LAYOUT_METHODS = {"view", "reshape", "permute", "transpose", "unsqueeze", "squeeze", "flatten", "expand",
                   "t", "movedim", "swapaxes", "expand_as", "view_as", "reshape_as"}
_IDENTITY = {"contiguous", "clone", "detach", "float", "to", "type_as", "dropout", "identity", "alpha_dropout",
             "feature_dropout"}


class Decomposer:
    def __init__(self, graph: Graph, gm: Any, model: Any):
        self.g, self.gm, self.model = graph, gm, model
        self.params: dict[str, int] = {}
        self.flips: list[_Flip] = []

    # ------------------------------------------------------------------ helpers
    def shape(self, v: int) -> tuple[int, ...]:
        return self.g[v].shape

    def c(self, v: Any) -> int:
        if isinstance(v, _Flip):
            raise Unsupported("flip is lowered only around a scan along the same dim (a reverse cumsum)")
        if isinstance(v, IrRef):
            return v.id
        if isinstance(v, (bool, int, float)):
            return self.g.add("const", value=float(v))
        raise Unsupported(f"argument {v!r} ({type(v).__name__}) is neither a tensor nor a number")

    def ew(self, op: str, *ins: Any, origin: str = "", **kw: Any) -> "IrRef":
        ids = [self.c(i) for i in ins]
        if any(isinstance(v, IrRef) for v in kw.values()):
            raise Unsupported(f"{op} takes {', '.join(k for k, v in kw.items() if isinstance(v, IrRef))} "
                              "as a literal here, not a traced value")
        if ids and all(self.g[i].op in ("scalar", "const") for i in ids) and \
                any(self.g[i].op == "scalar" for i in ids):
            return self.number(op, ids, kw)
        try:
            shape = broadcast(*[self.shape(i) for i in ids])
        except ValueError as exc:
            raise Unsupported(f"{op}: {exc}") from None
        return IrRef(self.g.add(op, ids, shape, kind_of(op) or FLOAT, origin or op, **kw))

    def number(self, op: str, ids: list[int], kw: dict) -> "IrRef":
        """Arithmetic on numbers only: one more ``scalar`` node, its Python text computed in forward."""
        scalars = [i for i in ids if self.g[i].op == "scalar"]
        operands = ["{%d}" % scalars.index(i) if i in scalars else literal(float(self.g[i].args["value"])) for i in ids]
        code = python_expr(op, operands, kw)
        if code is None:
            raise Unsupported(f"{op} of the model's numbers is not lowered (only + - * / neg abs sqrt rsqrt "
                              "pow min max on numbers)")
        whole = all(self.g[i].kind == INDEX for i in scalars) and op in ("add", "sub", "rsub", "mul", "neg", "abs",
                                                                          "square", "maximum", "minimum") \
            and all(float(self.g[i].args["value"]).is_integer() for i in ids if i not in scalars)
        return IrRef(self.g.add("scalar", scalars, (), INDEX if whole else FLOAT, "scalar", code=code))

    def red(self, fn: str, x: "IrRef", dims: tuple[int, ...], keepdim: bool = True, origin: str = "",
            denom: tuple[int, ...] | None = None) -> "IrRef":
        shape = tuple(1 if d in dims else s for d, s in enumerate(self.shape(x.id)))
        kind = INDEX if fn in ("argmax", "argmin") else FLOAT
        args: dict[str, Any] = {"fn": fn, "dims": dims}
        if denom is not None:
            args["denom"] = denom
        r = IrRef(self.g.add("reduce", [x.id], shape, kind, origin or fn, **args))
        return r if keepdim else self.squeeze(r, dims, origin or fn)

    def squeeze(self, r: "IrRef", dims: tuple[int, ...], origin: str) -> "IrRef":
        shape = tuple(s for d, s in enumerate(self.shape(r.id)) if d not in dims)
        return IrRef(self.g.add("squeeze_row", [r.id], shape, self.g[r.id].kind, origin, dims=dims))

    def view(self, x: "IrRef", code: str, shape: tuple[int, ...], origin: str = "view", *more: "IrRef") -> "IrRef":
        return IrRef(self.g.add("view", [x.id, *[m.id for m in more]], shape, self.g[x.id].kind, origin, code=code))

    def param(self, path: str) -> "IrRef":
        if path not in self.params:
            tensor = dict(self.model.named_parameters()).get(path)
            if tensor is None:
                tensor = dict(self.model.named_buffers()).get(path)
            if tensor is None:
                raise Unsupported(f"the model reads attribute {path!r}, which is neither a parameter nor a buffer")
            self.params[path] = self.g.add("param", [], tuple(tensor.shape), kind_of_dtype(tensor.dtype), "param",
                                           path=path)
        return IrRef(self.params[path])

    def check_no_pending(self, outputs: list[int]) -> None:
        del outputs

    # ------------------------------------------------------------------ entry points
    def getitem(self, value: Any, index: Any) -> Any:
        if isinstance(value, tuple) and isinstance(index, int):
            return value[index]
        if isinstance(value, IrRef):
            sliced = decompose_gemm.basic_slice(self, value, index)    # x[..., :-3]: a view
            if sliced is not None:
                return sliced
        raise Unsupported(f"indexing {index!r} is not lowered (only the (values, indices) pair of max/min)")

    def module(self, mod: Any, path: str, args: tuple, kwargs: dict, shape: tuple[int, ...]) -> Any:
        from kernelrag.draft.codegen import CodegenError, _module_op
        handler = (getattr(decompose_modules, type(mod).__name__, None)
                   or getattr(decompose_gemm, type(mod).__name__, None)
                   or getattr(decompose_conv, type(mod).__name__, None))
        if handler is not None:
            return handler(self, mod, path, list(args), dict(kwargs))
        try:
            name, kw = _module_op(mod)
        except CodegenError:
            raise Unsupported(f"module {type(mod).__name__} ({path}) has no template that places it") from None
        return self.function(name, list(args), kw, shape)

    def function(self, name: str, args: list, kwargs: dict, shape: tuple[int, ...]) -> Any:
        if name not in ("flip", "cumsum", "cumprod") and any(isinstance(a, _Flip) for a in args):
            raise Unsupported(f"flip is lowered only around a scan along the same dim (a reverse cumsum), "
                              f"not into {name}")
        if name in _IDENTITY:
            return args[0]
        if name in ("flip",):
            dims = _dims(_arg(args, kwargs, 1, "dims"), len(self.shape(args[0].id)) if isinstance(args[0], IrRef)
                         else len(self.shape(args[0].value)))
            if len(dims) != 1:
                raise Unsupported("flip over several dims is not lowered")
            if isinstance(args[0], _Flip) and args[0].scanned and args[0].dim == dims[0]:
                return IrRef(args[0].value)
            if isinstance(args[0], IrRef):
                return _Flip(args[0].id, dims[0])
            raise Unsupported("flip is lowered only around a scan along the same dim (a reverse cumsum)")
        if name in _LAYOUT_METHODS:
            return decompose_ops.layout(self, name, args, kwargs, shape)
        if name in _REDUCE and _REDUCE[name]:
            return decompose_ops.reduction(self, _REDUCE[name], args, kwargs)
        handler = (getattr(decompose_ops, f"op_{name}", None) or getattr(decompose_norms, f"op_{name}", None)
                   or getattr(decompose_gemm, f"op_{name}", None) or getattr(decompose_conv, f"op_{name}", None))
        if handler is not None:
            return handler(self, args, kwargs)
        if name in ELEMENTWISE:
            return decompose_ops.elementwise(self, name, args, kwargs)
        raise Unsupported(f"op {name!r} has no template that places it")
