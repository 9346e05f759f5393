"""Op patterns: the canonical name of what a KernelBench task computes.

A pattern is the task's ops in dataflow order joined by ``>``, lower-case
aten/functional names with key attributes in brackets::

    matmul>add>relu          nn.Linear (with bias) then ReLU
    softmax[dim=-1]          torch.softmax(x, dim=1) on a 2-D input
    sum[dim=1]               x.sum(dim=1) on a 3-D input
    rms_norm                 x / sqrt(mean(x**2, -1) + eps) (a known composition)

Dim rule (one rule for every op with a ``dim``): when the input's rank is
known, the last dim is written ``-1`` and every other dim as its non-negative
index; a tuple of dims is written sorted, ``sum[dim=(1,2)]``. When the rank is
unknown (no shapes could be propagated) the dim is kept as written.

Layout ops (view, reshape, getitem, size, contiguous, transpose, permute, ...)
and dropout are dropped. Ops that depend only on parameters or constants (a
causal mask built in ``forward``) are dropped too.

``kernelrag.patterns.trace.op_pattern`` traces a task with torch.fx on the meta
device (torch.export when fx fails); everything here is plain string functions.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from kernelrag.errors import TaskError

CATEGORIES = ("elementwise", "reduction", "normalization", "softmax", "matmul", "conv",
              "attention", "scan", "loss", "pooling", "fused")

# op base name -> category; ops not listed count as "fused" (unclassified work).
_OP_CATEGORY: dict[str, str] = {}
for _cat, _names in {
    "elementwise": "add sub mul div relu relu6 gelu sigmoid tanh exp exp2 log log2 log1p expm1 "
                   "sqrt rsqrt pow abs neg clamp hardtanh leaky_relu silu softplus elu selu celu "
                   "hardsigmoid hardswish mish softsign logsigmoid where maximum minimum erf "
                   "reciprocal sign sin cos floor ceil round lerp addcmul masked_fill tril triu "
                   "threshold prelu glu identity",
    "reduction": "sum mean amax amin max min prod argmax argmin var std norm logsumexp all any "
                 "count_nonzero cosine_similarity",
    "normalization": "layer_norm rms_norm batch_norm group_norm instance_norm normalize "
                     "local_response_norm",
    "softmax": "softmax log_softmax",
    "matmul": "matmul bmm einsum",
    "conv": "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d",
    "attention": "scaled_dot_product_attention multi_head_attention",
    "scan": "cumsum cumprod cummax cummin logcumsumexp",
    "loss": "cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss kl_div "
            "binary_cross_entropy binary_cross_entropy_with_logits triplet_margin_loss "
            "margin_ranking_loss hinge_embedding_loss cosine_embedding_loss",
    "pooling": "max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d "
               "adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d "
               "adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d",
}.items():
    for _name in _names.split():
        _OP_CATEGORY[_name] = _cat

_SIZE_CLASSES = ((1 << 16, "tiny"), (1 << 20, "small"), (1 << 24, "medium"), (1 << 28, "large"))


@dataclass(frozen=True)
class OpPattern:
    """What a task computes: its signature, ops, category and the shapes it runs at."""

    signature: str                       # "matmul>add>relu"; "unknown" when known is False
    ops: list[str] = field(default_factory=list)
    category: str = "fused"              # one of CATEGORIES, or "unknown"
    regime: dict[str, Any] = field(default_factory=dict)   # input_shapes, dtypes, output_shape, size_class
    known: bool = True
    reason: str = ""                     # why the pattern is unknown
    traced_with: str = ""                # "fx" | "export" | "" (given as a signature)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "OpPattern":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def __str__(self) -> str:
        return self.signature


# --------------------------------------------------------------------------- strings
def split_ops(signature: str) -> list[str]:
    """``"matmul>add>relu"`` -> ``["matmul", "add", "relu"]`` (brackets kept whole)."""
    out, depth, cur = [], 0, ""
    for ch in signature.strip():
        depth += (ch in "[(") - (ch in "])")
        if ch == ">" and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def base_name(op: str) -> str:
    """``"softmax[dim=-1]"`` -> ``"softmax"``."""
    return op.split("[", 1)[0]


def op_attrs(op: str) -> dict[str, str]:
    """``"sum[dim=(1,2),keepdim]"`` -> ``{"dim": "(1,2)", "keepdim": ""}``."""
    if "[" not in op:
        return {}
    inner = op[op.index("[") + 1: op.rindex("]")]
    out, depth, cur = {}, 0, ""
    for ch in inner + ",":
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            if cur:
                key, _, value = cur.partition("=")
                out[key.strip()] = value.strip()
            cur = ""
        else:
            cur += ch
    return out


def format_op(name: str, attrs: dict[str, str] | None = None) -> str:
    if not attrs:
        return name
    inner = ",".join(k if v == "" else f"{k}={v}" for k, v in attrs.items())
    return f"{name}[{inner}]"


def category_of(ops: str | list[str]) -> str:
    """Category of a pattern from its ops (a signature string or a list of ops).

    One op: that op's category (ops not in the table count as "fused"). Several
    ops (after known compositions are folded): "fused", the kind of work
    KernelBench's level-2 tasks are, e.g. ``matmul>add>relu``.
    """
    ops = split_ops(ops) if isinstance(ops, str) else list(ops)
    if len(ops) != 1:
        return "fused" if ops else "elementwise"
    return _OP_CATEGORY.get(base_name(ops[0]), "fused")


def heavy_ops(pattern: "str | OpPattern") -> set[str]:
    """Base names of the pattern's ops that are not elementwise (matmul, softmax, ...)."""
    sig = pattern.signature if isinstance(pattern, OpPattern) else str(pattern)
    return {base_name(o) for o in split_ops(sig) if _OP_CATEGORY.get(base_name(o)) != "elementwise"}


def slug(pattern: "str | OpPattern") -> str:
    """Folder name of a pattern: its op names joined by ``_``, attributes dropped.

    ``matmul>add>relu`` -> ``matmul_add_relu``; ``softmax[dim=-1]`` -> ``softmax``;
    ``gelu[approximate=tanh]`` -> ``gelu`` (one folder per op family; the skill
    name inside tells the variants apart).
    """
    sig = pattern.signature if isinstance(pattern, OpPattern) else str(pattern)
    out = "_".join(base_name(o) for o in split_ops(sig.lower()))
    out = re.sub(r"[^a-z0-9_]+", "_", out)
    return out.strip("_") or "unknown"


def similarity(p1: "str | OpPattern", p2: "str | OpPattern") -> float:
    """Similarity in [0, 1] of two patterns.

    0.5 x Jaccard of the full ops (attributes included) + 0.3 x Jaccard of the op
    names + 0.2 if both have the same category. Identical signatures give 1.0.
    """
    s1 = p1.signature if isinstance(p1, OpPattern) else str(p1)
    s2 = p2.signature if isinstance(p2, OpPattern) else str(p2)
    if s1 == s2:
        return 1.0
    o1, o2 = split_ops(s1), split_ops(s2)
    if not o1 or not o2:
        return 0.0

    def jaccard(a: set, b: set) -> float:
        return len(a & b) / len(a | b) if a | b else 0.0

    full = jaccard(set(o1), set(o2))
    names = jaccard({base_name(o) for o in o1}, {base_name(o) for o in o2})
    c1 = p1.category if isinstance(p1, OpPattern) else category_of(o1)
    c2 = p2.category if isinstance(p2, OpPattern) else category_of(o2)
    return round(0.5 * full + 0.3 * names + 0.2 * (c1 == c2), 4)


def size_class(numel: int) -> str:
    """Coarse size class of the largest tensor a task touches."""
    for limit, name in _SIZE_CLASSES:
        if numel < limit:
            return name
    return "huge"


def from_signature(signature: str) -> OpPattern:
    """An OpPattern for a signature typed by a person (no shapes known)."""
    ops = split_ops(signature)
    if not ops:
        raise TaskError("empty op pattern; give ops joined by '>', e.g. 'matmul>add>relu'")
    return OpPattern(signature=">".join(ops), ops=ops, category=category_of(ops))


def unknown(reason: str, regime: dict[str, Any] | None = None) -> OpPattern:
    return OpPattern(signature="unknown", ops=[], category="unknown", regime=regime or {},
                     known=False, reason=reason)
