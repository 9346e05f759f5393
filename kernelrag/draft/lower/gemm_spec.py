"""What a GEMM / BMM kernel is asked to compute: the spec the GEMM, conv and pooling
templates render from, and the code snippets they share.

A spec names, without any shapes (the launcher sees those at run time):

* the **prologue** of each operand: a unary elementwise chain on the loaded tile
  (``relu(A) @ B``) and a triangular structure (``torch.tril(A) @ B``), which both
  masks the tile and narrows the K range a program walks;
* the **epilogue**: an elementwise chain on the fp32 accumulator, with extra tensors
  (bias, residual, per-row scales) broadcast to the output and read through their
  strides, so a bias [N] is a zero-stride view, not a copy;
* an optional **row reduction** across N (sum, mean, max, min, logsumexp, softmax,
  log_softmax) and an optional triangular mask of the output (``torch.tril(A @ B)``).

Epilogue and prologue steps are ``Step(op, args, kwargs)`` with args naming ``acc``
(the value so far), ``e0``, ``e1``... (the extra tensors) or numbers; each op is
rendered with the elementwise emitter's expression builders (``codegen.OPS``), so a
chain fused after a GEMM is written the way the same chain is written on its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernelrag.draft.codegen import OPS, _lit

REDUCTIONS = ("sum", "mean", "max", "min", "logsumexp", "softmax", "log_softmax")
PRECISIONS = ("ieee", "tf32x3")


class LoweringError(ValueError):
    """The requested kernel is outside what the template renders (message says why)."""


@dataclass(frozen=True)
class Step:
    op: str                                  # a name in codegen.OPS
    args: tuple = ()                         # "acc", "e0".., or numbers
    kwargs: tuple = ()                       # ((name, value), ...)


@dataclass(frozen=True)
class Tri:
    kind: str                                # "tril" | "triu"
    diagonal: int = 0


@dataclass(frozen=True)
class GemmSpec:
    name: str = "gemm"
    a_prologue: tuple[Step, ...] = ()
    b_prologue: tuple[Step, ...] = ()
    a_tri: Tri | None = None
    b_tri: Tri | None = None
    epilogue: tuple[Step, ...] = ()
    n_extra: int = 0                         # extra tensors e0.. read by the epilogue
    reduce: str | None = None                # one of REDUCTIONS, across N
    out_tri: Tri | None = None               # applied last (after the epilogue)
    vector: bool = False                     # also render the matrix-vector kernel (N == 1)
    doc: str = ""

    def __post_init__(self):
        if self.reduce is not None and self.reduce not in REDUCTIONS:
            raise LoweringError(f"row reduction {self.reduce!r} is not one of {', '.join(REDUCTIONS)}")
        if self.reduce and self.out_tri:
            raise LoweringError("a triangular output mask and a row reduction cannot both close a GEMM")
        for tri in (self.a_tri, self.b_tri, self.out_tri):
            if tri is not None and tri.kind not in ("tril", "triu"):
                raise LoweringError(f"triangular structure {tri.kind!r} is not tril or triu")
        for step in self.a_prologue + self.b_prologue + self.epilogue:
            if step.op not in OPS:
                raise LoweringError(f"op {step.op!r} is not in the elementwise emitter: {', '.join(sorted(OPS))}")
        used = {a for s in self.epilogue for a in s.args if isinstance(a, str) and a.startswith("e")}
        bad = sorted(u for u in used if not u[1:].isdigit() or int(u[1:]) >= self.n_extra)
        if bad:
            raise LoweringError(f"epilogue reads {bad} but the spec has {self.n_extra} extra tensor(s)")


def chain_code(steps: tuple[Step, ...], var: str, indent: str) -> str:
    """Lines that apply ``steps`` to ``var`` in place (``var = <expr>`` per step)."""
    lines = []
    for step in steps:
        args = [var if a == "acc" else a if isinstance(a, str) else _lit(a) for a in step.args]
        kwargs = {k: (_lit(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "approximate"
                      else v) for k, v in step.kwargs}
        lines.append(f"{indent}{var} = {OPS[step.op](args, kwargs)}\n")
    return "".join(lines)


def tri_keep(tri: Tri, rows: str, cols: str) -> str:
    """Boolean [rows, cols] expression: True where a tril/triu tensor keeps its value."""
    op = "<=" if tri.kind == "tril" else ">="
    return f"({cols}[None, :] {op} {rows}[:, None] + {tri.diagonal})"


def k_range_code(spec: GemmSpec, indent: str) -> str:
    """Narrow [k_lo, k_hi) to where neither operand is structurally zero, and skip
    output tiles that a triangular output mask zeroes whole (no K work at all)."""
    out = []
    if spec.a_tri is not None:           # A[i, k] != 0 only for k <= i + d (tril) or k >= i + d (triu)
        d = spec.a_tri.diagonal
        out.append(f"k_hi = min(k_hi, m_last + {d} + 1)" if spec.a_tri.kind == "tril"
                   else f"k_lo = max(k_lo, m_first + {d})")
    if spec.b_tri is not None:           # B[k, j] != 0 only for j <= k + d (tril) or j >= k + d (triu)
        d = spec.b_tri.diagonal
        out.append(f"k_lo = max(k_lo, n_first - {d})" if spec.b_tri.kind == "tril"
                   else f"k_hi = min(k_hi, n_last - {d} + 1)")
    if spec.out_tri is not None:         # a tile wholly above (tril) or below (triu) the diagonal is zero
        d = spec.out_tri.diagonal
        empty = f"n_first > m_last + {d}" if spec.out_tri.kind == "tril" else f"n_last < m_first + {d}"
        out.append(f"k_hi = tl.where({empty}, k_lo, k_hi)")
    return "".join(f"{indent}{line}\n" for line in out)


def extra_args(n: int) -> str:
    return "".join(f"    e{i}_ptr,  # extra epilogue tensor {i}, broadcast to [B0, B1, M, N] through its strides\n"
                   for i in range(n))


def extra_strides(n: int) -> str:
    return "".join(f"    s_e{i}_0, s_e{i}_1, s_e{i}_m, s_e{i}_n,  # element strides of e{i} (0 = broadcast)\n"
                   for i in range(n))


def epilogue_code(spec: GemmSpec, indent: str) -> str:
    """Load the extra tensors at the tile, apply the chain to ``acc``, then the output mask."""
    lines = []
    for i in range(spec.n_extra):
        lines.append(f"{indent}e{i} = tl.load(e{i}_ptr + b0.to(tl.int64) * s_e{i}_0 + b1.to(tl.int64) * s_e{i}_1"
                     f" + offs_m[:, None] * s_e{i}_m + offs_n[None, :] * s_e{i}_n, mask=out_ok, other=0.0)"
                     ".to(tl.float32)\n")
    code = "".join(lines) + chain_code(spec.epilogue, "acc", indent)
    if spec.out_tri is not None:
        code += f"{indent}acc = tl.where({tri_keep(spec.out_tri, 'offs_m', 'offs_n')}, acc, 0.0)\n"
    return code


def tile_reduce_code(op: str, indent: str) -> str:
    """Reduce ``acc`` [BLOCK_M, BLOCK_N] across N (columns past N masked out by ``n_ok``) into
    ``red`` [BLOCK_M]; softmax and log_softmax rewrite ``acc`` instead."""
    i = indent
    if op in ("sum", "mean"):
        div = " / N" if op == "mean" else ""
        return f"{i}red = tl.sum(tl.where(n_ok[None, :], acc, 0.0), axis=1){div}\n"
    if op in ("max", "min"):
        fill = "float('-inf')" if op == "max" else "float('inf')"
        return f"{i}red = tl.{op}(tl.where(n_ok[None, :], acc, {fill}), axis=1)\n"
    body = (f"{i}v = tl.where(n_ok[None, :], acc, float('-inf'))\n"
            f"{i}row_max = tl.max(v, axis=1)\n"
            f"{i}row_max = tl.where(row_max == float('-inf'), 0.0, row_max)  # an all--inf row stays finite\n"
            f"{i}p = tl.exp(v - row_max[:, None])\n"
            f"{i}row_sum = tl.sum(p, axis=1)\n")
    if op == "logsumexp":
        return body + f"{i}red = row_max + tl.log(row_sum)\n"
    if op == "softmax":
        return body + f"{i}acc = p / row_sum[:, None]\n"
    return body + f"{i}acc = v - row_max[:, None] - tl.log(row_sum)[:, None]\n"


@dataclass
class Rendered:
    """A rendered template: source text (kernels + launcher), and what it says of itself."""

    source: str
    entry: str                                  # the launcher's name
    transformations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
