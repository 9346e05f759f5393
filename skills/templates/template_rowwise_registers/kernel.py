"""Template skill: rowwise (registers). Layer norm over the last dim with weight and bias.

Technique: one program per row of the kept dims. The whole row (1024 lanes here, up to
8192, or 16384 while the row operands' values fit 96 registers a thread at 16 warps) is
one block held in registers: it is loaded once, both reductions (the mean, then the
mean of squared deviations) run as tree reductions over the block in fp32, and the
normalised, scaled and shifted values are stored once. The two-pass variance over
registers costs no extra memory traffic and has no sum(x^2) - n * mean^2
cancellation. The weight and bias are row operands with stride 0 along the kept dim.

Bytes and FLOPs: 256 rows x 1024 = 262,144 elements. x is read once and y written once:
2 * 1 MiB = 2.1 MB, plus 8 KB of weight and bias (held in L2 across rows). About 8
FLOPs per element (subtract, square, two accumulations, scale, shift) is 2.1 MFLOP:
memory-bound, with the floor at the minimum bytes. A longer row that does not fit
loops over chunks (the looped variant) and reads x once per pass instead.

Fusion points: the prologue is any elementwise chain on the operands, evaluated per
lane before the first reduction (x + residual before the norm). The epilogue is any
elementwise chain that mixes the row scalars and the lanes ((x - mu) * rstd * w + b,
then an activation or a residual), evaluated before the single store. A reduction
that reads another reduction's result stays in the same program: the row is already
in registers. Only a consumer that needs other rows (a GEMM) ends the region.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 256
dim = 1024


def _broadcast(*shapes):
    """The operands' broadcast shape: torch.broadcast_shapes' rule without its tracing checks."""
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for s in shapes:
        for d, n in enumerate(s, rank - len(s)):
            if n != 1:
                if out[d] not in (1, n):
                    raise ValueError(f"operands shaped {[tuple(s) for s in shapes]} do not broadcast")
                out[d] = n
    return tuple(out)


def _strides(t, domain):
    """t's strides over domain, 0 along a broadcast dim: t.expand(domain).stride() without the view."""
    pad = len(domain) - t.dim()
    shape, stride = t.shape, t.stride()
    return tuple(0 if d < pad or (shape[d - pad] == 1 and domain[d] != 1) else stride[d - pad]
                 for d in range(len(domain)))


def _pow2(n):
    """The least power of two >= n (0 for 0): triton.next_power_of_2 without its wrapper."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


@triton.jit
def rowwise_0_kernel(
    in0_ptr,                        # operand 0 (input), lane-level
    in1_ptr,                        # operand 1 (param), lane-level
    in2_ptr,                        # operand 2 (param), lane-level
    out0_ptr,                       # output 0, lane-level
    n0,                             # domain size of dim 0
    n1,                             # domain size of dim 1 (reduced)
    in0_s0, in0_s1,                 # operand 0's strides (0: broadcast)
    in1_s0, in1_s1,                 # operand 1's strides (0: broadcast)
    in2_s0, in2_s1,                 # operand 2's strides (0: broadcast)
    out0_s0, out0_s1,               # output 0's strides
    n_red,                          # elements per row (product of the reduced sizes)
    BLOCK_R: tl.constexpr,          # lanes per chunk; >= n_red when ROW_IN_REGISTERS
    ROW_IN_REGISTERS: tl.constexpr, # True: the whole row is one block, read once
):
    row = tl.program_id(0).to(tl.int64)   # int64: row offsets may pass 2**31
    rest = row
    i0 = rest % n0
    rest = rest // n0
    in0_row = i0 * in0_s0
    in1_row = i0 * in1_s0
    in2_row = i0 * in2_s0
    out0_row = i0 * out0_s0
    lanes = tl.arange(0, BLOCK_R)
    if ROW_IN_REGISTERS:
        r = 0 + lanes
        rmask = r < n_red
        i1 = r
        in0_lane = i1 * in0_s1
        in1_lane = i1 * in1_s1
        in2_lane = i1 * in2_s1
        out0_lane = i1 * out0_s1
        v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
        v3 = tl.sum(tl.where(rmask, v0, 0.0), axis=0) / n_red
        v4 = (v0 - v3)
        v5 = (v4 * v4)
        v6 = tl.sum(tl.where(rmask, v5, 0.0), axis=0) / n_red
        v8 = (v6 + 1e-05)
        v9 = tl.rsqrt(v8)
        v10 = (v4 * v9)
        v1 = tl.load(in1_ptr + in1_row + in1_lane, mask=rmask, other=0).to(tl.float32)
        v11 = (v10 * v1)
        v2 = tl.load(in2_ptr + in2_row + in2_lane, mask=rmask, other=0).to(tl.float32)
        v12 = (v11 + v2)
        tl.store(out0_ptr + out0_row + out0_lane, v12.to(out0_ptr.dtype.element_ty), mask=rmask)
    else:
        # pass 0: mean, mean (shifted_var) over the row, the prologue recomputed per chunk
        acc0 = tl.full([BLOCK_R], 0.0, tl.float32)
        acc3 = tl.full([BLOCK_R], 0.0, tl.float32)
        acc3_sq = tl.zeros([BLOCK_R], tl.float32)
        acc3_n = tl.zeros([BLOCK_R], tl.float32)
        acc3_k = tl.zeros([BLOCK_R], tl.float32)
        for start in range(0, n_red, BLOCK_R):
            r = start + lanes
            rmask = r < n_red
            i1 = r
            in0_lane = i1 * in0_s1
            in1_lane = i1 * in1_s1
            in2_lane = i1 * in2_s1
            out0_lane = i1 * out0_s1
            v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
            acc0 += tl.where(rmask, v0, 0.0)
            acc3_k = tl.where(start == 0, v0, acc3_k)
            dev = tl.where(rmask, v0 - acc3_k, 0.0)
            acc3 += dev
            acc3_sq += dev * dev
            acc3_n += rmask.to(tl.float32)
        v3 = tl.sum(acc0, axis=0) / n_red
        dmk = v3 - acc3_k
        v6 = tl.maximum(tl.sum(acc3_sq - 2.0 * dmk * acc3 + acc3_n * dmk * dmk, axis=0), 0.0) / n_red
        v8 = (v6 + 1e-05)
        v9 = tl.rsqrt(v8)
        # last pass: the outputs
        for start in range(0, n_red, BLOCK_R):
            r = start + lanes
            rmask = r < n_red
            i1 = r
            in0_lane = i1 * in0_s1
            in1_lane = i1 * in1_s1
            in2_lane = i1 * in2_s1
            out0_lane = i1 * out0_s1
            v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
            v1 = tl.load(in1_ptr + in1_row + in1_lane, mask=rmask, other=0).to(tl.float32)
            v2 = tl.load(in2_ptr + in2_row + in2_lane, mask=rmask, other=0).to(tl.float32)
            v4 = (v0 - v3)
            v10 = (v4 * v9)
            v11 = (v10 * v1)
            v12 = (v11 + v2)
            tl.store(out0_ptr + out0_row + out0_lane, v12.to(out0_ptr.dtype.element_ty), mask=rmask)


def rowwise_0(a0, a1, a2):
    """rowwise: layer_norm; one program per row of the kept dims."""
    domain = _broadcast(a0.shape, a1.shape, a2.shape)
    if len(domain) != 2:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 2")
    n_rows = domain[0]
    n_red = domain[1]
    out0 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    fits = n_red <= 16384
    block_r = _pow2(n_red) if fits else 4096 if n_red >= 8192 else 1024
    num_warps = min(16, max(1, block_r // 512)) if fits else (16 if n_red >= 8192 else 4)
    if n_rows > 0 and n_red > 0:
        rowwise_0_kernel[(n_rows,)](a0, a1, a2, out0, *domain, *_strides(a0, domain), *_strides(a1, domain), *_strides(a2, domain), *out0.stride(), n_red, BLOCK_R=block_r, ROW_IN_REGISTERS=fits, num_warps=num_warps)
    return out0,


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        t12, = rowwise_0(x, self.ln.weight, self.ln.bias)
        return t12
