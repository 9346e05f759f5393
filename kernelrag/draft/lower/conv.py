"""The convolution template: 1-D, 2-D and 3-D convolutions (and transposed ones) as implicit GEMM.

Technique. A convolution is a GEMM that never materialises its left operand. Per
group g, with Cg = C_in / groups input and Fg = C_out / groups output channels:

    M = N * prod(O)          one row per output position (n, o_1..o_D)
    N_gemm = Fg              one column per output channel of the group
    K = Cg * prod(KS)        one term per (input channel, kernel tap)

B is the weight seen as [Fg, K] (K-major, contiguous in nn.Conv's layout: the 3xTF32
tensor-core path reads it as it is). The A tile is gathered from the input on the
fly: row m gives (n, o), column k gives (c, tap), and the element is
x[n, g * Cg + c, o * stride - padding + tap * dilation], or 0 in the padding. It is
gathered as A^T [BLOCK_K, BLOCK_M], output positions along the fast axis, so
neighbouring threads read neighbouring input elements (one 128-byte line per warp
where a K-fast gather touches one line per tap row), and transposed in registers for
tl.dot. The input is read about prod(KS) / prod(stride) times from cache, from DRAM
about once, and the im2col matrix (K times larger than the input) never exists.
FLOPs: 2 * M * Fg * K * groups; bytes: input + weight + output. The tile (BLOCK_M,
BLOCK_N, BLOCK_K, warps, stages) comes from the shape through ``tiles.CONV_TILES``.

Channels-last (variant ``channels_last``, ordinary convolutions). The gather above reads
A M-major, while Hopper's TF32 MMA wants both operands K-major (the 3xTF32 GEMM runs at
about 2.4x the rate of this gather's conv on the H200). Ordering K as (tap, channel),
channels fastest, and making the input channels-last once per call (one read and one
write of it, ``k_major``) turns each row of the A tile into BLOCK_K neighbouring channels
of one input position, one contiguous run, and hands A to tl.dot K-major; the weight is
permuted to [G, Fg, *KS, Cg] to match (a copy of the weight only).

A transposed convolution is the gradient of a convolution with respect to its
input: output o receives x[i] * w[tap] wherever o = i * stride - padding + tap *
dilation. With dilation 1 it splits into prod(stride) ordinary convolutions, one per
output phase o % stride (sub-pixel decomposition): for outputs o = ph + stride * j
only the taps t = r + stride * u with r = (ph + padding) % stride hit, at input
i = q + j - u, q = (ph + padding - r) / stride. Each phase is one implicit GEMM with
K = Cg * prod(ceil(KS / stride)), so no MMA work is spent on taps that miss (a
divisibility mask would waste 1 - 1 / prod(stride) of it). The weight [C_in, Fg, *KS]
is rearranged once per call, in one pass, to [prod(stride), groups, Fg, K] (K-major,
zero where a residue has fewer taps). With dilation > 1 the gather keeps the
divisibility mask over all taps.

A slice of the output right after the convolution (``conv(x)[..., :-k]``, a causal
convolution) is folded in as a crop: only the kept outputs are computed (``crop``).

Fusion points. The epilogue runs on the fp32 accumulator of a finished output tile:
bias, activations, residuals and per-channel scales (extra tensors broadcast to the
output and read through their strides) cost one pass over registers instead of a
read and a write of the whole output per op. Norms over the output need all of it
and are left to the next kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelrag.draft.lower.gemm_spec import LoweringError, Rendered, rendered
from kernelrag.draft.lower.split_helpers import TF32X3_SPLIT, TRANSPOSE_KERNEL
from kernelrag.draft.lower.tiles import CONV_TILES, PICK_TILE, table_source


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
    crop: tuple = ()                            # per spatial dim (start, stop) of the kept outputs, or ()
    channels_last: bool = False                 # K = (taps, channels), the input gathered channels-last

    def __post_init__(self):
        if self.dims not in (1, 2, 3):
            raise LoweringError(f"convolution over {self.dims} spatial dims: only 1, 2 or 3 are rendered")
        for field_name in ("kernel_size", "stride", "padding", "dilation"):
            if len(getattr(self, field_name)) != self.dims:
                raise LoweringError(f"{field_name} {getattr(self, field_name)} does not have {self.dims} entries")
        if self.crop and len(self.crop) != self.dims:
            raise LoweringError(f"crop {self.crop} does not have {self.dims} (start, stop) entries")
        if self.channels_last and self.transposed:
            raise LoweringError("the channels-last implicit GEMM renders ordinary convolutions only")

    @property
    def phases(self) -> bool:
        """A transposed convolution split by output phase (dilation 1)."""
        return self.transposed and all(d == 1 for d in self.dilation)


def spatial(prefix: str, d: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(d)]


def launcher_sizes(spec: ConvSpec, name: str) -> str:
    """Launcher lines that check x and w and set Nb, C_in, G, Cg, Fg, L, O and the crop CR."""
    D = spec.dims
    if spec.transposed:
        groups = "C_in" if spec.depthwise else str(spec.groups)
        sizes = ("    Cg, Fg = C_in // G, w.shape[1]\n"
                 "    O = [(L[d] - 1) * S[d] - 2 * P[d] + DL[d] * (KS[d] - 1) + OP[d] + 1 for d in range(D)]\n")
    else:
        groups = "C_in // w.shape[1]  # the weight [C_out, C_in / groups, *KS] gives the group count"
        sizes = ("    Cg, Fg = w.shape[1], w.shape[0] // G\n"
                 "    O = [(L[d] + 2 * P[d] - DL[d] * (KS[d] - 1) - 1) // S[d] + 1 for d in range(D)]\n")
    outpad = tuple(spec.output_padding) or (0,) * D
    return (f"    D = {D}\n"
            f"    if x.ndim != D + 2 or w.ndim != D + 2:\n"
            f"        raise ValueError(f\"{name}: need x [N, C, {', '.join(spatial('L', D))}] and a {{D + 2}}-D weight, "
            f"got {{tuple(x.shape)}}, {{tuple(w.shape)}}\")\n"
            f"    if x.dtype != w.dtype:\n"
            f"        raise TypeError(f\"{name}: input is {{x.dtype}} but weight is {{w.dtype}}\")\n"
            f"    Nb, C_in = x.shape[0], x.shape[1]\n"
            f"    G = {groups}\n"
            f"    L = list(x.shape[2:])\n"
            f"    KS, S, P, DL, OP = {tuple(spec.kernel_size)}, {tuple(spec.stride)}, {tuple(spec.padding)}, "
            f"{tuple(spec.dilation)}, {outpad}\n"
            + sizes +
            f"    if C_in != Cg * G or min(O) <= 0:\n"
            f"        raise ValueError(f\"{name}: input {{tuple(x.shape)}} does not fit weight {{tuple(w.shape)}} "
            f"with groups={{G}} (output sizes {{O}})\")\n"
            f"    CR = [0] * D\n"
            f"    CROP = {tuple(spec.crop)!r}  # the slice taken of the output, folded in: kept outputs only\n"
            f"    if CROP:\n"
            f"        kept = [range(O[d])[slice(*CROP[d])] for d in range(D)]\n"
            f"        if any(r.step != 1 or len(r) == 0 for r in kept):\n"
            f"            raise ValueError(f\"{name}: the slice {{CROP}} of outputs {{O}} is empty or strided\")\n"
            f"        CR, O = [r.start for r in kept], [len(r) for r in kept]\n")


def extras_code(spec: ConvSpec, rows: str, cols: str, pos: list[str], mask: str, chan: tuple[str, str, str]) -> str:
    """Loads of the epilogue's extra tensors at the tile (rows/cols index expressions), then
    the epilogue lines. ``chan`` = (offset with ``{i}`` for the extra's number, mask, broadcast)
    loads an extra that varies along channels only (``E{i}_CH``, set by the launcher from its
    strides: a bias, a batch norm's scale) as one vector per tile instead of a full tile of
    stride-0 gathers: one load per channel, not per output, and no per-element address."""
    D = spec.dims
    out = ""
    offset, chan_mask, bcast = chan
    for i in range(spec.n_extra):
        at = " + ".join(f"{pos[d]}.to(tl.int64) * s_e{i}_{d + 2}" for d in range(D))
        out += (f"    if E{i}_CH:\n"
                f"        e{i} = tl.load(e{i}_ptr + {offset.format(i=i)}, mask={chan_mask}, other=0.0)"
                f".to(tl.float32){bcast}\n"
                f"    else:\n"
                f"        e{i} = tl.load(e{i}_ptr + {rows}.to(tl.int64) * s_e{i}_0 + {cols}.to(tl.int64) * s_e{i}_1"
                f" + {at}, mask={mask}, other=0.0).to(tl.float32)\n")
    return out + "".join(f"    {line}\n" for line in spec.epilogue.splitlines() if line.strip())


def extra_params(spec: ConvSpec) -> tuple[str, str]:
    """(pointer argument lines, stride and per-channel flag argument lines) of the extra tensors."""
    D = spec.dims
    args = "".join(f"    e{i}_ptr,  # extra epilogue tensor {i}, broadcast to the output through its strides\n"
                   for i in range(spec.n_extra))
    strides = "".join(f"    {', '.join(f's_e{i}_{j}' for j in range(D + 2))},  # element strides of e{i}\n"
                      for i in range(spec.n_extra))
    strides += "".join(f"    E{i}_CH: tl.constexpr,  # e{i} varies along channels only: one vector load\n"
                       for i in range(spec.n_extra))   # after every stride: the strides are passed by position
    return args, strides


def extra_flags(fixed_dims: str) -> str:
    """Launcher line: ``e_ch``, the E{i}_CH keyword arguments (stride 0 along ``fixed_dims``)."""
    return f"    e_ch = {{f\"E{{i}}_CH\": all(e.stride(d) == 0 for d in {fixed_dims}) for i, e in enumerate(extras)}}\n"


_PHASE_WEIGHT = '''@triton.jit
def {name}_phase_weight_kernel(
    w_ptr,  # transposed-conv weight [C_in, Fg, {ks}] through its strides
    wp_ptr,  # per-residue weight [{ph}, G, Fg, Cg * {tt}], contiguous (K-major)
    total, G, Fg, Cg,  # elements of wp; groups; output and input channels per group
    s_w0, s_w1, {w_strides},  # element strides of w
{constexprs}    BLOCK: tl.constexpr,  # elements per program
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offs < total
    k = offs % (Cg * {tt})
    rest = offs // (Cg * {tt})
    f = rest % Fg
    rest = rest // Fg
    g = rest % G
    rr = rest // G  # the residue r of each dim (tap % stride), last dim fastest
    c = k // {tt}
    u = k % {tt}
{decompose}    # one read and one write per element of the (small) weight; taps past the kernel are 0
    v = tl.load(w_ptr + (g * Cg + c) * s_w0 + f * s_w1 + {w_off}, mask=ok, other=0.0)
    tl.store(wp_ptr + offs, v, mask=live)
'''


def _phase_weight(spec: ConvSpec) -> str:
    D, name = spec.dims, spec.name
    dec = ""
    for i in reversed(range(D)):
        dec += f"    u{i} = u % T{i}\n    u = u // T{i}\n    r{i} = rr % S{i}\n    rr = rr // S{i}\n"
    dec += "    ok = live\n" + "".join(f"    tap{i} = r{i} + u{i} * S{i}\n    ok = ok & (tap{i} < KS{i})\n"
                                    for i in range(D))
    consts = "".join(f"    KS{i}: tl.constexpr, S{i}: tl.constexpr, T{i}: tl.constexpr,"
                     f"  # taps, stride, taps per residue (ceil(KS / S)) of dim {i}\n" for i in range(D))
    return _PHASE_WEIGHT.format(
        name=name, ks=", ".join(spatial("KS", D)), ph=" * ".join(spatial("S", D)),
        tt="(" + " * ".join(spatial("T", D)) + ")", w_strides=", ".join(spatial("s_wt", D)), constexprs=consts,
        decompose=dec, w_off=" + ".join(f"tap{i} * s_wt{i}" for i in range(D)))


def _kernel(spec: ConvSpec) -> str:
    D, name = spec.dims, spec.name
    L, O, CR = spatial("L", D), spatial("O", D), spatial("CR", D)
    ph = spec.phases
    extra_args, extra_strides = extra_params(spec)
    head = (f"@triton.jit\ndef {name}_kernel(\n"
            f"    x_ptr,  # input [N, C_in, {', '.join(L)}] through its strides\n"
            f"    w_ptr,  # weight {'[prod(S), groups, Fg, K] per tap residue' if ph else '[groups, Fg, K]'}, "
            "contiguous (K-major); its TF32 part when SPLIT_B\n"
            "    wlo_ptr,  # SPLIT_B: the weight's TF32 remainder, laid out as the weight (otherwise not read)\n"
            f"    y_ptr,  # output [N, C_out, {', '.join(O)}] through its strides\n{extra_args}"
            "    NB, M, G, Fg, K, Cg,  # batch; GEMM rows, groups, output channels per group, GEMM depth, "
            "input channels per group\n"
            f"    {', '.join(L + O + CR)},  # input sizes, output sizes (after a crop), crop starts\n"
            f"    s_xn, s_xc, {', '.join(spatial('s_x', D))},  # element strides of the input\n"
            f"    s_yn, s_yc, {', '.join(spatial('s_y', D))},  # element strides of the output\n{extra_strides}"
            + "".join(f"    KS{i}: tl.constexpr, S{i}: tl.constexpr, P{i}: tl.constexpr, DL{i}: tl.constexpr,"
                      f"  # taps, stride, padding, dilation of dim {i}\n" for i in range(D))
            + ("".join(f"    T{i}: tl.constexpr,  # taps per residue of dim {i}: ceil(KS{i} / S{i})\n"
                       for i in range(D)) if ph else "")
            + "    BLOCK_M: tl.constexpr,  # output positions per program\n"
              "    BLOCK_N: tl.constexpr,  # output channels per program\n"
              "    BLOCK_K: tl.constexpr,  # (channel, tap) pairs per K step\n"
              "    PRECISION: tl.constexpr,  # tl.dot input_precision: \"ieee\" (CPU), \"tf32x3\" (3xTF32 on CUDA)\n"
              "    SPLIT_B: tl.constexpr,  # 3xTF32 with the weight split into TF32 parts before the kernel\n"
              "):\n    pid = tl.program_id(0)\n")
    body = ""
    if ph:
        phases = "(" + " * ".join(spatial("S", D)) + ")"
        body += f"    g = tl.program_id(1) // {phases}  # the group, then the output phase\n"
        body += f"    r = tl.program_id(1) % {phases}\n"
        for i in reversed(range(D)):
            body += f"    ph{i} = r % S{i}\n    r = r // S{i}\n"
        body += "    Mp = NB  # the rows of this phase: outputs o = ph + S * j\n"
        for i in range(D):
            body += (f"    J{i} = (O{i} - ph{i} + S{i} - 1) // S{i}\n    Mp = Mp * J{i}\n"
                     f"    a{i} = ph{i} + CR{i} + P{i}\n    res{i} = a{i} % S{i}  # the taps that hit: res + S * u\n"
                     f"    q{i} = (a{i} - res{i}) // S{i}  # input = q + j - u\n")
        rr = "res0"
        for i in range(1, D):       # the residue flattened, last dim fastest (the weight's order)
            rr = f"({rr}) * S{i} + res{i}"
        body += f"    w_g = (({rr}) * G + g).to(tl.int64) * Fg * K  # this residue's and group's weight\n"
    else:
        body += "    g = tl.program_id(1)  # the group: its own slice of input and output channels\n"
        body += "    Mp = M\n"
        body += "    w_g = g.to(tl.int64) * Fg * K  # this group's weight\n"
    sizes = spatial("J", D) if ph else O
    body += ("    num_pid_n = tl.cdiv(Fg, BLOCK_N)\n"
             "    offs_m = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)\n"
             "    offs_n = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)\n"
             "    m_ok = offs_m < Mp\n    n_ok = offs_n < Fg\n"
             "    # row m -> (n, output position), innermost spatial dim fastest (the output's layout)\n"
             "    r = offs_m\n")
    for i in reversed(range(D)):
        body += f"    j{i} = r % {sizes[i]}\n    r = r // {sizes[i]}\n"
    body += "    n_idx = r\n"
    body += "".join(f"    o{i} = ph{i} + S{i} * j{i}\n" if ph else f"    o{i} = j{i}\n" for i in range(D))
    taps = " * ".join(spatial("T" if ph else "KS", D))
    body += ("    x_rows = x_ptr + n_idx.to(tl.int64) * s_xn + (g * Cg).to(tl.int64) * s_xc\n"
             "    w_cols = w_ptr + w_g + offs_n[None, :].to(tl.int64) * K\n"
             "    wlo_cols = wlo_ptr + w_g + offs_n[None, :].to(tl.int64) * K  # SPLIT_B: the remainder\n"
             "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n"
             "    small = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # SPLIT_B: the small products' sum\n"
             "    for k0 in range(0, K, BLOCK_K):\n"
             "        ks = k0 + tl.arange(0, BLOCK_K)\n"
             "        k_ok = ks < K\n")
    if spec.channels_last:
        return head + body + _channels_last_step(spec) + _store(spec)
    body += ("        # column k -> (input channel c, kernel tap), taps innermost (the weight's layout)\n"
             f"        c_idx = ks // ({taps})\n        t = ks % ({taps})\n")
    for i in reversed(range(D)):
        size = f"T{i}" if ph else f"KS{i}"
        body += f"        t{i} = t % {size}\n        t = t // {size}\n"
    body += ("        # A^T [BLOCK_K, BLOCK_M]: output positions along the fast axis, so a warp reads a\n"
             "        # contiguous run of the input row\n"
             "        ok = k_ok[:, None] & m_ok[None, :]\n")
    for i in range(D):
        if ph:      # t{i} is u: the tap is res + S * u (past the kernel: no term, as in PyTorch)
            body += (f"        i{i} = q{i} + j{i}[None, :] - t{i}[:, None]\n"
                     f"        ok = ok & (res{i} + S{i} * t{i} < KS{i})[:, None]\n")
        elif spec.transposed:     # o = i * S - P + t * DL  ->  i = (o + P - t * DL) / S when whole
            body += (f"        q{i} = o{i}[None, :] + CR{i} + P{i} - t{i}[:, None] * DL{i}\n"
                     f"        i{i} = q{i} // S{i}\n"
                     f"        ok = ok & (q{i} >= 0) & (q{i} % S{i} == 0)\n")
        else:
            body += f"        i{i} = (o{i}[None, :] + CR{i}) * S{i} - P{i} + t{i}[:, None] * DL{i}\n"
        body += f"        ok = ok & (i{i} >= 0) & (i{i} < L{i})\n"
    offset = " + ".join(f"i{i}.to(tl.int64) * s_x{i}" for i in range(D))
    body += (f"        a_t = tl.load(x_rows[None, :] + c_idx[:, None].to(tl.int64) * s_xc + {offset}, mask=ok, "
             "other=0.0)\n"
             "        b = tl.load(w_cols + ks[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)\n"
             + _multiply("tl.trans(a_t)"))
    return head + body + _store(spec)


def _multiply(a: str) -> str:
    """The K step's product of A (``a``, an expression) and the weight tile b: 3xTF32 with the
    weight given as its TF32 parts (SPLIT_B, as the GEMM template's), else tl.dot at PRECISION."""
    return ("        if SPLIT_B:  # b holds the weight's TF32 part: its remainder is loaded beside it, A splits here\n"
            "            b_lo = tl.load(wlo_cols + ks[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)\n"
            f"            acc, small = tf32x3_split_step({a}, b, b_lo, acc, small)\n"
            "        else:\n"
            f"            acc = tl.dot({a}, b, acc, input_precision=PRECISION)\n")


def _channels_last_step(spec: ConvSpec) -> str:
    """One K step of the channels-last variant: K = (tap, channel), channels fastest, so a row
    of the A tile is BLOCK_K neighbouring channels of one input position (one contiguous run
    in the channels-last input) and A reaches tl.dot K-major, as Hopper's TF32 MMA reads it."""
    D = spec.dims
    text = ("        # column k -> (kernel tap, input channel c), channels innermost (the channels-last input)\n"
            "        c_idx = ks % Cg\n        t = ks // Cg\n")
    for i in reversed(range(D)):
        text += f"        t{i} = t % KS{i}\n        t = t // KS{i}\n"
    text += ("        # A [BLOCK_M, BLOCK_K]: channels along the fast axis, contiguous in memory\n"
             "        ok = m_ok[:, None] & k_ok[None, :]\n")
    for i in range(D):
        text += (f"        i{i} = (o{i}[:, None] + CR{i}) * S{i} - P{i} + t{i}[None, :] * DL{i}\n"
                 f"        ok = ok & (i{i} >= 0) & (i{i} < L{i})\n")
    offset = " + ".join(f"i{i}.to(tl.int64) * s_x{i}" for i in range(D))
    return text + (f"        a = tl.load(x_rows[:, None] + c_idx[None, :].to(tl.int64) * s_xc + {offset}, mask=ok, "
                   "other=0.0)\n"
                   "        b = tl.load(w_cols + ks[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)\n"
                   + _multiply("a"))


def _store(spec: ConvSpec) -> str:
    D = spec.dims
    body = ("    if SPLIT_B:\n        acc += tf32x3_small_sum(small)\n"
            "\n    out_ok = m_ok[:, None] & n_ok[None, :]\n"
            "    co = g * Fg + offs_n  # absolute output channel\n"
            "    y_off = n_idx[:, None].to(tl.int64) * s_yn + co[None, :].to(tl.int64) * s_yc + "
            + " + ".join(f"o{i}[:, None].to(tl.int64) * s_y{i}" for i in range(D)) + "\n")
    body += extras_code(spec, "n_idx[:, None]", "co[None, :]", [f"o{i}[:, None]" for i in range(D)], "out_ok",
                        ("co.to(tl.int64) * s_e{i}_1", "n_ok", "[None, :]"))
    return body + "    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=out_ok)\n"


def _launcher(spec: ConvSpec) -> str:
    D, name = spec.dims, spec.name
    extras = [f"e{i}" for i in range(spec.n_extra)]
    what = "Transposed convolution" if spec.transposed else "Convolution"
    w_layout = "[C_in, C_out / groups, *KS]" if spec.transposed else "[C_out, C_in / groups, *KS]"
    text = (f"def {name}(x, w, {''.join(f'{e}, ' for e in extras)}precision=None, split_b=None):\n"
            f"    \"\"\"{what} of x [N, C_in, {', '.join(spatial('L', D))}] with weight {w_layout}, "
            "epilogue fused.\"\"\"\n" + launcher_sizes(spec, name))
    if spec.phases:
        text += ("    T = [-(-KS[d] // S[d]) for d in range(D)]  # taps per residue\n"
                 "    PH, TT = 1, 1\n"
                 "    for d in range(D):\n"
                 "        PH, TT = PH * S[d], TT * T[d]\n"
                 "    K = Cg * TT\n"
                 "    wg = torch.empty((PH, G, Fg, K), device=x.device, dtype=x.dtype)\n"
                 f"    {name}_phase_weight_kernel[(_cdiv(wg.numel(), 1024),)](\n"
                 "        w, wg, wg.numel(), G, Fg, Cg, *w.stride(),\n"
                 "        " + ", ".join(f"KS{i}=KS[{i}], S{i}=S[{i}], T{i}=T[{i}]" for i in range(D))
                 + ", BLOCK=1024)\n"
                 "    M = Nb  # the largest phase (phase 0) sizes the grid\n"
                 "    for d in range(D):\n"
                 "        M *= -(-O[d] // S[d])\n")
    elif spec.transposed:
        text += ("    PH = 1\n"
                 "    # [C_in, Fg, *KS] -> [G, Fg, Cg * prod(KS)]: a copy of the weight only, so B is K-major\n"
                 "    wg = w.reshape(G, Cg, Fg, -1).permute(0, 2, 1, 3).contiguous().reshape(G, Fg, -1)\n"
                 "    K = wg.shape[2]\n    M = Nb\n    for o in O:\n        M *= o\n")
    elif spec.channels_last:
        text += ("    PH = 1\n"
                 "    # [C_out, Cg, *KS] -> [G, Fg, *KS, Cg]: K = (taps, channels), channels fastest (the weight only)\n"
                 "    wg = w.reshape(G, Fg, Cg, -1).permute(0, 1, 3, 2).contiguous().reshape(G, Fg, -1)\n"
                 "    # the input channels-last, in one pass unless it is already: channels contiguous\n"
                 "    x = k_major(x.reshape(Nb, C_in, -1), rows_are_k=True).reshape(x.shape)\n"
                 "    K = wg.shape[2]\n    M = Nb\n    for o in O:\n        M *= o\n")
    else:
        text += ("    PH = 1\n"
                 "    wg = w.reshape(G, Fg, -1).contiguous()       # already [C_out, Cg * prod(KS)]: a view\n"
                 "    K = wg.shape[2]\n    M = Nb\n    for o in O:\n        M *= o\n")
    consts = ", ".join(f"KS{i}={spec.kernel_size[i]}, S{i}={spec.stride[i]}, P{i}={spec.padding[i]}, "
                       f"DL{i}={spec.dilation[i]}" for i in range(D))
    if spec.phases:
        consts += ", " + ", ".join(f"T{i}=T[{i}]" for i in range(D))
    text += (f"    y = torch.empty((Nb, Fg * G, *O), device=x.device, dtype=x.dtype)\n"
             f"    extras = [e.expand(y.shape) for e in ({''.join(f'{e}, ' for e in extras)})]\n"
             "    e_st = [s for e in extras for s in e.stride()]\n"
             + extra_flags("[0] + list(range(2, D + 2))") +
             "    if precision is None:\n"
             "        precision = (\"tf32x3\" if x.is_cuda else \"ieee\") if x.dtype == torch.float32 else \"tf32\"\n"
             "    # split_b: 3xTF32 with the weight split into TF32 parts once, in one pass, A in the K loop; the\n"
             "    # CUDA default for 2-D convolutions (H100, 2026-12-07, bench/conv_variants.py: 3-14% faster\n"
             "    # in all 10 2-D drafts; 5-25% slower in the 3-D and transposed ones, which keep the in-loop split)\n"
             "    if split_b is None:\n"
             f"        split_b = x.is_cuda and {split_default(spec)!r}\n"
             "    split_b = bool(split_b) and precision == \"tf32x3\"\n"
             "    wlo = wg\n"
             "    if split_b:   # tf32_parts takes [..., K, N], returns K-major views: the weight stays [..., Fg, K]\n"
             "        wg, wlo = (t.transpose(-1, -2) for t in tf32_parts(wg.transpose(-1, -2)))\n"
             "    BM, BN, BK, warps, stages = pick_tile(CONV_TILES, x.is_cuda, M, Fg, K,\n"
             "                                          lambda bm, bn: G * PH * _cdiv(M, bm) * _cdiv(Fg, bn))\n"
             "    BN = min(BN, max(16, _pow2(Fg)))\n"
             "    BK = min(BK, max(16, _pow2(K)))\n"
             "    grid = (_cdiv(M, BM) * _cdiv(Fg, BN), G * PH)\n"
             f"    {name}_kernel[grid](\n"
             f"        x, wg, wlo, y, {''.join(f'extras[{i}], ' for i in range(spec.n_extra))}Nb, M, G, Fg, K, Cg, "
             "*L, *O, *CR, *x.stride(), *y.stride(), *e_st,\n"
             f"        {consts},\n"
             "        BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, PRECISION=precision, SPLIT_B=split_b, num_warps=warps,\n"
             "        num_stages=stages, **e_ch)\n"
             "    return y\n")
    return text


def split_default(spec: ConvSpec) -> bool:
    """Whether the launcher splits the weight into TF32 parts before the kernel by default on CUDA."""
    return spec.dims == 2 and not spec.transposed


def render_conv(spec: ConvSpec) -> Rendered:
    parts = [table_source("CONV_TILES", CONV_TILES), PICK_TILE, TF32X3_SPLIT]
    if spec.phases:
        parts.append(_phase_weight(spec))
    if spec.channels_last:
        parts.append(TRANSPOSE_KERNEL)
    parts.append(_kernel(spec))
    transformations = ["implicit_gemm", "tiling", "fp32_accumulation", "tf32x3", "k_major_operands"]
    if spec.phases:
        transformations.append("sub_pixel_phases")
    if spec.channels_last:
        transformations.append("channels_last")
    if spec.epilogue:
        transformations.append("epilogue_fusion")
    if split_default(spec):
        transformations.append("tf32_split_pass")     # the launcher's CUDA path (split_b)
    notes = ["dot precision: tf32x3 (3xTF32) on CUDA for fp32, ieee under the CPU interpreter"]
    return rendered(parts, _launcher(spec), spec.name, transformations, notes)
