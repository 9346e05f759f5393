"""The convolution template: 1-D, 2-D and 3-D convolutions (and transposed ones) as implicit GEMM.

Technique. A convolution is a GEMM that never materialises its left operand. Per
group g, with Cg = C_in / groups input and Fg = C_out / groups output channels:

    M = N * prod(O)          one row per output position (n, o_1..o_D)
    N_gemm = Fg              one column per output channel of the group
    K = Cg * prod(KS)        one term per (input channel, kernel tap)

B is the weight seen as [Fg, K] (K-major, contiguous in nn.Conv's layout: the 3xTF32
tensor-core path reads it as it is). The A tile [BLOCK_M, BLOCK_K] is gathered from
the input on the fly: row m gives (n, o), column k gives (c, tap), and the element
is x[n, g * Cg + c, o * stride - padding + tap * dilation], or 0 in the padding.
So the input is read about prod(KS) / prod(stride) times from cache, but from DRAM
about once, and the im2col matrix (K times larger than the input) never exists.
FLOPs: 2 * M * Fg * K * groups; bytes: input + weight + output.

A transposed convolution is the gradient of a convolution with respect to its
input: output position o receives x[i] * w[tap] wherever o = i * stride - padding +
tap * dilation. Gathered per output, i = (o + padding - tap * dilation) / stride must
be a whole number inside the input, so the same kernel runs with that index map and
a divisibility mask (1 / prod(stride) of the taps hit; the others load nothing).
Its weight [C_in, Fg, *KS] is rearranged once to [groups, Fg, K] (a copy of the
weight only) so B is K-major in both cases.

Fusion points. The epilogue runs on the fp32 accumulator of a finished output tile:
bias, activations, residuals and per-channel scales (extra tensors broadcast to the
output and read through their strides) cost one pass over registers instead of a
read and a write of the whole output per op. Norms over the output need all of it
and are left to the next kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelrag.draft.lower.gemm_spec import LoweringError, Rendered


@dataclass(frozen=True)
class ConvSpec:
    dims: int                                   # 1, 2 or 3 spatial dims
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int = 1                             # a transposed conv's group count (a conv reads it from w)
    transposed: bool = False
    depthwise: bool = False                     # transposed only: one group per input channel
    output_padding: tuple[int, ...] = ()
    epilogue: str = ""                          # lines computing ``acc`` from ``acc``, e0.. (gemm_spec)
    n_extra: int = 0
    name: str = "conv"

    def __post_init__(self):
        if self.dims not in (1, 2, 3):
            raise LoweringError(f"convolution over {self.dims} spatial dims: only 1, 2 or 3 are rendered")
        for field_name in ("kernel_size", "stride", "padding", "dilation"):
            if len(getattr(self, field_name)) != self.dims:
                raise LoweringError(f"{field_name} {getattr(self, field_name)} does not have {self.dims} entries")


_KERNEL = '''@triton.jit
def {name}_kernel(
    x_ptr,  # input [N, C_in, {in_dims}] through its strides
    w_ptr,  # weight as [groups, Fg, K], contiguous (K-major)
    y_ptr,  # output [N, C_out, {out_dims}] through its strides
{extra_args}    M, Fg, K, Cg,  # GEMM sizes of one group (M = N * output positions); input channels per group
    {sizes},  # input and output spatial sizes
    s_xn, s_xc, {x_strides},  # element strides of the input
    s_yn, s_yc, {y_strides},  # element strides of the output
{extra_strides}{constexprs}    BLOCK_M: tl.constexpr,  # output positions per program
    BLOCK_N: tl.constexpr,  # output channels per program
    BLOCK_K: tl.constexpr,  # (channel, tap) pairs per K step
    PRECISION: tl.constexpr,  # tl.dot input_precision: "ieee" (CPU), "tf32x3" (3xTF32 on CUDA)
):
    pid = tl.program_id(0)
    g = tl.program_id(1)  # the group: its own slice of input and output channels
    num_pid_n = tl.cdiv(Fg, BLOCK_N)
    offs_m = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < Fg
    # row m -> (n, output position), innermost spatial dim fastest (the output's layout)
{decompose_m}    x_rows = x_ptr + n_idx.to(tl.int64) * s_xn + (g * Cg).to(tl.int64) * s_xc
    w_cols = w_ptr + (g * Fg).to(tl.int64) * K + offs_n[None, :].to(tl.int64) * K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        # column k -> (input channel c, kernel tap), taps innermost (the weight's layout)
{decompose_k}{gather}        a = tl.load(x_rows[:, None] + c_idx[None, :].to(tl.int64) * s_xc + offset, mask=ok, other=0.0)
        b = tl.load(w_cols + ks[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)

    out_ok = m_ok[:, None] & n_ok[None, :]
    co = g * Fg + offs_n  # absolute output channel
    y_off = n_idx[:, None].to(tl.int64) * s_yn + co[None, :].to(tl.int64) * s_yc + {y_pos}
{epilogue}    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=out_ok)
'''

_LAUNCHER = '''

def {name}(x, w, {extras_sig}precision=None):
    """{what} of x [N, C_in, {in_dims}] with weight {w_layout}, epilogue fused."""
    D = {dims}
    if x.ndim != D + 2 or w.ndim != D + 2:
        raise ValueError(f"{name}: need x [N, C, {in_dims}] and a {{D + 2}}-D weight, got {{tuple(x.shape)}}, "
                         f"{{tuple(w.shape)}}")
    if x.dtype != w.dtype:
        raise TypeError(f"{name}: input is {{x.dtype}} but weight is {{w.dtype}}")
    Nb, C_in = x.shape[0], x.shape[1]
    G = {groups_expr}
    L = list(x.shape[2:])
    KS, S, P, DL, OP = {ks}, {stride}, {padding}, {dilation}, {outpad}
    if {transposed}:
        Cg, Fg = C_in // G, w.shape[1]
        O = [(L[d] - 1) * S[d] - 2 * P[d] + DL[d] * (KS[d] - 1) + OP[d] + 1 for d in range(D)]
        # [C_in, Fg, *KS] -> [G, Fg, Cg * prod(KS)]: a copy of the weight only, so B is K-major
        wg = w.reshape(G, Cg, Fg, -1).permute(0, 2, 1, 3).contiguous().reshape(G, Fg, -1)
    else:
        Cg, Fg = w.shape[1], w.shape[0] // G
        O = [(L[d] + 2 * P[d] - DL[d] * (KS[d] - 1) - 1) // S[d] + 1 for d in range(D)]
        wg = w.reshape(G, Fg, -1).contiguous()       # already [C_out, Cg * prod(KS)]: a view
    if C_in != Cg * G or min(O) <= 0:
        raise ValueError(f"{name}: input {{tuple(x.shape)}} does not fit weight {{tuple(w.shape)}} with groups={{G}}"
                         f" (output sizes {{O}})")
    K = wg.shape[2]
    y = torch.empty((Nb, Fg * G, *O), device=x.device, dtype=x.dtype)
    extras = [e.expand(y.shape) for e in ({extras_tuple})]
    e_st = [s for e in extras for s in e.stride()]
    M = Nb
    for o in O:
        M *= o
    if precision is None:
        precision = ("tf32x3" if x.is_cuda else "ieee") if x.dtype == torch.float32 else "tf32"
    BM, BN, BK, warps = (128, 64, 32, 8) if x.is_cuda and M >= 4096 else (64 if x.is_cuda else 32, 32, 16, 4)
    BN = min(BN, max(16, triton.next_power_of_2(Fg)))
    grid = (triton.cdiv(M, BM) * triton.cdiv(Fg, BN), G)
    {name}_kernel[grid](
        x, wg, y, {extras_call}M, Fg, K, Cg, *L, *O, *x.stride(), *y.stride(), *e_st,
        BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, PRECISION=precision, num_warps=warps)
    return y
'''


def _spatial(names: str, d: int) -> list[str]:
    return [f"{names}{i}" for i in range(d)]


def render_conv(spec: ConvSpec) -> Rendered:
    D = spec.dims
    L, O = _spatial("L", D), _spatial("O", D)
    ks = spec.kernel_size
    # m -> (n, o_0..o_{D-1})
    dm = "    r = offs_m\n"
    for i in reversed(range(D)):
        dm += f"    o{i} = r % O{i}\n    r = r // O{i}\n"
    dm += "    n_idx = r\n"
    # k -> (c, t_0..t_{D-1}) with compile-time tap counts
    taps = "*".join(f"KS{i}" for i in range(D))
    dk = f"        c_idx = ks // ({taps})\n        t = ks % ({taps})\n"
    for i in reversed(range(D)):
        dk += f"        t{i} = t % KS{i}\n        t = t // KS{i}\n"
    gather = "        ok = m_ok[:, None] & k_ok[None, :]\n        offset = 0\n"
    for i in range(D):
        if spec.transposed:     # o = i * S - P + t * DL  ->  i = (o + P - t * DL) / S when whole
            gather += (f"        q{i} = o{i}[:, None] + P{i} - t{i}[None, :] * DL{i}\n"
                       f"        i{i} = q{i} // S{i}\n"
                       f"        ok = ok & (q{i} >= 0) & (q{i} % S{i} == 0) & (i{i} < L{i})\n")
        else:
            gather += (f"        i{i} = o{i}[:, None] * S{i} - P{i} + t{i}[None, :] * DL{i}\n"
                       f"        ok = ok & (i{i} >= 0) & (i{i} < L{i})\n")
        gather += f"        offset += i{i}.to(tl.int64) * s_x{i}\n"
    constexprs = "".join(f"    KS{i}: tl.constexpr, S{i}: tl.constexpr, P{i}: tl.constexpr, DL{i}: tl.constexpr,"
                         f"  # taps, stride, padding, dilation of dim {i}\n" for i in range(D))
    extra_args = "".join(f"    e{i}_ptr,  # extra epilogue tensor {i}, broadcast to the output through its strides\n"
                         for i in range(spec.n_extra))
    extra_strides = "".join(f"    {', '.join(f's_e{i}_{j}' for j in range(D + 2))},  # element strides of e{i}\n"
                            for i in range(spec.n_extra))
    epi = ""
    for i in range(spec.n_extra):
        pos = " + ".join(f"o{d}[:, None].to(tl.int64) * s_e{i}_{d + 2}" for d in range(D))
        epi += (f"    e{i} = tl.load(e{i}_ptr + n_idx[:, None].to(tl.int64) * s_e{i}_0 + co[None, :].to(tl.int64)"
                f" * s_e{i}_1 + {pos}, mask=out_ok, other=0.0).to(tl.float32)\n")
    epi += "".join(f"    {line}\n" for line in spec.epilogue.splitlines() if line.strip())
    kernel = _KERNEL.format(
        name=spec.name, in_dims=", ".join(L), out_dims=", ".join(O), extra_args=extra_args,
        sizes=", ".join(L + O), x_strides=", ".join(f"s_x{i}" for i in range(D)),
        y_strides=", ".join(f"s_y{i}" for i in range(D)), extra_strides=extra_strides, constexprs=constexprs,
        decompose_m=dm, decompose_k=dk, gather=gather, epilogue=epi,
        y_pos=" + ".join(f"o{i}[:, None].to(tl.int64) * s_y{i}" for i in range(D)))
    extras = [f"e{i}" for i in range(spec.n_extra)]
    outpad = tuple(spec.output_padding) or (0,) * D
    if spec.transposed:
        groups_expr = "C_in" if spec.depthwise else str(spec.groups)
    else:
        groups_expr = "C_in // w.shape[1]  # the weight [C_out, C_in / groups, *KS] gives the group count"
    launcher = _LAUNCHER.format(
        name=spec.name, what="Transposed convolution" if spec.transposed else "Convolution",
        in_dims=", ".join(L), w_layout="[C_in, C_out / groups, *KS]" if spec.transposed else "[C_out, C_in / groups, *KS]",
        groups_expr=groups_expr, dims=D, ks=tuple(ks), stride=tuple(spec.stride), padding=tuple(spec.padding),
        dilation=tuple(spec.dilation), outpad=outpad, transposed=spec.transposed,
        extras_sig="".join(f"{e}, " for e in extras), extras_tuple="".join(f"{e}, " for e in extras),
        extras_call="".join(f"{e}, " for e in ("extras[%d]" % i for i in range(spec.n_extra))))
    consts = "".join(f"{k}{i}={v[i]}, " for i in range(D)
                     for k, v in (("KS", ks), ("S", spec.stride), ("P", spec.padding), ("DL", spec.dilation)))
    launcher = launcher.replace("*e_st,\n", f"*e_st,\n        {consts.rstrip()}\n")
    source = "import torch\nimport triton\nimport triton.language as tl\n\n\n" + kernel + launcher
    transformations = ["implicit_gemm", "tiling", "fp32_accumulation", "tf32x3"] + (["epilogue_fusion"] if spec.epilogue else [])
    notes = ["dot precision: tf32x3 (3xTF32) on CUDA for fp32, ieee under the CPU interpreter"]
    return Rendered(source=source, entry=spec.name, transformations=transformations, notes=notes)
