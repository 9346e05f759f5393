"""Template skill: rowwise (registers), scan. Exclusive prefix sum along rows as cumsum(x) - x.

Technique: one program per row, with the row held in registers (4096 lanes here).
tl.cumsum over the block is a work-efficient parallel scan inside the program, in fp32
(cumprod accumulates in fp64: a tree of partial products overflows fp32 early). The
exclusive form is the inclusive scan minus the element, one elementwise epilogue op, so
it costs nothing extra. A reverse scan walks the row from its end. Rows past the
registers limit loop over chunks and carry the running total from one chunk to the
next.

Bytes and FLOPs: 128 x 4096 = 524,288 elements. One read and one write is 4.2 MB, the
minimum. About 2 FLOPs per element (the scan's adds and the subtraction) is 1 MFLOP:
memory-bound. A scan through a library call followed by a separate subtraction would
write and read the full tensor once more.

Fusion points: a prologue (a mask applied as x * mask before a masked cumsum, a scale)
is evaluated per lane before the scan. The epilogue (the subtraction here, or any
elementwise chain mixing the scan with other lanes) is evaluated before the one store.
A scan over the domain adopts a preceding elementwise region as its prologue, so the
masked, exclusive and reverse forms are all one kernel.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 128
dim = 4096


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
    out0_ptr,                       # output 0, lane-level
    n0,                             # domain size of dim 0
    n1,                             # domain size of dim 1 (reduced)
    in0_s0, in0_s1,                 # operand 0's strides (0: broadcast)
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
    out0_row = i0 * out0_s0
    lanes = tl.arange(0, BLOCK_R)
    if ROW_IN_REGISTERS:
        r = 0 + lanes
        rmask = r < n_red
        i1 = r
        in0_lane = i1 * in0_s1
        out0_lane = i1 * out0_s1
        v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
        v1 = tl.cumsum(tl.where(rmask, v0, 0.0), axis=0)
        v2 = (v1 - v0)
        tl.store(out0_ptr + out0_row + out0_lane, v2.to(out0_ptr.dtype.element_ty), mask=rmask)
    else:
        # last pass: the outputs
        carry1 = tl.zeros((), tl.float32)
        for start in range(0, n_red, BLOCK_R):
            r = start + lanes
            rmask = r < n_red
            i1 = r
            in0_lane = i1 * in0_s1
            out0_lane = i1 * out0_s1
            v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
            v1 = tl.cumsum(tl.where(rmask, v0, 0.0), axis=0) + carry1
            carry1 += tl.sum(tl.where(rmask, v0, 0.0), axis=0)
            v2 = (v1 - v0)
            tl.store(out0_ptr + out0_row + out0_lane, v2.to(out0_ptr.dtype.element_ty), mask=rmask)


def rowwise_0(a0):
    """rowwise: cumsum > sub; one program per row of the kept dims."""
    domain = _broadcast(a0.shape)
    if len(domain) != 2:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 2")
    n_rows = domain[0]
    n_red = domain[1]
    out0 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    fits = n_red <= 8192
    block_r = _pow2(n_red) if fits else 4096 if n_red >= 8192 else 1024
    num_warps = min(16, max(1, block_r // 512)) if fits else (16 if n_red >= 8192 else 4)
    if n_rows > 0 and n_red > 0:
        rowwise_0_kernel[(n_rows,)](a0, out0, *domain, *_strides(a0, domain), *out0.stride(), n_red, BLOCK_R=block_r, ROW_IN_REGISTERS=fits, num_warps=num_warps)
    return out0,


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        t2, = rowwise_0(x)
        return t2
