"""Decompositions of torch functions and tensor methods (``Decomposer.function``'s table).

``op_<name>(dec, args, kwargs)`` lowers one op; the name is the canonical one of
``kernelrag.patterns.canon`` (``torch.nn.functional.softmax`` and ``x.softmax`` are both
``softmax``).
"""
from __future__ import annotations

from typing import Any

from kernelrag.draft.lower.ir import BOOL, FLOAT, INDEX
from kernelrag.draft.lower.values import IrRef, Unsupported, _arg, _dims, _Flip

_ALL = None


def _rank(dec, x: IrRef) -> int:
    return len(dec.shape(x.id))


def _tensor(x: Any, what: str) -> IrRef:
    if not isinstance(x, IrRef):
        raise Unsupported(f"{what} expects a tensor, got {x!r}")
    return x


def elementwise(dec, name: str, args: list, kwargs: dict) -> IrRef:
    if name in ("add", "sub") and kwargs.get("alpha") not in (None, 1):
        args = [args[0], dec.ew("mul", args[1], kwargs.pop("alpha"))]
    tensors = [a for a in args if isinstance(a, (IrRef, bool, int, float))]
    if len(tensors) != len([a for a in args if a is not None and not isinstance(a, str)]):
        raise Unsupported(f"{name}: an argument of {args!r} is neither a tensor nor a number")
    scalars = {k: v for k, v in kwargs.items() if not isinstance(v, IrRef)}
    traced = [k for k, v in kwargs.items() if isinstance(v, IrRef)]
    if traced and name not in ("clamp", "clamp_min", "clamp_max", "clip"):
        raise Unsupported(f"{name} with {', '.join(traced)} given as a traced value is not lowered")
    if name in ("clamp", "clamp_min", "clamp_max", "clip"):
        lo = kwargs.get("min", args[1] if len(args) > 1 and name != "clamp_max" else None)
        hi = kwargs.get("max", args[2] if len(args) > 2 else (args[1] if name == "clamp_max" and len(args) > 1
                                                               else None))
        out = args[0]
        if lo is not None:
            out = dec.ew("maximum", out, lo, origin="clamp")
        if hi is not None:
            out = dec.ew("minimum", out, hi, origin="clamp")
        return out
    if name in ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "erf", "silu"):
        tensors = tensors[:1]
    if name == "pow" and not isinstance(args[1], IrRef):
        return dec.ew("pow", args[0], origin="pow", exponent=float(args[1]))
    if name == "pow" and dec.g[args[1].id].op == "scalar":
        raise Unsupported("pow with an exponent read at run time is not lowered (the kernel unrolls the power)")
    if name == "gelu":
        return dec.ew("gelu", tensors[0], approximate=kwargs.get("approximate", "none"))
    if name in ("leaky_relu", "elu", "softplus", "hardtanh"):
        return dec.ew(name, tensors[0], **_scalar_kwargs(name, args[1:], scalars))
    return dec.ew(name, *tensors, **scalars)


def _scalar_kwargs(name: str, extra: list, kwargs: dict) -> dict:
    keys = {"leaky_relu": ["negative_slope"], "elu": ["alpha"], "softplus": ["beta", "threshold"],
            "hardtanh": ["min_val", "max_val"]}[name]
    out = dict(zip(keys, extra))
    out.update({k: v for k, v in kwargs.items() if k in keys})
    return out


def op_rsub(dec, args, kwargs):
    return dec.ew("sub", args[1], args[0], origin="rsub")


def op_where(dec, args, kwargs):
    return dec.ew("where", *args[:3])


def op_masked_fill(dec, args, kwargs):
    """x.masked_fill(mask, value) = where(mask, value, x), the mask broadcast like any operand."""
    mask = args[1] if len(args) > 1 else kwargs["mask"]
    value = args[2] if len(args) > 2 else kwargs["value"]
    return dec.ew("where", mask, value, args[0], origin="masked_fill")


def op_maximum(dec, args, kwargs):
    return dec.ew("maximum", *args[:2])


def op_minimum(dec, args, kwargs):
    return dec.ew("minimum", *args[:2])


def layout(dec, name: str, args: list, kwargs: dict, shape: tuple[int, ...]) -> IrRef:
    x = _tensor(args[0], name)
    if name in ("expand_as", "view_as", "reshape_as"):
        other = _tensor(args[1], name)
        return dec.view(x, f"{{0}}.{name}({{1}})", shape, name, other)
    rest = list(args[1:]) + [f"{k}={v!r}" for k, v in kwargs.items()]
    if any(isinstance(a, IrRef) or (isinstance(a, (list, tuple)) and any(isinstance(b, IrRef) for b in a))
           for a in rest):
        raise Unsupported(f"{name} with traced sizes (x.size(...)) is not lowered; write the sizes as -1")
    if name in ("view", "reshape"):    # sizes from the task's constants would not follow a resized input
        sizes = rest[0] if len(rest) == 1 and isinstance(rest[0], (list, tuple)) else rest
        code = f"{{0}}.reshape({', '.join(map(str, sizes))})"
        return dec.view(x, code, shape, name)
    return dec.view(x, f"{{0}}.{name}({', '.join(map(str, rest))})", shape, name)


def reduction(dec, fn: str, args: list, kwargs: dict, origin: str = "") -> Any:
    x = _tensor(args[0], fn)
    dim = _arg(args, kwargs, 1, "dim", _ALL)
    keepdim = bool(_arg(args, kwargs, 2, "keepdim", False))
    dims = _dims(dim, _rank(dec, x))
    if fn in ("argmax", "argmin") and dim is None:
        if keepdim:
            raise Unsupported(f"{fn} over all dims with keepdim is not lowered")
    return dec.red(fn, x, dims, keepdim, origin or fn)


def _max_min(dec, fn: str, args, kwargs):
    second = _arg(args, kwargs, 1, "dim", None) if "other" not in kwargs else kwargs["other"]
    if isinstance(second, IrRef):
        return dec.ew("maximum" if fn == "max" else "minimum", args[0], second)
    if second is None:
        return dec.red(fn, _tensor(args[0], fn), _dims(None, _rank(dec, args[0])), False, fn)
    values = reduction(dec, fn, args, kwargs)
    indices = reduction(dec, "arg" + fn, args, kwargs, origin=fn)
    return (values, indices)


def op_max(dec, args, kwargs):
    return _max_min(dec, "max", args, kwargs)


def op_min(dec, args, kwargs):
    return _max_min(dec, "min", args, kwargs)


def op_logsumexp(dec, args, kwargs):
    x = _tensor(args[0], "logsumexp")
    dims = _dims(_arg(args, kwargs, 1, "dim"), _rank(dec, x))
    keepdim = bool(_arg(args, kwargs, 2, "keepdim", False))
    m = dec.red("max", x, dims, True, "logsumexp")
    s = dec.red("sum", dec.ew("exp", dec.ew("sub", x, m, origin="logsumexp"), origin="logsumexp"), dims, True,
                "logsumexp")
    out = dec.ew("add", dec.ew("log", s, origin="logsumexp"), m, origin="logsumexp")
    return out if keepdim else dec.squeeze(out, dims, "logsumexp")


def _softmax_parts(dec, x: IrRef, dim: Any, origin: str):
    dims = _dims(dim if dim is not None else -1, _rank(dec, x))
    m = dec.red("max", x, dims, True, origin)
    shifted = dec.ew("sub", x, m, origin=origin)
    s = dec.red("sum", dec.ew("exp", shifted, origin=origin), dims, True, origin)
    return shifted, s


def op_softmax(dec, args, kwargs):
    x = _tensor(args[0], "softmax")
    shifted, s = _softmax_parts(dec, x, _arg(args, kwargs, 1, "dim"), "softmax")
    return dec.ew("div", dec.ew("exp", shifted, origin="softmax"), s, origin="softmax")


def op_log_softmax(dec, args, kwargs):
    x = _tensor(args[0], "log_softmax")
    shifted, s = _softmax_parts(dec, x, _arg(args, kwargs, 1, "dim"), "log_softmax")
    return dec.ew("sub", shifted, dec.ew("log", s, origin="log_softmax"), origin="log_softmax")


def vector_norm(dec, x: IrRef, p: Any, dims: tuple[int, ...], keepdim: bool, origin: str = "norm") -> IrRef:
    if p in (None, "fro", 2, 2.0):
        r = dec.ew("sqrt", dec.red("sum", dec.ew("mul", x, x, origin=origin), dims, True, origin), origin=origin)
    elif p in (1, 1.0):
        r = dec.red("sum", dec.ew("abs", x, origin=origin), dims, True, origin)
    elif p == float("inf"):
        r = dec.red("max", dec.ew("abs", x, origin=origin), dims, True, origin)
    elif isinstance(p, (int, float)) and p > 0:
        powered = dec.ew("pow", dec.ew("abs", x, origin=origin), origin=origin, exponent=float(p))
        r = dec.ew("pow", dec.red("sum", powered, dims, True, origin), origin=origin, exponent=1.0 / float(p))
    else:
        raise Unsupported(f"a norm of order {p!r} is not lowered (1, 2, inf, 'fro' or p > 0)")
    return r if keepdim else dec.squeeze(r, dims, origin)


def op_norm(dec, args, kwargs):
    x = _tensor(args[0], "norm")
    p = _arg(args, kwargs, 1, "p", kwargs.get("ord", "fro"))
    dims = _dims(_arg(args, kwargs, 2, "dim"), _rank(dec, x))
    return vector_norm(dec, x, p, dims, bool(_arg(args, kwargs, 3, "keepdim", False)))


def op_normalize(dec, args, kwargs):
    x = _tensor(args[0], "normalize")
    p = _arg(args, kwargs, 1, "p", 2.0)
    dims = _dims(_arg(args, kwargs, 2, "dim", 1), _rank(dec, x))
    eps = _arg(args, kwargs, 3, "eps", 1e-12)
    n = vector_norm(dec, x, p, dims, True, "normalize")
    return dec.ew("div", x, dec.ew("maximum", n, eps, origin="normalize"), origin="normalize")


def op_cumsum(dec, args, kwargs, fn: str = "cumsum"):
    from kernelrag.draft.lower.values import _Flip

    x = args[0]
    reverse = isinstance(x, _Flip)
    base = IrRef(x.value) if reverse else _tensor(x, fn)
    (dim,) = _dims(_arg(args, kwargs, 1, "dim"), _rank(dec, base))
    if reverse and x.dim != dim:
        raise Unsupported("flip is lowered only around a scan along the same dim (a reverse cumsum)")
    out = dec.g.add("scan", [base.id], dec.shape(base.id), "float", fn, fn=fn, dim=dim, reverse=reverse)
    return _Flip(out, dim, scanned=True) if reverse else IrRef(out)


def op_cumprod(dec, args, kwargs):
    return op_cumsum(dec, args, kwargs, "cumprod")



def _joined(dec, args, kwargs, what: str) -> tuple[list[IrRef], int]:
    """(pieces, dim) of torch.cat / torch.stack; the dim is that of the inputs (cat) or of the result (stack)."""
    pieces = _arg(args, kwargs, 0, "tensors")
    if not isinstance(pieces, (list, tuple)) or not pieces:
        raise Unsupported(f"{what} expects a list of tensors, got {pieces!r}")
    pieces = [_tensor(p, what) for p in pieces]
    ranks = {_rank(dec, p) for p in pieces}
    if len(ranks) != 1:
        raise Unsupported(f"{what} of tensors of different ranks {sorted(ranks)} is not lowered")
    rank = ranks.pop() + (what == "stack")
    dim = int(_arg(args, kwargs, 1, "dim", 0))
    if not -rank <= dim < rank:
        raise Unsupported(f"{what} along dim {dim} of a rank-{rank} result")
    return pieces, dim % rank


def _joined_kind(dec, pieces: list[IrRef]) -> str:
    """torch.cat promotes its pieces' dtypes: float over int64 over bool."""
    kinds = {dec.g[p.id].kind for p in pieces}
    return next(k for k in (FLOAT, INDEX, BOOL) if k in kinds)


def op_cat(dec, args, kwargs):
    """``torch.cat(pieces, dim)``: one ``cat`` node; each lane reads the piece its index falls in."""
    pieces, dim = _joined(dec, args, kwargs, "cat")
    if len(pieces) == 1:
        return pieces[0]
    shapes = [dec.shape(p.id) for p in pieces]
    if len({s[:dim] + s[dim + 1:] for s in shapes}) != 1:
        raise Unsupported(f"cat along dim {dim} of shapes {shapes}: the other dims differ")
    shape = shapes[0][:dim] + (sum(s[dim] for s in shapes),) + shapes[0][dim + 1:]
    return IrRef(dec.g.add("cat", [p.id for p in pieces], shape, _joined_kind(dec, pieces), "cat", dim=dim,
                           stack=False))


op_concat = op_concatenate = op_cat


def op_stack(dec, args, kwargs):
    """``torch.stack(pieces, dim)``: a ``cat`` of pieces one index wide along the new dim."""
    pieces, dim = _joined(dec, args, kwargs, "stack")
    shapes = {dec.shape(p.id) for p in pieces}
    if len(shapes) != 1:
        raise Unsupported(f"stack of tensors of different shapes {sorted(shapes)}")
    shape = shapes.pop()
    return IrRef(dec.g.add("cat", [p.id for p in pieces], shape[:dim] + (len(pieces),) + shape[dim:],
                           _joined_kind(dec, pieces), "stack", dim=dim, stack=True))


def op_split(dec, args, kwargs):
    """``x.split(size_or_sizes, dim)``: views, taken in PyTorch (free) and read through their strides."""
    x = _tensor(args[0], "split")
    sizes = _arg(args, kwargs, 1, "split_size_or_sections", kwargs.get("split_size"))
    dim = int(_arg(args, kwargs, 2, "dim", 0)) % _rank(dec, x)
    shape = dec.shape(x.id)
    if isinstance(sizes, int):      # the last piece takes what is left, as torch.split does
        widths = [min(sizes, shape[dim] - start) for start in range(0, shape[dim], sizes)]
    elif isinstance(sizes, (list, tuple)) and all(isinstance(s, int) for s in sizes):
        widths = list(sizes)
    else:
        raise Unsupported(f"split with sizes {sizes!r} (traced sizes are not lowered)")
    return tuple(dec.view(x, f"{{0}}.split({sizes!r}, {dim})[{k}]", shape[:dim] + (w,) + shape[dim + 1:], "split")
                 for k, w in enumerate(widths))


def op_narrow(dec, args, kwargs):
    """``x.narrow(dim, start, length)``: a view, taken in PyTorch (free) and read through its strides."""
    x = _tensor(args[0], "narrow")
    dim, start, length = (_arg(args, kwargs, k, key) for k, key in enumerate(("dim", "start", "length"), 1))
    if not all(isinstance(v, int) for v in (dim, start, length)):
        raise Unsupported(f"narrow with traced bounds ({dim!r}, {start!r}, {length!r}) is not lowered")
    shape = dec.shape(x.id)
    dim %= len(shape)
    return dec.view(x, f"{{0}}.narrow({dim}, {start}, {length})", shape[:dim] + (length,) + shape[dim + 1:],
                    "narrow")


def op_select(dec, args, kwargs):
    """``x.select(dim, index)`` (``x[:, i]``): a view without ``dim``, read through its strides."""
    x = _tensor(args[0], "select")
    dim, index = _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "index")
    if not all(isinstance(v, int) for v in (dim, index)):
        raise Unsupported(f"select with traced arguments ({dim!r}, {index!r}) is not lowered")
    shape = dec.shape(x.id)
    dim %= len(shape)
    if not -shape[dim] <= index < shape[dim]:
        raise Unsupported(f"select index {index} is out of range for dim {dim} of size {shape[dim]}")
    return dec.view(x, f"{{0}}.select({dim}, {index})", shape[:dim] + shape[dim + 1:], "select")


def _filled_like(dec, args, kwargs, value: float, name: str):
    """A float tensor of ``x``'s shape holding ``value``: ``where(x == x, v, v)``, so it takes x's
    shape and frame from the graph while no value of x (NaN or not) can reach it."""
    x = _tensor(args[0], name)
    if dec.g[x.id].kind != FLOAT or kwargs.get("dtype") is not None:
        raise Unsupported(f"{name} of a non-float tensor or with a dtype is not lowered")
    return dec.ew("where", dec.ew("eq", x, x, origin=name), value, value, origin=name)


def op_zeros_like(dec, args, kwargs):
    return _filled_like(dec, args, kwargs, 0.0, "zeros_like")


def op_ones_like(dec, args, kwargs):
    return _filled_like(dec, args, kwargs, 1.0, "ones_like")


def op_full_like(dec, args, kwargs):
    value = _arg(args, kwargs, 1, "fill_value")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise Unsupported(f"full_like with a traced or non-number fill value ({value!r}) is not lowered")
    return _filled_like(dec, args, kwargs, float(value), "full_like")
