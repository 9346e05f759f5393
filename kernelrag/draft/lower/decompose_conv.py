"""Convolutions and pooling lowered into ``conv`` and ``pool`` IR nodes (see ``decompose_gemm``).

Output sizes are computed here with PyTorch's formulas (the handlers see operand
shapes only); the kernels recompute them from the tensors at run time. A bias is an
elementwise add of ``bias.view(C, 1, ..)``, which the conv template fuses.
"""
from __future__ import annotations

from kernelrag.draft.lower.exprs import is_elementwise
from kernelrag.draft.lower.ir import FLOAT, broadcast
from kernelrag.draft.lower.values import IrRef, Unsupported, _arg


def _tuple(v, d: int, what: str) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * d
    if isinstance(v, (tuple, list)) and len(v) == d and all(isinstance(i, int) for i in v):
        return tuple(v)
    raise Unsupported(f"{what}={v!r} is not an int or {d} ints")


def _pool_out(L, k, s, p, d, ceil_mode):
    span = L + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
    return out


def conv(dec, x, w, b, dims, stride, padding, dilation, groups, transposed=False, output_padding=0):
    if not isinstance(x, IrRef) or not isinstance(w, IrRef):
        raise Unsupported("a convolution needs tensor input and weight")
    xs, ws = dec.shape(x.id), dec.shape(w.id)
    if len(xs) != dims + 2:
        raise Unsupported(f"conv{dims}d of a {len(xs)}-D input: only batched [N, C, ...] inputs are lowered")
    ks = tuple(ws[2:])
    st, dl = _tuple(stride, dims, "stride"), _tuple(dilation, dims, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same" and all(s == 1 for s in st) and all(d * (k - 1) % 2 == 0 for d, k in zip(dl, ks)):
            padding = tuple(d * (k - 1) // 2 for d, k in zip(dl, ks))
        else:
            raise Unsupported(f"padding={padding!r} with these kernel sizes is asymmetric; not lowered")
    pd = _tuple(padding, dims, "padding")
    op = _tuple(output_padding, dims, "output_padding")
    L = xs[2:]
    if transposed:
        cout = ws[1] * groups
        O = tuple((L[i] - 1) * st[i] - 2 * pd[i] + dl[i] * (ks[i] - 1) + op[i] + 1 for i in range(dims))
    else:
        cout = ws[0]
        O = tuple((L[i] + 2 * pd[i] - dl[i] * (ks[i] - 1) - 1) // st[i] + 1 for i in range(dims))
    shape = (xs[0], cout) + O
    bias = None if b is None else dec.view(b, "{0}.view(-1" + ", 1" * dims + ")", (cout,) + (1,) * dims, "conv_bias")
    y = IrRef(dec.g.add("conv", [x.id, w.id], shape, FLOAT, f"conv{'_transpose' if transposed else ''}{dims}d",
                        dims=dims, kernel_size=ks, stride=st, padding=pd, dilation=dl, groups=int(groups),
                        transposed=transposed, output_padding=op, depthwise=transposed and groups == xs[1] > 1))
    return y if bias is None else dec.ew("add", y, bias, origin="conv_bias")   # the bias view precedes the conv:
                                                                               # it is ready when the region runs


def _conv_fn(dims: int, transposed: bool):
    def op(dec, args, kwargs):
        g = lambda pos, key, default: _arg(args, kwargs, pos, key, default)
        if transposed:
            return conv(dec, args[0], g(1, "weight", None), g(2, "bias", None), dims, g(3, "stride", 1),
                        g(4, "padding", 0), g(7, "dilation", 1), g(6, "groups", 1), True, g(5, "output_padding", 0))
        return conv(dec, args[0], g(1, "weight", None), g(2, "bias", None), dims, g(3, "stride", 1),
                    g(4, "padding", 0), g(5, "dilation", 1), g(6, "groups", 1))
    return op


op_conv1d, op_conv2d, op_conv3d = (_conv_fn(d, False) for d in (1, 2, 3))
op_conv_transpose1d, op_conv_transpose2d, op_conv_transpose3d = (_conv_fn(d, True) for d in (1, 2, 3))


def _conv_module(dims: int, transposed: bool):
    def handler(dec, mod, path, args, kwargs):
        if mod.padding_mode != "zeros":
            raise Unsupported(f"{type(mod).__name__} with padding_mode={mod.padding_mode!r} is not lowered")
        w = dec.param(f"{path}.weight")
        b = dec.param(f"{path}.bias") if mod.bias is not None else None
        return conv(dec, args[0], w, b, dims, mod.stride, mod.padding, mod.dilation, mod.groups, transposed,
                    getattr(mod, "output_padding", 0))
    return handler


Conv1d, Conv2d, Conv3d = (_conv_module(d, False) for d in (1, 2, 3))
ConvTranspose1d, ConvTranspose2d, ConvTranspose3d = (_conv_module(d, True) for d in (1, 2, 3))


def pool(dec, x, kind, dims, kernel_size, stride, padding, dilation=1, ceil_mode=False, count_include_pad=True,
         divisor_override=None, return_indices=False):
    if return_indices:
        raise Unsupported("max pooling with return_indices is not lowered")
    if not isinstance(x, IrRef) or len(dec.shape(x.id)) != dims + 2:
        raise Unsupported(f"{kind}_pool{dims}d: only batched [N, C, ...] tensor inputs are lowered")
    ks = _tuple(kernel_size, dims, "kernel_size")
    st = _tuple(stride if stride not in (None, [], ()) else kernel_size, dims, "stride")
    pd, dl = _tuple(padding, dims, "padding"), _tuple(dilation, dims, "dilation")
    xs = dec.shape(x.id)
    O = tuple(_pool_out(xs[2 + i], ks[i], st[i], pd[i], dl[i], bool(ceil_mode)) for i in range(dims))
    return IrRef(dec.g.add("pool", [x.id], xs[:2] + O, FLOAT, f"{kind}_pool{dims}d", mode=kind, dims=dims,
                           kernel_size=ks, stride=st, padding=pd, dilation=dl, ceil_mode=bool(ceil_mode),
                           count_include_pad=bool(count_include_pad), divisor_override=divisor_override))


def _pool_fn(kind: str, dims: int):
    names = (["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"] if kind == "max" else
             ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"])

    def op(dec, args, kwargs):
        params = {n: _arg(args, kwargs, i + 1, n) for i, n in enumerate(names)}
        params = {k: v for k, v in params.items() if v is not None}
        params.setdefault("stride", None)
        params.setdefault("padding", 0)
        return pool(dec, args[0], kind, dims, **params)
    return op


op_max_pool1d, op_max_pool2d, op_max_pool3d = (_pool_fn("max", d) for d in (1, 2, 3))
op_avg_pool1d, op_avg_pool2d, op_avg_pool3d = (_pool_fn("avg", d) for d in (1, 2, 3))


def _pool_module(kind: str, dims: int):
    def handler(dec, mod, path, args, kwargs):
        extra = (dict(dilation=mod.dilation, return_indices=mod.return_indices) if kind == "max" else
                 dict(count_include_pad=mod.count_include_pad,
                      divisor_override=getattr(mod, "divisor_override", None)))
        return pool(dec, args[0], kind, dims, mod.kernel_size, mod.stride, mod.padding,
                    ceil_mode=mod.ceil_mode, **extra)
    return handler


MaxPool1d, MaxPool2d, MaxPool3d = (_pool_module("max", d) for d in (1, 2, 3))
AvgPool1d, AvgPool2d, AvgPool3d = (_pool_module("avg", d) for d in (1, 2, 3))


def global_pool(dec, x, kind: str, dims: int, size, origin: str):
    """An adaptive pool to output size 1: max or mean over all spatial dims, at run-time sizes."""
    sizes = (size,) * dims if not isinstance(size, (tuple, list)) else tuple(size)
    if any(s != 1 for s in sizes):
        raise Unsupported(f"{origin}({size!r}): only a global pool (output size 1) is lowered")
    if not isinstance(x, IrRef) or len(dec.shape(x.id)) != dims + 2:
        raise Unsupported(f"{origin}: only batched [N, C, ...] tensor inputs are lowered")
    xs = dec.shape(x.id)
    return IrRef(dec.g.add("pool", [x.id], xs[:2] + (1,) * dims, FLOAT, origin, mode=kind, dims=dims,
                           global_pool=True))


def _adaptive(kind: str, dims: int):
    def handler(dec, mod, path, args, kwargs):
        if getattr(mod, "return_indices", False):
            raise Unsupported(f"{type(mod).__name__} with return_indices is not lowered")
        return global_pool(dec, args[0], kind, dims, mod.output_size, f"adaptive_{kind}_pool{dims}d")
    return handler


def _adaptive_fn(kind: str, dims: int):
    def op(dec, args, kwargs):
        if _arg(args, kwargs, 2, "return_indices", False):
            raise Unsupported(f"adaptive_{kind}_pool{dims}d with return_indices is not lowered")
        return global_pool(dec, args[0], kind, dims, _arg(args, kwargs, 1, "output_size"),
                           f"adaptive_{kind}_pool{dims}d")
    return op


# a global (output size 1) adaptive pool: the pool template's row sweep, many short rows per program
AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d = (_adaptive("avg", d) for d in (1, 2, 3))
AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d = (_adaptive("max", d) for d in (1, 2, 3))
op_adaptive_avg_pool1d, op_adaptive_avg_pool2d, op_adaptive_avg_pool3d = (_adaptive_fn("avg", d) for d in (1, 2, 3))
op_adaptive_max_pool1d, op_adaptive_max_pool2d, op_adaptive_max_pool3d = (_adaptive_fn("max", d) for d in (1, 2, 3))


def fold_conv_crops(graph) -> int:
    """Fold a slice of a convolution's output (``conv(x)[..., :-k]``, through elementwise ops
    that broadcast along the sliced dims, such as the bias) into the conv as a crop, so only the
    kept outputs are computed. Applies when every value on the way has no other reader and only
    spatial dims are sliced, with step 1. Returns the number of slices folded."""
    folded = 0
    for view in graph.live():
        slices = view.args.get("slices") if view.op == "view" else None
        if not slices:
            continue
        rank = len(slices)
        sliced = [d for d, sl in enumerate(slices) if sl != (None, None, None)]
        chain, cur = [], graph[view.inputs[0]]        # the elementwise ops between the conv and the slice
        while is_elementwise(cur) and len(cur.shape) == rank:
            main = [i for i in cur.inputs if graph[i].shape == cur.shape]
            others = [graph[i].shape for i in cur.inputs if graph[i].shape != cur.shape]
            if len(main) != 1 or any(len(s) >= rank - d and s[d - rank] != 1 for s in others for d in sliced):
                break
            chain.append(cur)
            cur = graph[main[0]]
        if cur.op != "conv" or len(cur.shape) != rank or any(d < 2 for d in sliced) \
                or any(sl[2] not in (None, 1) for sl in slices):
            continue
        users, live = graph.users(), {n.id for n in graph.live()}
        path = [view] + chain + [cur]
        if any({u for u in users[n.id] if u in live} != {path[k].id} or n.id in graph.outputs
               for k, n in enumerate(path[1:])):
            continue                        # another reader needs the uncropped value
        cur.args["crop"] = tuple((sl[0], sl[1]) for sl in slices[2:])
        cur.shape = view.shape
        for n in reversed(chain):           # from the conv on: each op now sees the cropped frame
            n.shape = broadcast(*[graph[i].shape for i in n.inputs])
        for n in graph.nodes:
            n.inputs = [view.inputs[0] if i == view.id else i for i in n.inputs]
        graph.outputs = [view.inputs[0] if i == view.id else i for i in graph.outputs]
        folded += 1
    return folded
