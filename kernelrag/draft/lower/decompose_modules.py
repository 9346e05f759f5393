"""nn modules lowered through their functional decompositions (one function per class name)."""
from __future__ import annotations

from kernelrag.draft.lower import decompose_norms as N
from kernelrag.draft.lower import decompose_ops as O
from kernelrag.draft.lower.values import Unsupported


def _p(dec, path: str, mod, name: str):
    return dec.param(f"{path}.{name}") if getattr(mod, name, None) is not None else None


def LayerNorm(dec, mod, path, args, kwargs):
    return N.layer_norm(dec, args[0], mod.normalized_shape, _p(dec, path, mod, "weight"), _p(dec, path, mod, "bias"),
                        mod.eps)


def RMSNorm(dec, mod, path, args, kwargs):
    return N.rms_norm(dec, args[0], mod.normalized_shape, _p(dec, path, mod, "weight"), mod.eps)


def GroupNorm(dec, mod, path, args, kwargs):
    return N.group_norm(dec, args[0], mod.num_groups, _p(dec, path, mod, "weight"), _p(dec, path, mod, "bias"),
                        mod.eps, f"self.{path}.num_groups")


def _instance(dec, mod, path, args, kwargs):
    if mod.track_running_stats and not mod.training:
        raise Unsupported("InstanceNorm with running statistics in eval mode is not lowered")
    return N.instance_norm(dec, args[0], _p(dec, path, mod, "weight"), _p(dec, path, mod, "bias"), mod.eps)


InstanceNorm1d = InstanceNorm2d = InstanceNorm3d = _instance


def _batch(dec, mod, path, args, kwargs):
    training = mod.training or not mod.track_running_stats
    mean = None if training else _p(dec, path, mod, "running_mean")
    var = None if training else _p(dec, path, mod, "running_var")
    return N.batch_norm(dec, args[0], mean, var, _p(dec, path, mod, "weight"), _p(dec, path, mod, "bias"),
                        training, mod.eps)


BatchNorm1d = BatchNorm2d = BatchNorm3d = _batch


def Softmax(dec, mod, path, args, kwargs):
    return O.op_softmax(dec, [args[0], mod.dim], {})


def LogSoftmax(dec, mod, path, args, kwargs):
    return O.op_log_softmax(dec, [args[0], mod.dim], {})


def MSELoss(dec, mod, path, args, kwargs):
    return N.op_mse_loss(dec, args, {"reduction": mod.reduction})


def L1Loss(dec, mod, path, args, kwargs):
    return N.op_l1_loss(dec, args, {"reduction": mod.reduction})


def SmoothL1Loss(dec, mod, path, args, kwargs):
    return N.op_smooth_l1_loss(dec, args, {"reduction": mod.reduction, "beta": mod.beta})


def HuberLoss(dec, mod, path, args, kwargs):
    return N.op_huber_loss(dec, args, {"reduction": mod.reduction, "delta": mod.delta})


def BCEWithLogitsLoss(dec, mod, path, args, kwargs):
    extra = {"pos_weight": dec.param(f"{path}.pos_weight")} if getattr(mod, "pos_weight", None) is not None else {}
    weight = dec.param(f"{path}.weight") if getattr(mod, "weight", None) is not None else None
    return N.op_binary_cross_entropy_with_logits(dec, [args[0], args[1], weight],
                                                 {"reduction": mod.reduction, **extra})


def KLDivLoss(dec, mod, path, args, kwargs):
    return N.op_kl_div(dec, args, {"reduction": mod.reduction, "log_target": mod.log_target})


def CrossEntropyLoss(dec, mod, path, args, kwargs):
    return N.cross_entropy(dec, args[0], args[1], mod.reduction, False, "cross_entropy", _p(dec, path, mod, "weight"),
                           mod.label_smoothing, mod.ignore_index)


def NLLLoss(dec, mod, path, args, kwargs):
    return N.cross_entropy(dec, args[0], args[1], mod.reduction, True, "nll_loss", _p(dec, path, mod, "weight"), 0.0,
                           mod.ignore_index)


def TripletMarginLoss(dec, mod, path, args, kwargs):
    return N.triplet_margin_loss(dec, args[0], args[1], args[2], mod.margin, mod.p, mod.eps, mod.swap, mod.reduction)


def HingeEmbeddingLoss(dec, mod, path, args, kwargs):
    return N.op_hinge_embedding_loss(dec, args, {"margin": mod.margin, "reduction": mod.reduction})


def Dropout(dec, mod, path, args, kwargs):
    if mod.training and mod.p > 0:
        raise Unsupported("dropout in training mode is random; it is not lowered")
    return args[0]


Dropout1d = Dropout2d = Dropout3d = AlphaDropout = Dropout


def Identity(dec, mod, path, args, kwargs):
    return args[0]


def Flatten(dec, mod, path, args, kwargs):
    return O.layout(dec, "flatten", [args[0], mod.start_dim, mod.end_dim], {}, _flat_shape(dec, args[0], mod))


def _flat_shape(dec, x, mod):
    shape = dec.shape(x.id)
    start, end = mod.start_dim % len(shape), mod.end_dim % len(shape)
    n = 1
    for s in shape[start:end + 1]:
        n *= s
    return shape[:start] + (n,) + shape[end + 1:]
