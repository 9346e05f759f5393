"""Norms and losses decomposed into reductions and elementwise ops.

The statistics are the textbook two-moment form in fp32 (mean, then the mean of
squared deviations from it), which matches PyTorch to fp32 rounding; the affine
parameters broadcast in as views (``weight.view(1, G, -1, 1)``), so the template
loads them with strides and never materialises a broadcast copy.
"""
from __future__ import annotations

from typing import Any

from kernelrag.draft.lower.values import IrRef, Unsupported, _arg
from kernelrag.draft.lower.decompose_ops import _tensor, vector_norm


def _normalise(dec, x: IrRef, dims: tuple[int, ...], eps: float, origin: str) -> IrRef:
    mu = dec.red("mean", x, dims, True, origin)
    d = dec.ew("sub", x, mu, origin=origin)
    var = dec.red("mean", dec.ew("mul", d, d, origin=origin), dims, True, origin)
    return dec.ew("mul", d, dec.ew("rsqrt", dec.ew("add", var, float(eps), origin=origin), origin=origin),
                  origin=origin)


def _affine(dec, y: IrRef, weight: Any, bias: Any, origin: str) -> IrRef:
    if isinstance(weight, IrRef):
        y = dec.ew("mul", y, weight, origin=origin)
    if isinstance(bias, IrRef):
        y = dec.ew("add", y, bias, origin=origin)
    return y


def layer_norm(dec, x, normalized_shape, weight, bias, eps) -> IrRef:
    rank = len(dec.shape(x.id))
    k = len(normalized_shape) if isinstance(normalized_shape, (list, tuple)) else 1
    dims = tuple(range(rank - k, rank))
    return _affine(dec, _normalise(dec, x, dims, eps, "layer_norm"), weight, bias, "layer_norm")


def op_layer_norm(dec, args, kwargs):
    x = _tensor(args[0], "layer_norm")
    return layer_norm(dec, x, _arg(args, kwargs, 1, "normalized_shape"), _arg(args, kwargs, 2, "weight"),
                      _arg(args, kwargs, 3, "bias"), _arg(args, kwargs, 4, "eps", 1e-5))


def rms_norm(dec, x, normalized_shape, weight, eps) -> IrRef:
    rank = len(dec.shape(x.id))
    k = len(normalized_shape) if isinstance(normalized_shape, (list, tuple)) else 1
    dims = tuple(range(rank - k, rank))
    if eps is None:
        eps = 1.1920928955078125e-07          # torch.finfo(float32).eps, RMSNorm's default
    ms = dec.red("mean", dec.ew("mul", x, x, origin="rms_norm"), dims, True, "rms_norm")
    y = dec.ew("mul", x, dec.ew("rsqrt", dec.ew("add", ms, float(eps), origin="rms_norm"), origin="rms_norm"),
               origin="rms_norm")
    return _affine(dec, y, weight, None, "rms_norm")


def op_rms_norm(dec, args, kwargs):
    x = _tensor(args[0], "rms_norm")
    return rms_norm(dec, x, _arg(args, kwargs, 1, "normalized_shape"), _arg(args, kwargs, 2, "weight"),
                    _arg(args, kwargs, 3, "eps"))


def group_norm(dec, x, groups: int, weight, bias, eps, groups_code: str = "") -> IrRef:
    """``groups_code``: the group count as ``forward`` reads it at run time (``self.gn.num_groups``):
    a task whose sizes shrink may shrink its group count too, so the traced number is only a default."""
    shape = dec.shape(x.id)
    if len(shape) < 2 or shape[1] % groups:
        raise Unsupported(f"group_norm: {groups} groups do not divide the channels of shape {shape}")
    n, c = shape[0], shape[1]
    rest = 1
    for s in shape[2:]:
        rest *= s
    g = groups_code or str(groups)
    grouped = (n, groups, c // groups, rest)
    xg = dec.view(x, f"{{0}}.reshape({{0}}.shape[0], {g}, {{0}}.shape[1] // {g}, -1)", grouped, "group_norm")
    y = _normalise(dec, xg, (2, 3), eps, "group_norm")
    wv = dec.view(weight, f"{{0}}.view(1, {g}, -1, 1)", (1, groups, c // groups, 1), "group_norm") \
        if isinstance(weight, IrRef) else None
    bv = dec.view(bias, f"{{0}}.view(1, {g}, -1, 1)", (1, groups, c // groups, 1), "group_norm") \
        if isinstance(bias, IrRef) else None
    y = _affine(dec, y, wv, bv, "group_norm")
    return dec.view(y, "{0}.view({1}.shape)", shape, "group_norm", x)


def op_group_norm(dec, args, kwargs):
    return group_norm(dec, _tensor(args[0], "group_norm"), int(_arg(args, kwargs, 1, "num_groups")),
                      _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias"), _arg(args, kwargs, 4, "eps", 1e-5))


def _channel_view(dec, p, rank: int, origin: str):
    if not isinstance(p, IrRef):
        return None
    ones = ", ".join(["1"] * (rank - 2))
    return dec.view(p, f"{{0}}.view(-1, {ones})" if ones else "{0}", (dec.shape(p.id)[0],) + (1,) * (rank - 2),
                    origin)


def instance_norm(dec, x, weight, bias, eps) -> IrRef:
    rank = len(dec.shape(x.id))
    y = _normalise(dec, x, tuple(range(2, rank)), eps, "instance_norm")
    return _affine(dec, y, _channel_view(dec, weight, rank, "instance_norm"),
                   _channel_view(dec, bias, rank, "instance_norm"), "instance_norm")


def batch_norm(dec, x, mean, var, weight, bias, training: bool, eps) -> IrRef:
    rank = len(dec.shape(x.id))
    if training or mean is None:
        y = _normalise(dec, x, (0,) + tuple(range(2, rank)), eps, "batch_norm")
    else:    # inference: the running statistics, a per-channel affine map
        m, v = _channel_view(dec, mean, rank, "batch_norm"), _channel_view(dec, var, rank, "batch_norm")
        y = dec.ew("mul", dec.ew("sub", x, m, origin="batch_norm"),
                   dec.ew("rsqrt", dec.ew("add", v, float(eps), origin="batch_norm"), origin="batch_norm"),
                   origin="batch_norm")
    return _affine(dec, y, _channel_view(dec, weight, rank, "batch_norm"),
                   _channel_view(dec, bias, rank, "batch_norm"), "batch_norm")


def op_batch_norm(dec, args, kwargs):
    return batch_norm(dec, _tensor(args[0], "batch_norm"), _arg(args, kwargs, 1, "running_mean"),
                      _arg(args, kwargs, 2, "running_var"), _arg(args, kwargs, 3, "weight"),
                      _arg(args, kwargs, 4, "bias"), bool(_arg(args, kwargs, 5, "training", False)),
                      _arg(args, kwargs, 7, "eps", 1e-5))


def op_instance_norm(dec, args, kwargs):
    return instance_norm(dec, _tensor(args[0], "instance_norm"), _arg(args, kwargs, 3, "weight"),
                         _arg(args, kwargs, 4, "bias"), _arg(args, kwargs, 7, "eps", 1e-5))


# ------------------------------------------------------------------ losses
def reduce_loss(dec, per_element: IrRef, reduction: str, origin: str) -> IrRef:
    dims = tuple(range(len(dec.shape(per_element.id))))
    if reduction == "none":
        return per_element
    if reduction == "mean":
        return dec.red("mean", per_element, dims, False, origin)
    if reduction == "sum":
        return dec.red("sum", per_element, dims, False, origin)
    if reduction == "batchmean":
        return dec.red("sum", per_element, dims, False, origin, denom=(0,))
    raise Unsupported(f"{origin}: reduction {reduction!r} is not lowered (none, mean, sum, batchmean)")


def _reduction(args, kwargs, pos: int) -> str:
    return str(_arg(args, kwargs, pos, "reduction", "mean"))


def op_mse_loss(dec, args, kwargs):
    d = dec.ew("sub", args[0], args[1], origin="mse_loss")
    return reduce_loss(dec, dec.ew("mul", d, d, origin="mse_loss"), _reduction(args, kwargs, 4), "mse_loss")


def op_l1_loss(dec, args, kwargs):
    d = dec.ew("abs", dec.ew("sub", args[0], args[1], origin="l1_loss"), origin="l1_loss")
    return reduce_loss(dec, d, _reduction(args, kwargs, 4), "l1_loss")


def _huber(dec, a, b, delta: float, scale_by_beta: bool, origin: str) -> IrRef:
    d = dec.ew("sub", a, b, origin=origin)
    ad = dec.ew("abs", d, origin=origin)
    quad = dec.ew("mul", dec.ew("mul", d, d, origin=origin), (0.5 / delta) if scale_by_beta else 0.5, origin=origin)
    lin = dec.ew("sub", ad, 0.5 * delta, origin=origin)
    if not scale_by_beta:
        lin = dec.ew("mul", lin, delta, origin=origin)
    return dec.ew("where", dec.ew("lt", ad, delta, origin=origin), quad, lin, origin=origin)


def op_smooth_l1_loss(dec, args, kwargs):
    beta = float(_arg(args, kwargs, 5, "beta", 1.0))
    if beta == 0.0:
        return op_l1_loss(dec, args, kwargs)
    return reduce_loss(dec, _huber(dec, args[0], args[1], beta, True, "smooth_l1_loss"),
                       _reduction(args, kwargs, 4), "smooth_l1_loss")


def op_huber_loss(dec, args, kwargs):
    delta = float(_arg(args, kwargs, 3, "delta", 1.0))
    return reduce_loss(dec, _huber(dec, args[0], args[1], delta, False, "huber_loss"),
                       _reduction(args, kwargs, 2), "huber_loss")


def op_kl_div(dec, args, kwargs):
    x, t = args[0], args[1]
    if _arg(args, kwargs, 5, "log_target", False):
        body = dec.ew("mul", dec.ew("exp", t, origin="kl_div"), dec.ew("sub", t, x, origin="kl_div"), origin="kl_div")
    else:
        body = dec.ew("sub", dec.ew("xlogy", t, t, origin="kl_div"), dec.ew("mul", t, x, origin="kl_div"),
                      origin="kl_div")
    return reduce_loss(dec, body, _reduction(args, kwargs, 4), "kl_div")


def pairwise_distance(dec, a, b, p: float, eps: float, keepdim: bool, origin: str) -> IrRef:
    d = dec.ew("add", dec.ew("sub", a, b, origin=origin), float(eps), origin=origin)
    rank = len(dec.shape(d.id))
    return vector_norm(dec, d, p, (rank - 1,), keepdim, origin)


def op_pairwise_distance(dec, args, kwargs):
    return pairwise_distance(dec, args[0], args[1], float(_arg(args, kwargs, 2, "p", 2.0)),
                             float(_arg(args, kwargs, 3, "eps", 1e-6)), bool(_arg(args, kwargs, 4, "keepdim", False)),
                             "pairwise_distance")


def triplet_margin_loss(dec, a, pos, neg, margin, p, eps, swap, reduction) -> IrRef:
    if swap:
        raise Unsupported("triplet_margin_loss with swap=True is not lowered")
    d_ap = pairwise_distance(dec, a, pos, p, eps, False, "triplet_margin_loss")
    d_an = pairwise_distance(dec, a, neg, p, eps, False, "triplet_margin_loss")
    gap = dec.ew("add", dec.ew("sub", d_ap, d_an, origin="triplet_margin_loss"), float(margin),
                 origin="triplet_margin_loss")
    return reduce_loss(dec, dec.ew("maximum", gap, 0.0, origin="triplet_margin_loss"), reduction,
                       "triplet_margin_loss")


def op_triplet_margin_loss(dec, args, kwargs):
    return triplet_margin_loss(dec, args[0], args[1], args[2], float(_arg(args, kwargs, 3, "margin", 1.0)),
                               float(_arg(args, kwargs, 4, "p", 2.0)), float(_arg(args, kwargs, 5, "eps", 1e-6)),
                               bool(_arg(args, kwargs, 6, "swap", False)), _reduction(args, kwargs, 9))


def op_binary_cross_entropy_with_logits(dec, args, kwargs):
    """PyTorch's stable form: (1 - y) x + (1 + (p - 1) y) (log1p(exp(-|x|)) + max(-x, 0)), with
    the positive weight p (1 without one) and an elementwise weight."""
    x, y, o = args[0], args[1], "binary_cross_entropy_with_logits"
    weight, pos_weight = _arg(args, kwargs, 2, "weight", None), kwargs.get("pos_weight")
    soft = dec.ew("add", dec.ew("log1p", dec.ew("exp", dec.ew("neg", dec.ew("abs", x, origin=o), origin=o),
                                                 origin=o), origin=o),
                  dec.ew("maximum", dec.ew("neg", x, origin=o), 0.0, origin=o), origin=o)
    scale = (dec.ew("add", 1.0, dec.ew("mul", dec.ew("sub", pos_weight, 1.0, origin=o), y, origin=o), origin=o)
             if pos_weight is not None else 1.0)
    body = dec.ew("add", dec.ew("mul", dec.ew("sub", 1.0, y, origin=o), x, origin=o),
                  dec.ew("mul", scale, soft, origin=o) if pos_weight is not None else soft, origin=o)
    if weight is not None:
        body = dec.ew("mul", body, weight, origin=o)
    return reduce_loss(dec, body, _reduction(args, kwargs, 5), o)


def op_hinge_embedding_loss(dec, args, kwargs):
    x, y = args[0], args[1]
    margin = float(_arg(args, kwargs, 2, "margin", 1.0))
    hinge = dec.ew("maximum", dec.ew("sub", margin, x, origin="hinge_embedding_loss"), 0.0,
                   origin="hinge_embedding_loss")
    body = dec.ew("where", dec.ew("eq", y, 1.0, origin="hinge_embedding_loss"), x,
                  dec.ew("where", dec.ew("eq", y, -1.0, origin="hinge_embedding_loss"), hinge, 0.0,
                         origin="hinge_embedding_loss"), origin="hinge_embedding_loss")
    return reduce_loss(dec, body, _reduction(args, kwargs, 5), "hinge_embedding_loss")


def cross_entropy(dec, x, target, reduction: str, log_probs: bool, origin: str, weight: Any = None,
                  smoothing: Any = 0.0, ignore_index: int = -100) -> IrRef:
    """PyTorch's cross-entropy (``log_probs``: nll_loss) of (N, C) or (N, C, d1, ...) scores against
    class indices of shape (N,) or (N, d1, ...): the classes are dim 1, every other position a row.

    Per row, with ``logp = x - logsumexp(x)`` (or ``x`` itself for nll_loss), ``w`` the class
    weights (1 without), ``valid = target != ignore_index`` and ``eps`` the label smoothing:
    ``loss = valid * ((1 - eps) * -w[t] * logp[t] + eps * -mean_c(w_c * logp_c))``. ``mean``
    divides the sum of the rows' losses by the sum of ``valid * w[t]`` (PyTorch normalises
    both terms by the weights of the targets); the class count of the smoothing term is the
    row's length at run time (a mean over the classes), never the traced one.
    """
    shape = dec.shape(x.id)
    if len(shape) < 2 or not isinstance(target, IrRef) or dec.g[target.id].kind != "index" \
            or dec.shape(target.id) != (shape[0], *shape[2:]):
        raise Unsupported(f"{origin} is lowered for (N, C, ...) scores and int64 class targets of shape (N, ...)")
    if weight is not None and (not isinstance(weight, IrRef) or dec.shape(weight.id) != (shape[1],)):
        raise Unsupported(f"{origin}: class weights must be a tensor of shape ({shape[1]},)")
    if weight is not None and len(shape) > 2:          # along dim 1, not the last dim
        weight = dec.view(weight, "{0}.view(-1" + ", 1" * (len(shape) - 2) + ")", (shape[1],) + (1,) * (len(shape) - 2),
                          origin)
    t = dec.view(target, "{0}.unsqueeze(1)", (shape[0], 1, *shape[2:]), origin)
    iota = IrRef(dec.g.add("iota", [], shape, "index", origin, dim=1))
    is_target = dec.ew("eq", iota, t, origin=origin)

    def at_target(v: IrRef) -> IrRef:                 # v[i, t_i], a row value
        return dec.red("sum", dec.ew("where", is_target, v, 0.0, origin=origin), (1,), True, origin)

    lse = None
    if not log_probs:
        m = dec.red("max", x, (1,), True, origin)
        s = dec.red("sum", dec.ew("exp", dec.ew("sub", x, m, origin=origin), origin=origin), (1,), True, origin)
        lse = dec.ew("add", dec.ew("log", s, origin=origin), m, origin=origin)
    picked = at_target(x)                             # x[i, t_i]; logp[t] = picked - lse
    logp_t = dec.ew("sub", picked, lse, origin=origin) if lse is not None else picked
    w_t = at_target(weight) if weight is not None else None
    nll = dec.ew("neg", dec.ew("mul", logp_t, w_t, origin=origin) if w_t is not None else logp_t, origin=origin)
    per_row = nll
    if not (isinstance(smoothing, (int, float)) and float(smoothing) == 0.0):
        if log_probs:
            raise Unsupported("nll_loss has no label smoothing")
        if weight is not None:                        # -mean_c(w_c * (x_c - lse))
            logp = dec.ew("sub", x, lse, origin=origin)
            mean_wl = dec.red("mean", dec.ew("mul", logp, weight, origin=origin), (1,), True, origin)
            smooth = dec.ew("neg", mean_wl, origin=origin)
        else:                                         # -mean_c(x_c - lse) = lse - mean_c(x_c)
            smooth = dec.ew("sub", lse, dec.red("mean", x, (1,), True, origin), origin=origin)
        keep = 1.0 - float(smoothing) if isinstance(smoothing, (int, float)) else dec.ew("sub", 1.0, smoothing,
                                                                                          origin=origin)
        per_row = dec.ew("add", dec.ew("mul", nll, keep, origin=origin), dec.ew("mul", smooth, smoothing, origin=origin),
                         origin=origin)
    valid = dec.ew("ne", t, float(ignore_index), origin=origin)
    per_row = dec.squeeze(dec.ew("where", valid, per_row, 0.0, origin=origin), (1,), origin)
    if reduction != "mean":
        return reduce_loss(dec, per_row, reduction, origin)
    count = dec.ew("where", valid, w_t, 0.0, origin=origin) if w_t is not None else \
        dec.ew("where", valid, 1.0, 0.0, origin=origin)
    count = dec.squeeze(count, (1,), origin)
    return dec.ew("div", reduce_loss(dec, per_row, "sum", origin), reduce_loss(dec, count, "sum", origin),
                  origin=origin)


def op_cross_entropy(dec, args, kwargs):
    # F.cross_entropy(input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing)
    return cross_entropy(dec, args[0], args[1], _reduction(args, kwargs, 6), False, "cross_entropy",
                         _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 7, "label_smoothing", 0.0),
                         int(_arg(args, kwargs, 4, "ignore_index", -100)))


def op_nll_loss(dec, args, kwargs):
    # F.nll_loss(input, target, weight, size_average, ignore_index, reduce, reduction)
    return cross_entropy(dec, args[0], args[1], _reduction(args, kwargs, 6), True, "nll_loss",
                         _arg(args, kwargs, 2, "weight"), 0.0, int(_arg(args, kwargs, 4, "ignore_index", -100)))
