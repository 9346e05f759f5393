"""The pooling template: 1-D, 2-D and 3-D max and average pooling, as PyTorch defines them.

Technique. One program computes BLOCK outputs of the flattened [N * C, *O] output;
for each of the prod(KS) window taps (unrolled at compile time) it loads the input
element under every output of the block, skipping taps in the padding, and folds it
into an fp32 running max or sum. Neighbouring outputs read neighbouring inputs, so
each tap's load is a strided but cache-friendly sweep; with stride >= kernel size
every input byte is read from DRAM once. The op is memory-bound: about
(input + output) * dtype bytes, and prod(KS) compares or adds per output.

PyTorch's rules, which this kernel follows exactly:

* output size: floor((L + 2p - d * (k - 1) - 1) / s) + 1, rounded up instead with
  ceil_mode, dropping a last window that would start inside the right padding;
* max pooling pads with -inf and propagates NaN (a NaN tap wins);
* average pooling (no dilation) divides by divisor_override when given, else by
  the window clipped to the padded input (count_include_pad=True; a ceil_mode window
  that runs past the padding counts only up to it), else by the number of taps
  inside the input (count_include_pad=False).

Fusion point: an elementwise chain (and extra tensors broadcast to the output) runs
on the pooled value before its one store; the window loop itself is the reduction.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelrag.draft.lower.gemm_spec import LoweringError, Rendered, rendered


@dataclass(frozen=True)
class PoolSpec:
    dims: int                                   # 1, 2 or 3 spatial dims
    kind: str                                   # "max" | "avg"
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...] = ()
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    epilogue: str = ""                          # lines computing ``acc`` from ``acc``, e0.. (gemm_spec)
    n_extra: int = 0
    name: str = "pool"

    def __post_init__(self):
        if self.kind not in ("max", "avg"):
            raise LoweringError(f"pooling kind {self.kind!r} is not max or avg")
        if self.dims not in (1, 2, 3):
            raise LoweringError(f"pooling over {self.dims} spatial dims: only 1, 2 or 3 are rendered")
        if self.kind == "avg" and any(d != 1 for d in self.dilation):
            raise LoweringError("average pooling has no dilation in PyTorch")
        for k, p in zip(self.kernel_size, self.padding):
            if p > k // 2:
                raise LoweringError(f"padding {p} is more than half the window {k} (PyTorch rejects it too)")


def out_size(L: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output length (pooling_output_shape)."""
    span = L + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= L + p:
        out -= 1
    return out


_KERNEL = '''@triton.jit
def {name}_kernel(
    x_ptr,  # input [N, C, {in_dims}] through its strides
    y_ptr,  # output [N, C, {out_dims}] through its strides
{extra_args}    total, C,  # number of outputs, channels
    {sizes},  # input and output spatial sizes
    s_xn, s_xc, {x_strides},  # element strides of the input
    s_yn, s_yc, {y_strides},  # element strides of the output
{extra_strides}{constexprs}    BLOCK: tl.constexpr,  # outputs per program
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < total
    r = offs
{decompose}    n = r // C
    c = r % C
    base = x_ptr + n.to(tl.int64) * s_xn + c.to(tl.int64) * s_xc
{init}{loops}{finish}    y_off = n.to(tl.int64) * s_yn + c.to(tl.int64) * s_yc{y_pos}
{epilogue}    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=live)
'''

_OUT_SIZE = '''def _out_size(L, k, s, p, d, ceil_mode):
    span = L + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= L + p:   # the last window may not start in the right padding
        out -= 1
    return out
'''

_LAUNCHER = '''def {name}(x, {extras_sig}):
    """{what} of x [N, C, {in_dims}] (kernel {ks}, stride {stride}, padding {padding}{more}), epilogue fused."""
    if x.ndim != {dims} + 2:
        raise ValueError(f"{name}: need a [N, C, {in_dims}] input, got shape {{tuple(x.shape)}}")
    L = list(x.shape[2:])
    O = [_out_size(L[i], k, s, p, d, {ceil_mode}) for i, (k, s, p, d) in enumerate(zip({ks}, {stride}, {padding}, {dilation}))]
    if min(O) <= 0:
        raise ValueError(f"{name}: input {{tuple(x.shape)}} is too small for the window (output {{O}})")
    y = torch.empty((x.shape[0], x.shape[1], *O), device=x.device, dtype=x.dtype)
    extras = [e.expand(y.shape) for e in ({extras_tuple})]
    e_st = [s for e in extras for s in e.stride()]
    total = y.numel()
    BLOCK = 256 if x.is_cuda else 64
    {name}_kernel[(_cdiv(total, BLOCK),)](
        x, y, {extras_call}total, x.shape[1], *L, *O, *x.stride(), *y.stride(), *e_st, {consts}BLOCK=BLOCK)
    return y
'''


def render_pool(spec: PoolSpec) -> Rendered:
    D = spec.dims
    dil = tuple(spec.dilation) or (1,) * D
    L, O = [f"L{i}" for i in range(D)], [f"O{i}" for i in range(D)]
    dec = "".join(f"    o{i} = r % O{i}\n    r = r // O{i}\n" for i in reversed(range(D)))
    if spec.kind == "max":
        init = "    acc = tl.full((BLOCK,), float('-inf'), dtype=tl.float32)\n"
    else:
        init = "    acc = tl.zeros((BLOCK,), dtype=tl.float32)\n"
    loops, ind = "", "    "
    for i in range(D):
        loops += (f"{ind}for t{i} in tl.static_range(KS{i}):\n"
                  f"{ind}    i{i} = o{i} * S{i} - P{i} + t{i} * DL{i}\n"
                  f"{ind}    ok{i} = {'live' if i == 0 else f'ok{i - 1}'} & (i{i} >= 0) & (i{i} < L{i})\n")
        ind += "    "
    addr = " + ".join(f"i{i}.to(tl.int64) * s_x{i}" for i in range(D))
    last = f"ok{D - 1}"
    if spec.kind == "max":
        loops += (f"{ind}v = tl.load(base + {addr}, mask={last}, other=float('-inf')).to(tl.float32)\n"
                  f"{ind}acc = tl.where((v > acc) | (v != v), v, acc)  # NaN propagates, as in PyTorch\n")
        finish = ""
    else:
        loops += f"{ind}acc += tl.load(base + {addr}, mask={last}, other=0.0).to(tl.float32)\n"
        if spec.divisor_override:
            finish = f"    acc = acc / {float(spec.divisor_override)}\n"
        else:
            finish = "    count = tl.full((BLOCK,), 1.0, dtype=tl.float32)\n"
            for i in range(D):
                finish += (f"    start{i} = o{i} * S{i} - P{i}\n"
                           f"    end{i} = tl.minimum(start{i} + KS{i}, L{i} + P{i})\n")
                if spec.count_include_pad:
                    finish += f"    count *= (end{i} - start{i}).to(tl.float32)\n"
                else:
                    finish += (f"    count *= (tl.minimum(end{i}, L{i}) - tl.maximum(start{i}, 0))"
                               ".to(tl.float32)\n")
            finish += "    acc = acc / count\n"
    y_pos = "".join(f" + o{i}.to(tl.int64) * s_y{i}" for i in range(D))
    epi = ""
    for e in range(spec.n_extra):
        pos = "".join(f" + o{i}.to(tl.int64) * s_e{e}_{i + 2}" for i in range(D))
        epi += (f"    e{e} = tl.load(e{e}_ptr + n.to(tl.int64) * s_e{e}_0 + c.to(tl.int64) * s_e{e}_1{pos}, "
                "mask=live, other=0.0).to(tl.float32)\n")
    epi += "".join(f"    {line}\n" for line in spec.epilogue.splitlines() if line.strip())
    kernel = _KERNEL.format(
        name=spec.name, in_dims=", ".join(L), out_dims=", ".join(O),
        extra_args="".join(f"    e{i}_ptr,  # extra epilogue tensor {i}, broadcast to the output\n"
                           for i in range(spec.n_extra)),
        sizes=", ".join(L + O), x_strides=", ".join(f"s_x{i}" for i in range(D)),
        y_strides=", ".join(f"s_y{i}" for i in range(D)),
        extra_strides="".join(f"    {', '.join(f's_e{i}_{j}' for j in range(D + 2))},  # element strides of e{i}\n"
                              for i in range(spec.n_extra)),
        constexprs="".join(f"    KS{i}: tl.constexpr, S{i}: tl.constexpr, P{i}: tl.constexpr, DL{i}: tl.constexpr,"
                           f"  # window, stride, padding, dilation of dim {i}\n" for i in range(D)),
        decompose=dec, init=init, loops=loops, finish=finish, y_pos=y_pos, epilogue=epi)
    extras = [f"e{i}" for i in range(spec.n_extra)]
    more = (f", dilation {dil}" if spec.kind == "max" else
            f", count_include_pad={spec.count_include_pad}, divisor_override={spec.divisor_override}")
    more += ", ceil_mode" if spec.ceil_mode else ""
    consts = "".join(f"{k}{i}={v[i]}, " for i in range(D) for k, v in
                     (("KS", spec.kernel_size), ("S", spec.stride), ("P", spec.padding), ("DL", dil)))
    launcher = _LAUNCHER.format(
        name=spec.name, what=f"{'Max' if spec.kind == 'max' else 'Average'} pooling", in_dims=", ".join(L),
        extras_sig="".join(f"{e}, " for e in extras), extras_tuple="".join(f"{e}, " for e in extras),
        extras_call="".join(f"extras[{i}], " for i in range(spec.n_extra)), ks=tuple(spec.kernel_size),
        stride=tuple(spec.stride), padding=tuple(spec.padding), dilation=dil, ceil_mode=spec.ceil_mode,
        dims=D, more=more, consts=consts)
    transformations = ["tiling", "fp32_accumulation"] + (["epilogue_fusion"] if spec.epilogue else [])
    return rendered([_OUT_SIZE, kernel], launcher, spec.name, transformations)


_GLOBAL_KERNEL = '''@triton.jit
def {name}_kernel(
    x_ptr,  # input [N, C, L] (the spatial dims flattened) through its strides
    y_ptr,  # output [N, C, 1, ...], contiguous: one value per row
{extra_args}    R, C, L,  # rows (N * C), channels, elements per row
    s_xn, s_xc, s_xl,  # element strides of the input
{extra_strides}    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_L: tl.constexpr,  # row elements per step
    FLAT: tl.constexpr,  # contiguous [R, L] input with L <= BLOCK_L: one sweep, 32-bit offsets
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < R
    n = rows // C
    c = rows % C
    acc = tl.full((BLOCK_R, BLOCK_L), {fill}, dtype=tl.float32)
    if FLAT:
        # the program's rows are one contiguous run: a 64-bit base, then 32-bit offsets within
        # it (a 64-bit address per row cost 1.37x in time on an H100, 49-element rows)
        ls = tl.arange(0, BLOCK_L)
        ok = r_ok[:, None] & (ls < L)[None, :]
        offs = tl.arange(0, BLOCK_R)[:, None] * L + ls[None, :]
        v = tl.load(x_ptr + (tl.program_id(0) * BLOCK_R).to(tl.int64) * L + offs, mask=ok,
                    other={fill}).to(tl.float32)
{fold}    else:
        base = x_ptr + n.to(tl.int64) * s_xn + c.to(tl.int64) * s_xc
        for l0 in range(0, L, BLOCK_L):
            ls = l0 + tl.arange(0, BLOCK_L)
            ok = r_ok[:, None] & (ls < L)[None, :]
            v = tl.load(base[:, None] + ls[None, :].to(tl.int64) * s_xl, mask=ok, other={fill}).to(tl.float32)
{fold_loop}    live = r_ok
{finish}{epilogue}    tl.store(y_ptr + rows, acc.to(y_ptr.dtype.element_ty), mask=r_ok)
'''

_GLOBAL_LAUNCHER = '''def {name}(x, {extras_sig}):
    """Global {kind} pooling of x [N, C, *spatial] to [N, C, 1, ...] (an adaptive pool of output size 1),
    epilogue fused."""
    if x.ndim != {dims} + 2 or x.numel() == 0:
        raise ValueError(f"{name}: need a non-empty [N, C, {spatial}] input, got shape {{tuple(x.shape)}}")
    xf = x.flatten(2)  # a view when the spatial dims are contiguous (nn layouts), else a copy
    Nb, C, L = xf.shape
    y = torch.empty((Nb, C) + (1,) * {dims}, device=x.device, dtype=x.dtype)
    extras = [e.expand(y.shape) for e in ({extras_tuple})]
    e_st = [s for e in extras for s in e.stride()[:2]]
    BL = min(_pow2(L), 1024 if x.is_cuda else 256)
    flat = L <= BL and xf.is_contiguous()
    # short rows: many per program, one contiguous sweep; contiguous ones 16K elements a program
    # (bench/pool_configs.py, H100: 256 rows of 49 at 8 warps, 2.5 TB/s against 64 rows' 2.4)
    BR = max(1, (16384 if flat else 4096) // BL if x.is_cuda else 1024 // BL)
    {name}_kernel[(_cdiv(Nb * C, BR),)](
        xf, y, {extras_call}Nb * C, C, L, *xf.stride(), *e_st, BLOCK_R=BR, BLOCK_L=BL, FLAT=flat,
        num_warps=8 if flat and x.is_cuda else 4)
    return y
'''


def render_global_pool(kind: str, dims: int, epilogue: str = "", n_extra: int = 0, name: str = "pool") -> Rendered:
    """Max or mean over all spatial dims of [N, C, *spatial] (adaptive pooling to size 1):
    BLOCK_R rows per program, each swept in BLOCK_L steps; max propagates NaN as PyTorch does."""
    if kind not in ("max", "avg"):
        raise LoweringError(f"pooling kind {kind!r} is not max or avg")
    if kind == "max":
        fill = "float('-inf')"
        fold = ("        acc = tl.where((v > acc) | (v != v), v, acc)  # NaN propagates, as in PyTorch\n")
        finish = ("    nan = tl.sum((acc != acc).to(tl.int32), axis=1) > 0\n"
                  "    acc = tl.where(nan, float('nan'), tl.max(acc, axis=1))\n")
    else:
        fill, fold = "0.0", "        acc += v\n"
        finish = "    acc = tl.sum(acc, axis=1) / L\n"
    epi = "".join(f"    e{i} = tl.load(e{i}_ptr + n.to(tl.int64) * s_e{i}_0 + c.to(tl.int64) * s_e{i}_1, mask=live, "
                  "other=0.0).to(tl.float32)\n" for i in range(n_extra))
    epi += "".join(f"    {line}\n" for line in epilogue.splitlines() if line.strip())
    kernel = _GLOBAL_KERNEL.format(
        name=name, fill=fill, fold=fold, finish=finish, epilogue=epi,
        fold_loop="".join("    " + line for line in fold.splitlines(True)),
        extra_args="".join(f"    e{i}_ptr,  # extra epilogue tensor {i}, broadcast to the output\n"
                           for i in range(n_extra)),
        extra_strides="".join(f"    s_e{i}_0, s_e{i}_1,  # batch and channel strides of e{i}\n" for i in range(n_extra)))
    extras = [f"e{i}" for i in range(n_extra)]
    launcher = _GLOBAL_LAUNCHER.format(
        name=name, kind=kind, dims=dims, spatial=", ".join(f"L{i}" for i in range(dims)),
        extras_sig="".join(f"{e}, " for e in extras), extras_tuple="".join(f"{e}, " for e in extras),
        extras_call="".join(f"extras[{i}], " for i in range(n_extra)))
    transformations = ["multi_row_per_program", "tree_reduction", "fp32_accumulation"]
    return rendered([kernel], launcher, name, transformations + (["epilogue_fusion"] if epilogue else []))
