"""Matrix products, convolutions and pooling lowered into the IR nodes the GEMM, conv and
pool templates place (``Decomposer.function`` and ``Decomposer.module`` look here too).

IR nodes made here:

  matmul   inputs a, b (torch.matmul's broadcasting)     args: a_tri, b_tri (None or (kind, diagonal))
  tri      tril / triu of a value                         args: form ("tril" | "triu"), diagonal
  diag     a 1-D vector as a diagonal matrix (only ever consumed by matmul, as a row or column scaling)
  conv     inputs x, w                                    args: dims, kernel_size, stride, padding, dilation,
                                                                groups, transposed, output_padding
  pool     input x                                        args: mode ("max" | "avg"), dims, kernel_size, stride, padding,
                                                                dilation, ceil_mode, count_include_pad,
                                                                divisor_override

A transpose is a ``view`` (a stride swap the GEMM reads as it is), ``nn.Linear`` is
``x @ W.t() + b``, a bias is an elementwise add the template fuses as its epilogue,
``torch.diag(v) @ B`` is ``v[:, None] * B`` (M * N work instead of M * N * K) and a
``tril`` / ``triu`` operand becomes structure the GEMM uses to skip its zero half.
"""
from __future__ import annotations

from typing import Any

from kernelrag.draft.lower.ir import FLOAT, broadcast
from kernelrag.draft.lower.values import IrRef, Unsupported, _arg


def _t(x: Any, what: str) -> IrRef:
    if not isinstance(x, IrRef):
        raise Unsupported(f"{what} expects a tensor, got {x!r}")
    return x


def _matmul_shape(a: tuple, b: tuple) -> tuple:
    if not a or not b:
        raise Unsupported("matmul of a 0-d tensor is not lowered")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise Unsupported(f"matmul of shapes {a} and {b}: inner sizes differ")
    out = broadcast(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(b) == 1:
        out = out[:-1]
    if len(a) == 1:
        out = out[:-2] + out[-1:] if len(b) > 1 else out[:-1]
    return out


def matmul(dec, a: IrRef, b: IrRef, origin: str = "matmul") -> IrRef:
    g = dec.g
    if g[a.id].op == "diag":                  # diag(v) @ B: row i of B scaled by v[i]
        v = IrRef(g[a.id].inputs[0])
        col = dec.view(v, "{0}.unsqueeze(-1)", dec.shape(v.id) + (1,), "diag")
        return dec.ew("mul", col, b, origin="diag_matmul")
    if g[b.id].op == "diag":                  # A @ diag(v): column j of A scaled by v[j]
        return dec.ew("mul", a, IrRef(g[b.id].inputs[0]), origin="matmul_diag")
    tris = {}
    for key, ref in (("a_tri", a), ("b_tri", b)):
        node = g[ref.id]
        tris[key] = (node.args["form"], node.args["diagonal"]) if node.op == "tri" and len(node.shape) >= 2 else None
    a_in = IrRef(g[a.id].inputs[0]) if tris["a_tri"] else a
    b_in = IrRef(g[b.id].inputs[0]) if tris["b_tri"] else b
    shape = _matmul_shape(dec.shape(a.id), dec.shape(b.id))
    return IrRef(g.add("matmul", [a_in.id, b_in.id], shape, FLOAT, origin, **tris))


def op_matmul(dec, args, kwargs):
    return matmul(dec, _t(args[0], "matmul"), _t(args[1], "matmul"))


def op_bmm(dec, args, kwargs):
    return matmul(dec, _t(args[0], "bmm"), _t(args[1], "bmm"), "bmm")


def linear(dec, x: IrRef, w: IrRef, b: IrRef | None) -> IrRef:
    n, k = dec.shape(w.id)
    out = matmul(dec, x, dec.view(w, "{0}.t()", (k, n), "linear"), "linear")   # (N, K) weight: K-major already
    return dec.ew("add", out, b, origin="linear") if b is not None else out


def Linear(dec, mod, path, args, kwargs):
    bias = dec.param(f"{path}.bias") if mod.bias is not None else None
    return linear(dec, _t(args[0], "Linear"), dec.param(f"{path}.weight"), bias)


def op_getattr(dec, args, kwargs):
    """``A.T`` / ``A.mT`` (traced as getattr): a transposed view, which the GEMM reads through its
    strides; ``.values`` / ``.indices`` of ``torch.max(x, dim)`` or ``torch.min(x, dim)``, which
    decompose to a (values, indices) pair."""
    if isinstance(args[0], tuple) and len(args[0]) == 2 and args[1] in ("values", "indices"):
        return args[0][0 if args[1] == "values" else 1]
    x, attr = _t(args[0], "getattr"), args[1]
    shape = dec.shape(x.id)
    if attr == "T":
        return dec.view(x, "{0}.T", tuple(reversed(shape)), "transpose")
    if attr == "mT" and len(shape) >= 2:
        return dec.view(x, "{0}.mT", shape[:-2] + (shape[-1], shape[-2]), "transpose")
    raise Unsupported(f"attribute .{attr} of a tensor is not lowered (only .T and .mT)")


def op_linear(dec, args, kwargs):
    return linear(dec, _t(args[0], "linear"), _t(_arg(args, kwargs, 1, "weight"), "linear"),
                  _arg(args, kwargs, 2, "bias"))


def op_addmm(dec, args, kwargs):
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    prod = matmul(dec, _t(args[1], "addmm"), _t(args[2], "addmm"), "addmm")
    prod = dec.ew("mul", prod, alpha, origin="addmm") if alpha != 1 else prod
    bias = dec.ew("mul", args[0], beta, origin="addmm") if beta != 1 else args[0]
    return dec.ew("add", prod, bias, origin="addmm") if beta != 0 else prod


op_baddbmm = op_addmm


def _tri(kind: str):
    def op(dec, args, kwargs):
        x = _t(args[0], kind)
        if len(dec.shape(x.id)) < 2:
            raise Unsupported(f"{kind} of a tensor with fewer than 2 dims")
        diagonal = int(_arg(args, kwargs, 1, "diagonal", 0))
        return IrRef(dec.g.add("tri", [x.id], dec.shape(x.id), FLOAT, kind, form=kind, diagonal=diagonal))
    return op


op_tril, op_triu = _tri("tril"), _tri("triu")


def op_diag(dec, args, kwargs):
    v = _t(args[0], "diag")
    if len(dec.shape(v.id)) != 1 or int(_arg(args, kwargs, 1, "diagonal", 0)) != 0:
        raise Unsupported("torch.diag is lowered only for a vector on the main diagonal (a row or column scaling)")
    n = dec.shape(v.id)[0]
    return IrRef(dec.g.add("diag", [v.id], (n, n), FLOAT, "diag"))


def op_einsum(dec, args, kwargs):
    """Einsums that are one (batched) matrix product: permute the operands to
    [batch.., free_a.., c] and [batch.., c, free_b], multiply, permute back."""
    eq = args[0].replace(" ", "")
    ops = [_t(x, "einsum") for x in (args[1:] if not isinstance(args[1], (list, tuple)) else args[1])]
    if "->" not in eq or len(ops) != 2 or "." in eq:
        raise Unsupported(f"einsum {eq!r}: only explicit two-operand equations without ... are lowered")
    lhs, out = eq.split("->")
    sa, sb = lhs.split(",")
    if len(set(sa)) != len(sa) or len(set(sb)) != len(sb) or len(set(out)) != len(out):
        raise Unsupported(f"einsum {eq!r}: repeated indices (traces, diagonals) are not lowered")
    contracted = [c for c in sa if c in sb and c not in out]
    batch = [c for c in out if c in sa and c in sb]
    free_a = [c for c in sa if c not in sb]
    free_b = [c for c in sb if c not in sa]
    if len(contracted) != 1 or len(free_b) > 1 or set(out) != set(batch + free_a + free_b) or not (free_a or batch):
        raise Unsupported(f"einsum {eq!r} is not a single matrix product (one contracted index, one free index in B)")
    c = contracted[0]
    a_order = batch + free_a + [c]
    b_order = batch + [c] + free_b
    a_perm = [sa.index(x) for x in a_order]
    b_perm = [sb.index(x) for x in b_order]
    sha, shb = dec.shape(ops[0].id), dec.shape(ops[1].id)
    a = ops[0] if a_perm == list(range(len(sa))) else dec.view(
        ops[0], f"{{0}}.permute({', '.join(map(str, a_perm))})", tuple(sha[i] for i in a_perm), "einsum")
    b = ops[1] if b_perm == list(range(len(sb))) else dec.view(
        ops[1], f"{{0}}.permute({', '.join(map(str, b_perm))})", tuple(shb[i] for i in b_perm), "einsum")
    if batch and len(free_a) > 1:             # B's batch dims must line up with A's: one size-1 dim per extra free dim
        extra = len(free_a) - 1
        shape = dec.shape(b.id)
        b = dec.view(b, "{0}" + ".unsqueeze(%d)" % len(batch) * extra,
                     shape[:len(batch)] + (1,) * extra + shape[len(batch):], "einsum")
    if not free_b:                            # a matrix-vector product: B is [batch.., c], made [batch.., c, 1]
        b = dec.view(b, "{0}.unsqueeze(-1)", dec.shape(b.id) + (1,), "einsum")
        result = matmul(dec, a, b, "einsum")
        result = dec.view(result, "{0}.squeeze(-1)", dec.shape(result.id)[:-1], "einsum")
    else:
        result = matmul(dec, a, b, "einsum")
    got = batch + free_a + free_b
    if got == list(out):
        return result
    perm = [got.index(x) for x in out]
    shape = dec.shape(result.id)
    return dec.view(result, f"{{0}}.permute({', '.join(map(str, perm))})", tuple(shape[i] for i in perm), "einsum")


def op_scaled_dot_product_attention(dec, args, kwargs):
    """softmax(q @ k^T * scale [+ mask]) @ v as two GEMMs: the softmax is the first one's
    epilogue while a row of scores fits one tile, else a row-wise pass between them."""
    from kernelrag.draft.lower.decompose_ops import op_softmax

    q, k, v = (_t(x, "scaled_dot_product_attention") for x in args[:3])
    mask = _arg(args, kwargs, 3, "attn_mask")
    if _arg(args, kwargs, 4, "dropout_p", 0.0) or _arg(args, kwargs, 5, "is_causal", False) \
            or kwargs.get("enable_gqa"):
        raise Unsupported("attention with dropout, is_causal or grouped-query heads is not lowered")
    if mask is not None and (not isinstance(mask, IrRef) or dec.g[mask.id].kind != FLOAT):
        raise Unsupported("attention with a boolean mask is not lowered (an additive float mask is)")
    shape = dec.shape(k.id)
    scale = kwargs.get("scale")
    if scale is None:          # 1/sqrt(head_dim) of the tensors at run time, not of the traced ones
        scale = IrRef(dec.g.add("scalar", [q.id], (), FLOAT, "attention", code="{0}.shape[-1] ** -0.5"))
    elif not isinstance(scale, IrRef):
        scale = float(scale)
    kt = dec.view(k, "{0}.transpose(-2, -1)", shape[:-2] + (shape[-1], shape[-2]), "attention")
    scores = dec.ew("mul", matmul(dec, q, kt, "attention"), scale, origin="attention")
    if mask is not None:
        scores = dec.ew("add", scores, mask, origin="attention")
    return matmul(dec, op_softmax(dec, [scores, -1], {}), v, "attention")


def _slice_code(part: Any) -> str | None:
    if part is Ellipsis:
        return "..."
    if part is None:
        return "None"
    if isinstance(part, slice) and all(v is None or isinstance(v, int) for v in (part.start, part.stop, part.step)):
        text = f"{'' if part.start is None else part.start}:{'' if part.stop is None else part.stop}"
        return text + (f":{part.step}" if part.step is not None else "")
    return None


def basic_slice(dec, x: IrRef, index: Any) -> IrRef | None:
    """``x[..., :-3]`` and other slices with constant bounds (a strided view), else None."""
    import torch

    parts = index if isinstance(index, tuple) else (index,)
    codes = [_slice_code(p) for p in parts]
    if any(c is None for c in codes):
        return None
    shape = tuple(torch.empty(dec.shape(x.id), device="meta")[index].shape)
    ref = dec.view(x, "{0}[" + ", ".join(codes) + "]", shape, "slice")
    per_dim = _per_dim_slices(parts, len(dec.shape(x.id)))
    if per_dim is not None:             # a plain crop: a conv before it may compute only what is kept
        dec.g[ref.id].args["slices"] = per_dim
    return ref


def _per_dim_slices(parts: tuple, rank: int) -> tuple | None:
    """(start, stop, step) for every dim of the input when the index is slices and one
    Ellipsis only (no new axes, no integers), else None."""
    if any(p is None for p in parts) or sum(p is Ellipsis for p in parts) > 1:
        return None
    if Ellipsis in parts:
        k = parts.index(Ellipsis)
        parts = parts[:k] + (slice(None),) * (rank - len(parts) + 1) + parts[k + 1:]
    if len(parts) > rank or not all(isinstance(p, slice) for p in parts):
        return None
    parts = parts + (slice(None),) * (rank - len(parts))
    return tuple((p.start, p.stop, p.step) for p in parts)


def op_chunk(dec, args, kwargs):
    """``x.chunk(n, dim)``: n views (``a, g = proj(x).chunk(2, -1)`` for a gated unit)."""
    x = _t(args[0], "chunk")
    chunks, dim = int(_arg(args, kwargs, 1, "chunks")), int(_arg(args, kwargs, 2, "dim", 0))
    shape = dec.shape(x.id)
    dim %= len(shape)
    size = -(-shape[dim] // chunks)
    views = []
    for k in range(-(-shape[dim] // size)):
        width = min(size, shape[dim] - k * size)
        sub = shape[:dim] + (width,) + shape[dim + 1:]
        views.append(dec.view(x, f"{{0}}.chunk({chunks}, {dim})[{k}]", sub, "chunk"))
    return tuple(views)
