"""Template skill: rowwise (split). Mean squared error over the whole tensor, in two stages.

Technique: a reduction of the whole tensor is a single row of 524,288 elements. With one
program per row, 131 of the 132 SMs would sit idle. Stage 1 runs n_rows x n_split
programs. Each one reduces one CHUNK of the row (the prologue (p - t) ** 2 included) to
one fp32 partial per reduction. Stage 2 runs one program per row: it combines the
partials (sum here; max, min and prod likewise), applies the mean's divisor and the row
epilogue, and stores the row outputs. The partials are few (n_split <= 1024), so the
second launch costs a few microseconds. Partials and combines are fp32 throughout.

Bytes and FLOPs: both inputs are read once, 2 * 2 MiB = 4.2 MB, plus n_split * 4 bytes
of partials written and read again. The output is 4 bytes. About 3 FLOPs per element
(subtract, square, add) is 1.6 MFLOP: memory-bound. With enough programs the floor is
the input bytes at full bandwidth, which one program per row could never reach.

Fusion points: everything before the reductions is a per-lane prologue of stage 1.
Everything after them is stage 2's epilogue on the combined values (the divisor, a
sqrt for a norm, a log for logsumexp). Only regions whose reductions all read the
operands directly qualify: no reduction of a reduction's result, no scan, no full-size
output. Those need the whole row in one program (the registers or looped variants).
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 512
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


def _cdiv(a, b):
    """ceil(a / b) for ints: triton.cdiv without its constexpr wrapper."""
    return -(-a // b)


def _pow2(n):
    """The least power of two >= n (0 for 0): triton.next_power_of_2 without its wrapper."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


@triton.jit
def rowwise_0_partial_kernel(
    in0_ptr,               # operand 0 (input), lane-level
    in1_ptr,               # operand 1 (input), lane-level
    n0,                    # domain size of dim 0 (reduced)
    n1,                    # domain size of dim 1 (reduced)
    in0_s0, in0_s1,        # operand 0's strides (0: broadcast)
    in1_s0, in1_s1,        # operand 1's strides (0: broadcast)
    part2_ptr,             # fp32 partials of reduction 2, (n_rows, n_split)
    n_red,                 # elements per row
    n_split,               # chunks per row
    chunk,                 # elements per chunk, a multiple of BLOCK_R
    BLOCK_R: tl.constexpr, # lanes per step
):
    row = tl.program_id(0).to(tl.int64)   # int64: row offsets may pass 2**31
    in0_row = 0
    in1_row = 0
    split = tl.program_id(1)
    lanes = tl.arange(0, BLOCK_R)
    acc2 = tl.full([BLOCK_R], 0.0, tl.float32)
    for start in range(split * chunk, split * chunk + chunk, BLOCK_R):
        r = start + lanes
        rmask = r < n_red
        lane_rest = r
        i1 = lane_rest % n1
        lane_rest = lane_rest // n1
        i0 = lane_rest % n0
        lane_rest = lane_rest // n0
        in0_lane = i0 * in0_s0 + i1 * in0_s1
        in1_lane = i0 * in1_s0 + i1 * in1_s1
        v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
        v1 = tl.load(in1_ptr + in1_row + in1_lane, mask=rmask, other=0).to(tl.float32)
        v2 = (v0 - v1)
        v3 = (v2 * v2)
        acc2 += tl.where(rmask, v3, 0.0)
    tl.store(part2_ptr + row * n_split + split, tl.sum(acc2, axis=0))


@triton.jit
def rowwise_0_kernel(
    in0_ptr,               # operand 0 (input), lane-level
    in1_ptr,               # operand 1 (input), lane-level
    n0,                    # domain size of dim 0 (reduced)
    n1,                    # domain size of dim 1 (reduced)
    in0_s0, in0_s1,        # operand 0's strides (0: broadcast)
    in1_s0, in1_s1,        # operand 1's strides (0: broadcast)
    part2_ptr,             # fp32 partials of reduction 2, (n_rows, n_split)
    out0_ptr,              # output 0, squeezed-level
    out0_s0, out0_s1,      # output 0's strides
    n_red,                 # elements per row (the mean's divisor)
    n_split,               # partials per row
    BLOCK_S: tl.constexpr, # lanes over the partials, >= n_split
):
    row = tl.program_id(0).to(tl.int64)   # int64: row offsets may pass 2**31
    in0_row = 0
    in1_row = 0
    out0_row = 0
    s = tl.arange(0, BLOCK_S)
    smask = s < n_split
    v4 = tl.sum(tl.load(part2_ptr + row * n_split + s, mask=smask, other=0.0), axis=0) / n_red
    tl.store(out0_ptr + out0_row, v4.to(out0_ptr.dtype.element_ty))


def rowwise_0(a0, a1):
    """rowwise: sub > pow > mean; two stages: chunk partials, then one program per row combines them."""
    domain = _broadcast(a0.shape, a1.shape)
    if len(domain) != 2:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 2")
    n_rows = 1
    n_red = domain[0] * domain[1]
    block_r = min(1024, _pow2(max(n_red, 1)))
    n_split = max(1, min(1024, _cdiv(n_red, block_r), _cdiv(1024, max(n_rows, 1))))
    chunk = _cdiv(_cdiv(n_red, n_split), block_r) * block_r
    n_split = _cdiv(n_red, chunk)
    out0 = torch.empty((), dtype=a0.dtype, device=a0.device)
    part2 = torch.empty((n_rows, n_split), dtype=torch.float32, device=a0.device)
    if n_rows > 0 and n_red > 0:
        rowwise_0_partial_kernel[(n_rows, n_split)](a0, a1, *domain, *_strides(a0, domain), *_strides(a1, domain), part2, n_red, n_split, chunk, BLOCK_R=block_r, num_warps=4)
        rowwise_0_kernel[(n_rows,)](a0, a1, *domain, *_strides(a0, domain), *_strides(a1, domain), part2, out0, *out0.view((1, 1,)).stride(), n_red, n_split, BLOCK_S=_pow2(n_split), num_warps=4)
    return out0,


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        t5, = rowwise_0(predictions, targets)
        return t5
