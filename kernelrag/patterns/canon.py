"""Canonical op names for torch.fx / torch.export graph nodes, and folding of
known compositions (RMSNorm, softmax, GELU-tanh... written out as their parts).

``canonical_ops(node, gm, shape_of)`` returns a list of ``(name, attrs)`` ops for
one node: ``[]`` for a layout op (the node aliases its input), ``"const"`` for a
node that yields sizes or fresh constants. Names are the aten / functional names
with in-place, reflected and private spellings removed (``relu_``, ``__rtruediv__``,
``_softmax`` -> ``relu``, ``div``, ``softmax``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from kernelrag.patterns.pattern import format_op


@dataclass
class Op:
    id: int
    name: str
    attrs: dict[str, str] = field(default_factory=dict)
    inputs: list[Any] = field(default_factory=list)    # op ids, or "input" | "param" | "const"

    def token(self) -> str:
        return format_op(self.name, self.attrs)


_LAYOUT = set("""getitem view reshape contiguous flatten unflatten squeeze unsqueeze expand expand_as
t transpose permute clone to type type_as float half double bfloat16 int long detach dropout
feature_dropout alpha_dropout dropout1d dropout2d dropout3d alias unsafe_view view_as to_copy
lift_fresh_copy split chunk narrow select slice as_strided movedim moveaxis swapaxes swapdims
repeat broadcast_to identity cpu cuda requires_grad contiguous_format unbind tensor_split
assert_tensor_metadata""".split())

_CONST = set("""size dim numel getattr sym_size sym_numel stride zeros ones full arange empty
zeros_like ones_like empty_like full_like rand randn rand_like randn_like randint tensor
scalar_tensor eye linspace new_zeros new_ones new_empty new_full new_tensor""".split())

_ALIASES = {
    "truediv": "div", "true_divide": "div", "divide": "div", "rtruediv": "div", "rdiv": "div",
    "itruediv": "div", "idiv": "div", "multiply": "mul", "rmul": "mul", "imul": "mul",
    "subtract": "sub", "rsub": "sub", "isub": "sub", "radd": "add", "iadd": "add",
    "rpow": "pow", "ipow": "pow", "square": "pow", "float_power": "pow", "negative": "neg",
    "mm": "matmul", "rmatmul": "matmul", "dot": "matmul", "mv": "matmul", "outer": "matmul",
    "tensordot": "matmul", "clip": "clamp", "clamp_min": "clamp", "clamp_max": "clamp",
    "absolute": "abs", "native_layer_norm": "layer_norm", "native_batch_norm": "batch_norm",
    "native_batch_norm_legit_no_training": "batch_norm", "native_batch_norm_legit": "batch_norm",
    "native_group_norm": "group_norm", "safe_softmax": "softmax", "linalg_vector_norm": "norm",
    "frobenius_norm": "norm", "max_pool2d_with_indices": "max_pool2d",
    "max_pool3d_with_indices": "max_pool3d", "max_pool1d_with_indices": "max_pool1d",
    "scaled_dot_product_flash_attention_for_cpu": "scaled_dot_product_attention",
    "scaled_dot_product_flash_attention": "scaled_dot_product_attention",
    "scaled_dot_product_efficient_attention": "scaled_dot_product_attention",
    "scaled_dot_product_cudnn_attention": "scaled_dot_product_attention",
    "swish": "silu", "sigmoid_": "sigmoid",
}

# op -> (position of ``dim`` in args, default dim or None)
_DIM_OPS: dict[str, tuple[int, int | None]] = {
    **{n: (1, None) for n in ("softmax log_softmax sum mean amax amin max min prod argmax argmin "
                              "var std logsumexp cumsum cumprod cummax cummin logcumsumexp all any "
                              "count_nonzero").split()},
    "norm": (2, None), "normalize": (2, 1), "cosine_similarity": (2, 1),
}

_MODULES = {
    "ReLU": "relu", "ReLU6": "relu6", "GELU": "gelu", "Sigmoid": "sigmoid", "Tanh": "tanh",
    "SiLU": "silu", "Softplus": "softplus", "ELU": "elu", "SELU": "selu", "CELU": "celu",
    "LeakyReLU": "leaky_relu", "Hardtanh": "hardtanh", "Hardsigmoid": "hardsigmoid",
    "Hardswish": "hardswish", "Mish": "mish", "Softsign": "softsign", "LogSigmoid": "logsigmoid",
    "PReLU": "prelu", "GLU": "glu", "Threshold": "threshold", "Softmax": "softmax",
    "LogSoftmax": "log_softmax", "LayerNorm": "layer_norm", "RMSNorm": "rms_norm",
    "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm", "BatchNorm3d": "batch_norm",
    "GroupNorm": "group_norm", "InstanceNorm1d": "instance_norm", "InstanceNorm2d": "instance_norm",
    "InstanceNorm3d": "instance_norm", "LocalResponseNorm": "local_response_norm",
    "CrossEntropyLoss": "cross_entropy", "MSELoss": "mse_loss", "L1Loss": "l1_loss",
    "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss", "KLDivLoss": "kl_div",
    "BCELoss": "binary_cross_entropy", "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
    "NLLLoss": "nll_loss", "TripletMarginLoss": "triplet_margin_loss",
    "MarginRankingLoss": "margin_ranking_loss", "HingeEmbeddingLoss": "hinge_embedding_loss",
    "CosineEmbeddingLoss": "cosine_embedding_loss", "MultiheadAttention": "multi_head_attention",
    "Dropout": None, "Dropout1d": None, "Dropout2d": None, "Dropout3d": None,
    "AlphaDropout": None, "Identity": None, "Flatten": None, "Unflatten": None,
}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def normalise_name(raw: str) -> str:
    """``__rtruediv__`` -> ``div``, ``relu_`` -> ``relu``, ``_softmax`` -> ``softmax``."""
    name = raw.lower()
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
    name = name.strip("_")
    return _ALIASES.get(name, name)


def norm_dim(dim: Any, rank: int | None) -> str:
    """The one dim rule: the last dim is ``-1``, any other its non-negative index."""
    if isinstance(dim, (list, tuple)):
        if len(dim) == 1:
            return norm_dim(dim[0], rank)
        parts = [norm_dim(d, rank) for d in dim]
        return "(" + ",".join(sorted(parts, key=lambda p: int(p) % 1000)) + ")"
    d = int(dim)
    if rank is None or rank <= 0:
        return str(d)
    d %= rank
    return "-1" if d == rank - 1 else str(d)


def _arg(node: Any, pos: int, key: str, default: Any = None) -> Any:
    if key in node.kwargs:
        return node.kwargs[key]
    return node.args[pos] if len(node.args) > pos else default


def _is_node(value: Any) -> bool:
    return hasattr(value, "op") and hasattr(value, "target") and hasattr(value, "meta")


def _swaps_last_two(value: Any, shape_of: Callable[[Any], Any]) -> bool:
    """``value`` is its source with the last two dims swapped (``.T``, ``.mT``, ``t()``,
    ``transpose(-2, -1)``, a ``permute`` that swaps them): a matmul operand read transposed,
    which changes what the product computes, unlike the layout ops the pattern drops."""
    if not _is_node(value) or value.op not in ("call_method", "call_function"):
        return False
    target = value.target
    raw = target if value.op == "call_method" else getattr(target, "__name__", str(target))
    name = normalise_name(raw)
    source = value.args[0] if value.args else None
    shape = shape_of(source) if _is_node(source) else None
    rank = len(shape) if shape is not None else None
    if name == "getattr":
        return len(value.args) > 1 and value.args[1] in ("T", "mT", "mH", "H")
    if name in ("t", "numpy_T"):
        return True
    if name in ("transpose", "swapaxes", "swapdims") and len(value.args) >= 3 and rank:
        dims = {d % rank for d in value.args[1:3] if isinstance(d, int)}
        return dims == {rank - 2, rank - 1}
    if name == "permute" and rank and rank >= 2:
        order = value.args[1:] if not isinstance(value.args[1], (list, tuple)) else value.args[1]
        order = [d % rank for d in order if isinstance(d, int)]
        return len(order) == rank and order[:-2] == list(range(rank - 2)) and order[-2:] == [rank - 1, rank - 2]
    return False


def _with_dim(name: str, node: Any, rank: int | None) -> tuple[str, dict[str, str]]:
    pos, default = _DIM_OPS[name]
    dim = _arg(node, pos, "dim", default)
    if dim is None or _is_node(dim) or isinstance(dim, str) or dim == []:
        return name, {}
    return name, {"dim": norm_dim(dim, rank)}


def _module_ops(module: Any, node: Any, rank: int | None) -> list[tuple[str, dict]]:
    cls = type(module).__name__
    if cls == "Linear":
        return [("matmul", {}), ("add", {})] if module.bias is not None else [("matmul", {})]
    if cls in ("Bilinear",):
        return [("bilinear", {})]
    m = re.fullmatch(r"(Conv|ConvTranspose|MaxPool|AvgPool|AdaptiveAvgPool|AdaptiveMaxPool)([123])d", cls)
    if m:
        return [(_snake(m.group(1)) + f"{m.group(2)}d", {})]
    if cls not in _MODULES:
        return [(_snake(cls), {})]
    name = _MODULES[cls]
    if name is None:
        return []
    if name in ("softmax", "log_softmax") and getattr(module, "dim", None) is not None:
        return [(name, {"dim": norm_dim(module.dim, rank)})]
    if name == "gelu" and getattr(module, "approximate", "none") == "tanh":
        return [(name, {"approximate": "tanh"})]
    return [(name, {})]


def canonical_ops(node: Any, gm: Any, shape_of: Callable[[Any], Any]) -> "list[tuple[str, dict]] | str":
    """Canonical ops for one call_module / call_function / call_method node."""
    first = node.args[0] if node.args else None
    shape = shape_of(first) if _is_node(first) else None
    rank = len(shape) if shape is not None else None
    if node.op == "call_module":
        return _module_ops(gm.get_submodule(node.target), node, rank)
    target = node.target
    if node.op == "call_method":
        raw = target
    elif getattr(target, "_schema", None) is not None:
        raw = target._schema.name.split("::")[-1]
    else:
        raw = getattr(target, "__name__", str(target))
    name = normalise_name(raw)
    if name in _CONST:
        return "const"
    if name in _LAYOUT:
        return []
    if name in ("max", "min"):
        other = _arg(node, 1, "dim") if "dim" in node.kwargs else _arg(node, 1, "other")
        if "dim" not in node.kwargs and (_is_node(other) or "other" in node.kwargs):
            return [("maximum" if name == "max" else "minimum", {})]
    if name in _DIM_OPS:
        return [_with_dim(name, node, rank)]
    if name in ("matmul", "mm", "bmm"):
        attrs = {flag: "" for flag, pos in (("ta", 0), ("tb", 1))
                 if _swaps_last_two(node.args[pos] if len(node.args) > pos else None, shape_of)}
        ranks = [len(s) if s is not None else None
                 for s in (shape_of(a) if _is_node(a) else None for a in node.args[:2])]
        if name in ("matmul", "mm") and len(ranks) == 2 and None not in ranks and ranks != [2, 2]:
            attrs["ranks"] = "x".join(map(str, ranks))      # a batched, broadcast or vector product: a
        return [(name, attrs)]                               # 2-D GEMM skill does not take it
    if name == "linear":
        bias = _arg(node, 2, "bias")
        return [("matmul", {}), ("add", {})] if bias is not None else [("matmul", {})]
    if name == "addmm":
        return [("matmul", {}), ("add", {})]
    if name == "baddbmm":
        return [("bmm", {}), ("add", {})]
    if name in ("convolution", "conv_transpose"):
        w = _arg(node, 1, "weight")
        wshape = shape_of(w) if _is_node(w) else None
        transposed = bool(_arg(node, 6, "transposed", False))
        n = f"{len(wshape) - 2}d" if wshape else ""
        return [(("conv_transpose" if transposed else "conv") + n, {})]
    if name == "gelu":
        return [("gelu", {"approximate": "tanh"} if _arg(node, 1, "approximate") == "tanh" else {})]
    if name == "scaled_dot_product_attention":
        attrs = {}
        if _arg(node, 5, "is_causal", False) is True:
            attrs["causal"] = ""
        if _arg(node, 3, "attn_mask") is not None:
            attrs["mask"] = ""
        return [(name, attrs)]
    return [(name, {})]


# --------------------------------------------------------------------------- compositions
def _norm_out(name: str) -> Callable[[dict], tuple[str, dict]]:
    return lambda b: (name, {} if b.get("D", "-1") == "-1" else {"dim": b["D"]})


def _dim_out(name: str) -> Callable[[dict], tuple[str, dict]]:
    return lambda b: (name, {"dim": b["D"]} if "D" in b else {})


def _fixed(name: str, attrs: dict | None = None) -> Callable[[dict], tuple[str, dict]]:
    return lambda b: (name, dict(attrs or {}))


_SQ = "pow|mul"
# (template, output). Longest first; "a|b" alternatives, "[dim=$D]" binds D,
# "[]" requires no attributes, "@param" requires a parameter operand.
COMPOSITIONS: list[tuple[list[str], Callable[[dict], tuple[str, dict]]]] = sorted([
    ([_SQ, "mean[dim=$D]", "add", "sqrt", "div", "mul@param"], _norm_out("rms_norm")),
    ([_SQ, "mean[dim=$D]", "add", "rsqrt", "mul", "mul@param"], _norm_out("rms_norm")),
    ([_SQ, "mean[dim=$D]", "add", "sqrt", "div"], _norm_out("rms_norm")),
    ([_SQ, "mean[dim=$D]", "add", "rsqrt", "mul"], _norm_out("rms_norm")),
    (["mean[dim=$D]", "sub", _SQ, "mean[dim=$D]", "add", "sqrt", "div", "mul@param", "add@param"],
     _norm_out("layer_norm")),
    (["mean[dim=$D]", "sub", _SQ, "mean[dim=$D]", "add", "sqrt", "div"], _norm_out("layer_norm")),
    (["max[dim=$D]|amax[dim=$D]", "sub", "exp", "sum[dim=$D]", "div"], _dim_out("softmax")),
    (["exp", "sum[dim=$D]", "div"], _dim_out("softmax")),
    (["max[dim=$D]|amax[dim=$D]", "sub", "exp", "sum[dim=$D]", "log", "sub"], _dim_out("log_softmax")),
    (["logsumexp[dim=$D]", "sub"], _dim_out("log_softmax")),
    (["mul", "pow", "mul", "add", "mul", "tanh", "add", "mul"], _fixed("gelu", {"approximate": "tanh"})),
    (["mul", "div", "erf", "add", "mul"], _fixed("gelu")),
    (["matmul|bmm", "mul|div", "softmax[dim=-1]", "matmul|bmm"], _fixed("scaled_dot_product_attention")),
    (["matmul|bmm", "mul|div", "masked_fill", "softmax[dim=-1]", "matmul|bmm"],
     _fixed("scaled_dot_product_attention", {"mask": ""})),
    (["sub", "pow", "mean[]"], _fixed("mse_loss")),
], key=lambda t: -len(t[0]))


def _element_matches(element: str, op: Op, bind: dict[str, str]) -> bool:
    need_param = element.endswith("@param")
    element = element.removesuffix("@param")
    if need_param and "param" not in op.inputs:
        return False
    for alt in element.split("|"):
        name, _, rest = alt.partition("[")
        if name != op.name:
            continue
        if not rest:
            return True
        if rest == "]":
            if not op.attrs:
                return True
            continue
        wanted = dict(kv.split("=", 1) for kv in rest.rstrip("]").split(","))
        trial = dict(bind)
        ok = True
        for key, value in wanted.items():
            have = op.attrs.get(key)
            if have is None:
                ok = False
            elif value.startswith("$"):
                ok = trial.setdefault(value[1:], have) == have
            else:
                ok = have == value
            if not ok:
                break
        if ok:
            bind.update(trial)
            return True
    return False


def compose(ops: list[Op], outputs: set[int]) -> list[Op]:
    """Fold known compositions into single ops until none applies."""
    ops = list(ops)
    changed = True
    while changed:
        changed = False
        users: dict[int, set[int]] = {op.id: set() for op in ops}
        for op in ops:
            for r in op.inputs:
                if isinstance(r, int) and r in users:
                    users[r].add(op.id)
        for start in range(len(ops)):
            for template, make in COMPOSITIONS:
                window = ops[start:start + len(template)]
                if len(window) < len(template):
                    continue
                bind: dict[str, str] = {}
                if not all(_element_matches(e, op, bind) for e, op in zip(template, window)):
                    continue
                ids = {op.id for op in window}
                inner = window[:-1]
                if any(not users[op.id] or not users[op.id] <= ids or op.id in outputs for op in inner):
                    continue                       # an intermediate escapes: not this composition
                name, attrs = make(bind)
                ins: list[Any] = []
                for op in window:
                    for r in op.inputs:
                        if r not in ids and r not in ins:
                            ins.append(r)
                folded = Op(id=window[-1].id, name=name, attrs=attrs, inputs=ins)
                ops[start:start + len(template)] = [folded]
                changed = True
                break
            if changed:
                break
    return ops
