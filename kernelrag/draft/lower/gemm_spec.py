"""What a GEMM / BMM kernel is asked to compute: the spec the GEMM, conv and pooling
templates render from, and the code snippets they share.

A spec names, without any shapes (the launcher sees those at run time):

* the **prologue** of each operand: a unary elementwise chain on the loaded tile
  (``relu(A) @ B``) and a triangular structure (``torch.tril(A) @ B``), which both
  masks the tile and narrows the K range a program walks;
* the **epilogue**: an elementwise chain on the fp32 accumulator, with extra tensors
  (bias, residual, per-row scales) broadcast to the output and read through their
  strides, so a bias [N] is a zero-stride view, not a copy;
* row reductions across N inside the epilogue (sum, mean, max, min, logsumexp,
  softmax, log_softmax, and elementwise ops around them) when one tile spans N,
  and an optional triangular mask of the output (``torch.tril(A @ B)``).

The epilogue is text: lines computing ``acc`` from ``acc`` (the fp32 tile), the
extra tensors ``e0``, ``e1``..., the numbers ``s0``, ``s1``... and ``n_ok`` / ``N``. The lowering writes it with the
elementwise emitter (``lower.exprs``) from the traced nodes; ``steps_code`` and
``row_reduce_code`` write it from ``Step(op, args, kwargs)`` chains (args naming
``acc``, ``e0``.. or numbers), so a chain fused after a GEMM is written the way the
same chain is written on its own. Prologues are ``Step`` chains on the operand tile.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernelrag.draft.codegen import OPS, _lit
from kernelrag.draft.lower.host import used_helpers

REDUCTIONS = ("sum", "mean", "max", "min", "logsumexp", "softmax", "log_softmax")
PRECISIONS = ("tf32x3", "bf16x6", "ieee")     # the fp32 dot paths a spec may ask for (gemm.py documents them)


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
    epilogue: str = ""                       # lines computing ``acc`` from ``acc``, e0.. (see epilogue_code)
    extra_rows: tuple[bool, ...] = ()        # per extra tensor: True when constant along N (a row value)
    extra_ints: tuple[bool, ...] = ()        # per extra tensor: True when it holds integers (class indices)
    whole_rows: bool = False                 # the epilogue reduces across N: one tile spans all of N
    row_out: bool = False                    # the result is one value per row, [.., M, 1]
    row_partials: int = 0                    # > 0: the epilogue ends in partials p0.. of reductions across
                                             # a wide N, one per row and tile; ``combine`` finishes the rows
    combine: str = ""                        # the kernel combining them (gemm_rows.combine_kernel)
    squeeze_rows: bool = False               # ... returned as [.., M]
    out_tri: Tri | None = None               # applied last (after the epilogue)
    vector: bool = False                     # also render the matrix-vector kernel (N == 1)
    n_scalar: int = 0                        # numbers the epilogue reads (s0, s1..), passed by value
    doc: str = ""
    precision: str = "tf32x3"                # fp32 on CUDA: "tf32x3", "bf16x6" or "ieee" (always ieee on CPU)

    @property
    def n_extra(self) -> int:
        return len(self.extra_rows)

    def __post_init__(self):
        if self.row_out and self.out_tri:
            raise LoweringError("a triangular output mask and a row reduction cannot both close a GEMM")
        if self.row_out and not (self.whole_rows or self.row_partials):
            raise LoweringError("a per-row result needs whole rows in the tile (whole_rows=True) or row partials")
        if self.row_partials and (self.whole_rows or self.out_tri or self.vector or not self.combine):
            raise LoweringError("row partials need a combine kernel, and no whole rows, output mask or vector form")
        for tri in (self.a_tri, self.b_tri, self.out_tri):
            if tri is not None and tri.kind not in ("tril", "triu"):
                raise LoweringError(f"triangular structure {tri.kind!r} is not tril or triu")
        if self.precision not in PRECISIONS:
            raise LoweringError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        for step in self.a_prologue + self.b_prologue:
            if step.op not in OPS:
                raise LoweringError(f"op {step.op!r} is not in the elementwise emitter: {', '.join(sorted(OPS))}")


def steps_code(steps: tuple[Step, ...]) -> str:
    """An epilogue from a chain of steps on ``acc`` (the standalone form of the template)."""
    return chain_code(steps, "acc", "")


def row_reduce_code(op: str) -> str:
    """Epilogue lines reducing ``acc`` [BLOCK_M, BLOCK_N] across N (columns past N masked
    by ``n_ok``): sum, mean, max, min and logsumexp leave one value per row ([BLOCK_M, 1]);
    softmax and log_softmax rewrite the tile."""
    if op not in REDUCTIONS:
        raise LoweringError(f"row reduction {op!r} is not one of {', '.join(REDUCTIONS)}")
    if op in ("sum", "mean"):
        return f"acc = tl.sum(tl.where(n_ok[None, :], acc, 0.0), axis=1)[:, None]{' / N' if op == 'mean' else ''}\n"
    if op in ("max", "min"):
        fill = "float('-inf')" if op == "max" else "float('inf')"
        return f"acc = tl.{op}(tl.where(n_ok[None, :], acc, {fill}), axis=1)[:, None]\n"
    body = ("v = tl.where(n_ok[None, :], acc, float('-inf'))\n"
            "row_max = tl.max(v, axis=1)[:, None]\n"
            "row_max = tl.where(row_max == float('-inf'), 0.0, row_max)  # an all -inf row stays finite\n"
            "row_sum = tl.sum(tl.exp(v - row_max), axis=1)[:, None]\n")
    if op == "logsumexp":
        return body + "acc = row_max + tl.log(row_sum)\n"
    if op == "softmax":
        return body + "acc = tl.exp(v - row_max) / row_sum\n"
    return body + "acc = v - row_max - tl.log(row_sum)\n"


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


def scalar_args(n: int) -> str:
    return "".join(f"    s{i},  # epilogue number {i}, passed by value (a scale read at run time)\n" for i in range(n))


def extra_strides(n: int) -> str:
    return "".join(f"    s_e{i}_0, s_e{i}_1, s_e{i}_m, s_e{i}_n,  # element strides of e{i} (0 = broadcast)\n"
                   for i in range(n))


def epilogue_code(spec: GemmSpec, indent: str) -> str:
    """Load the extra tensors at the tile (a row value as [BLOCK_M, 1]), run the epilogue
    on ``acc``, then the output's triangular mask."""
    lines = []
    for i, row in enumerate(spec.extra_rows):
        cols = "" if row else f" + offs_n[None, :] * s_e{i}_n"
        mask = "m_ok[:, None]" if row else "out_ok"
        integer = i < len(spec.extra_ints) and spec.extra_ints[i]      # class indices stay integers
        tail = "other=0)" if integer else "other=0.0).to(tl.float32)"
        lines.append(f"{indent}e{i} = tl.load(e{i}_ptr + b0.to(tl.int64) * s_e{i}_0 + b1.to(tl.int64) * s_e{i}_1"
                     f" + offs_m[:, None] * s_e{i}_m{cols}, mask={mask}, {tail}\n")
    code = "".join(lines) + "".join(f"{indent}{line}\n" for line in spec.epilogue.splitlines() if line.strip())
    if spec.out_tri is not None:
        code += f"{indent}acc = tl.where({tri_keep(spec.out_tri, 'offs_m', 'offs_n')}, acc, 0.0)\n"
    return code


@dataclass
class Rendered:
    """A rendered template: source text (kernels + launcher), and what it says of itself."""

    source: str
    entry: str                                  # the launcher's name
    transformations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)   # kernels and helpers, each once per emitted module
    launcher: str = ""                          # the launcher's text (``source`` holds it after the parts)


IMPORTS = "import torch\nimport triton\nimport triton.language as tl\n\n\n"


def rendered(parts: list[str], launcher: str, entry: str, transformations: list[str],
             notes: list[str] | None = None) -> Rendered:
    """A standalone module (imports, parts, launcher) that also keeps its pieces apart, so a
    lowering emits shared helpers (tile tables, ``pick_tile``) once per module."""
    parts = [p.strip("\n") + "\n" for p in parts]
    helpers = [h + "\n" for h in used_helpers([*parts, launcher])]
    source = IMPORTS + "\n\n".join(helpers + parts) + "\n\n" + launcher.strip("\n") + "\n"
    return Rendered(source, entry, transformations, notes or [], parts, launcher.strip("\n") + "\n")
