"""Direct convolution: depthwise and grouped convolutions with few channels per group, no tl.dot.

Technique. When a group's GEMM is narrow (a depthwise conv has one output channel and
prod(KS) taps per group), an implicit GEMM pads every tl.dot to 16 columns and 16 K
lanes and does 16x to 30x the useful work. Here each program owns a tile of BLOCK_C
output channels x BLOCK_P output positions of one image (positions flattened, the
innermost spatial dim fastest, so each row of the tile is a contiguous run of the
output and of the input row it reads), and accumulates in fp32:

    for c in the group's Cg input channels:         (1 for a depthwise conv)
        for each of the prod(KS) taps (unrolled):
            acc += w[co, c, tap] (one value per channel) * x[n, ci, o * S - P + tap * DL]

Every tap's load is a shifted window of the same input rows, so after the first tap
the input comes from L1/L2: DRAM traffic is about input + output (+ a halo), and the
op is memory-bound at (input + output) * dtype bytes for 2 * Cg * prod(KS) FLOPs per
output. Transposed convolutions gather o = i * S - P + t * DL as the implicit GEMM
does, with a divisibility mask. A slice of the output right after the convolution (a
causal conv1d's ``[..., :-k]``) is folded in as a crop, so only kept outputs are
computed.

Fusion points: bias, activations, residuals and per-channel scales run on the fp32
tile before its one store, as in the implicit GEMM's epilogue. The tile comes from
``tiles.DIRECT_TILES`` (positions per image, output channels).
"""
from __future__ import annotations

from kernelrag.draft.lower.conv import ConvSpec, extra_flags, extra_params, extras_code, launcher_sizes, spatial
from kernelrag.draft.lower.gemm_spec import Rendered, rendered
from kernelrag.draft.lower.tiles import DIRECT_TILES, PICK_TILE, table_source


def _kernel(spec: ConvSpec) -> str:
    D, name = spec.dims, spec.name
    L, O, CR = spatial("L", D), spatial("O", D), spatial("CR", D)
    extra_args, extra_strides = extra_params(spec)
    head = (f"@triton.jit\ndef {name}_direct_kernel(\n"
            f"    x_ptr,  # input [N, C_in, {', '.join(L)}] through its strides\n"
            f"    w_ptr,  # weight {'[C_in, Fg, *KS]' if spec.transposed else '[C_out, Cg, *KS]'}, contiguous\n"
            f"    y_ptr,  # output [N, C_out, {', '.join(O)}], contiguous\n{extra_args}"
            "    C_out, Fg, Cg, P_total,  # output channels, per group; input channels per group; positions\n"
            f"    {', '.join(L + O + CR)},  # input sizes, output sizes (after a crop), crop starts\n"
            f"    s_xn, s_xc, {', '.join(spatial('s_x', D))},  # element strides of the input\n{extra_strides}"
            + "".join(f"    KS{i}: tl.constexpr, S{i}: tl.constexpr, P{i}: tl.constexpr, DL{i}: tl.constexpr,"
                      f"  # taps, stride, padding, dilation of dim {i}\n" for i in range(D))
            + "    BLOCK_C: tl.constexpr,  # output channels per program\n"
              "    BLOCK_P: tl.constexpr,  # output positions per program (a run of the flattened output)\n"
              "):\n")
    taps = " * ".join(spatial("KS", D))
    body = ("    pid = tl.program_id(0)  # position blocks fastest: neighbours share input rows and weights\n"
            "    num_p = tl.cdiv(P_total, BLOCK_P)\n"
            "    num_c = tl.cdiv(C_out, BLOCK_C)\n"
            "    offs_p = (pid % num_p) * BLOCK_P + tl.arange(0, BLOCK_P)\n"
            "    co = ((pid // num_p) % num_c) * BLOCK_C + tl.arange(0, BLOCK_C)\n"
            "    n = pid // (num_p * num_c)\n"
            "    p_ok = offs_p < P_total\n    c_ok = co < C_out\n"
            "    r = offs_p\n")
    for i in reversed(range(1, D)):
        body += f"    o{i} = r % O{i}\n    r = r // O{i}\n"
    body += "    o0 = r  # (past P_total only where masked)\n"
    body += ("    g = co // Fg  # each output channel's group\n"
             "    x_n = x_ptr + n.to(tl.int64) * s_xn\n"
             "    acc = tl.zeros((BLOCK_C, BLOCK_P), dtype=tl.float32)\n"
             "    for c in range(0, Cg):\n"
             "        ci = g * Cg + c  # the input channel, per output channel\n"
             "        x_c = x_n + ci.to(tl.int64)[:, None] * s_xc\n")
    if spec.transposed:     # weight [C_in, Fg, *KS]: w[ci, co - g * Fg, tap]
        body += f"        w_c = w_ptr + (ci.to(tl.int64) * Fg + (co - g * Fg)) * ({taps})\n"
    else:                   # weight [C_out, Cg, *KS]: w[co, c, tap]
        body += f"        w_c = w_ptr + (co.to(tl.int64) * Cg + c) * ({taps})\n"
    ind, tap = "        ", ""
    for i in range(D):
        prev = "p_ok" if i == 0 else f"ok{i - 1}"
        body += f"{ind}for t{i} in tl.static_range(KS{i}):\n"
        ind += "    "
        if spec.transposed:
            body += (f"{ind}q{i} = o{i} + CR{i} + P{i} - t{i} * DL{i}\n{ind}i{i} = q{i} // S{i}\n"
                     f"{ind}ok{i} = {prev} & (q{i} >= 0) & (q{i} % S{i} == 0) & (i{i} < L{i})\n")
        else:
            body += (f"{ind}i{i} = (o{i} + CR{i}) * S{i} - P{i} + t{i} * DL{i}\n"
                     f"{ind}ok{i} = {prev} & (i{i} >= 0) & (i{i} < L{i})\n")
        tap = f"t{i}" if i == 0 else f"({tap}) * KS{i} + t{i}"
    at = " + ".join(f"i{i}.to(tl.int64) * s_x{i}" for i in range(D))
    body += (f"{ind}wv = tl.load(w_c + {tap}, mask=c_ok, other=0.0).to(tl.float32)  # one weight per channel\n"
             f"{ind}xv = tl.load(x_c + ({at})[None, :], mask=c_ok[:, None] & ok{D - 1}[None, :], other=0.0)\n"
             f"{ind}acc += wv[:, None] * xv.to(tl.float32)\n")
    body += "    out_ok = c_ok[:, None] & p_ok[None, :]\n"
    body += extras_code(spec, "n", "co[:, None]", [f"o{i}[None, :]" for i in range(D)], "out_ok",
                        ("n.to(tl.int64) * s_e{i}_0 + co.to(tl.int64) * s_e{i}_1", "c_ok", "[:, None]"))
    body += ("    # the output is allocated contiguous: the flattened position is its offset in a plane\n"
             "    y_off = (n.to(tl.int64) * C_out + co[:, None]) * P_total + offs_p[None, :]\n"
             "    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=out_ok)\n")
    return head + body


def _launcher(spec: ConvSpec) -> str:
    D, name = spec.dims, spec.name
    extras = [f"e{i}" for i in range(spec.n_extra)]
    consts = ", ".join(f"KS{i}={spec.kernel_size[i]}, S{i}={spec.stride[i]}, P{i}={spec.padding[i]}, "
                       f"DL{i}={spec.dilation[i]}" for i in range(D))
    return (f"def {name}(x, w, {''.join(f'{e}, ' for e in extras)}precision=None):\n"
            f"    \"\"\"{'Transposed convolution' if spec.transposed else 'Convolution'} of x [N, C_in, "
            f"{', '.join(spatial('L', D))}] computed directly (few channels per group), epilogue fused; "
            "precision is unused (no tl.dot).\"\"\"\n"
            + launcher_sizes(spec, name) +
            "    w = w.contiguous()  # a view for an nn.Conv weight\n"
            "    C_out = Fg * G\n"
            "    y = torch.empty((Nb, C_out, *O), device=x.device, dtype=x.dtype)\n"
            f"    extras = [e.expand(y.shape) for e in ({''.join(f'{e}, ' for e in extras)})]\n"
            "    e_st = [s for e in extras for s in e.stride()]\n"
            + extra_flags("range(2, D + 2)") +
            "    P_total = 1\n"
            "    for o in O:\n"
            "        P_total *= o\n"
            "    BC, BP, _, warps, _ = pick_tile(DIRECT_TILES, x.is_cuda, P_total, C_out, Cg, lambda bc, bp: 0)\n"
            "    BP = min(BP, _pow2(P_total))\n"
            "    BC = min(BC, _pow2(C_out))\n"
            "    grid = (_cdiv(P_total, BP) * _cdiv(C_out, BC) * Nb,)\n"
            f"    {name}_direct_kernel[grid](\n"
            f"        x, w, y, {''.join(f'extras[{i}], ' for i in range(spec.n_extra))}C_out, Fg, Cg, P_total, "
            "*L, *O, *CR, *x.stride(), *e_st,\n"
            f"        {consts}, BLOCK_C=BC, BLOCK_P=BP, num_warps=warps, **e_ch)\n"
            "    return y\n")


def render_direct_conv(spec: ConvSpec) -> Rendered:
    parts = [table_source("DIRECT_TILES", DIRECT_TILES), PICK_TILE, _kernel(spec)]
    transformations = ["direct_convolution", "tiling", "fp32_accumulation"]
    if spec.epilogue:
        transformations.append("epilogue_fusion")
    return rendered(parts, _launcher(spec), spec.name, transformations)
