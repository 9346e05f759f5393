"""Template skill: rowwise (piped). Layer norm over many long rows, the next rows copied ahead.

Technique: a row of 16,384 fp32 is 64 KiB. Held in one program's registers at 16 warps
(83-126 registers a thread on sm_90) it leaves its SM one or two rows, and between a
row's load and its store the SM has nothing in flight. Here the grid is one program an
SM, and each program takes every grid-th row in a ``tl.range(..., num_stages=STAGES)``
loop: Triton's software pipeliner turns the row's loads into ``cp.async`` copies into
shared memory, STAGES - 1 rows ahead (two 64 KiB buffers at three stages), so the next
rows stream in while this one is reduced and written. The weight and bias are the same
for every row: loaded once before the loop and held in registers (32 warps: 16 values of
each a thread). STAGES and the warps come from ``CONFIGS``; the launcher lowers the
stages where the copies would not fit shared memory.

Bytes and FLOPs: x is read once and y written once, and the weight and bias once a
program: 2 * 384 KiB here, the roofline floor. About 8 FLOPs an element: memory-bound.

Fusion points: a prologue on the row (a residual add) and the per-element epilogue
(an activation, a residual) are computed on the registers before the one store;
per-row operands (a scale a row) are loaded in the loop, once a row. Rows longer
than the registers hold (``row_limit``) make the variant unavailable.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 6
dim = 16384


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


# CONFIGS: yields to another region's list in the same module
# The pipelined rows' stages (rows copied ahead, plus the one in registers) and warps. The
# kernel launches CONFIGS[0]; on a GPU the configuration search verifies the others and pins
# the fastest.
CONFIGS = [
    triton.Config({"STAGES": 3}, num_warps=32),
    triton.Config({"STAGES": 2}, num_warps=32),
    triton.Config({"STAGES": 2}, num_warps=16),
    triton.Config({"STAGES": 1}, num_warps=16),
    triton.Config({"STAGES": 1}, num_warps=32),
]


@triton.jit
def rowwise_0_kernel(
    in0_ptr,               # operand 0 (input), lane-level
    in1_ptr,               # operand 1 (param), lane-level, the same for every row
    in2_ptr,               # operand 2 (param), lane-level, the same for every row
    out0_ptr,              # output 0, lane-level
    n0,                    # domain size of dim 0
    n1,                    # domain size of dim 1 (reduced)
    in0_s0, in0_s1,        # operand 0's strides (0: broadcast)
    in1_s0, in1_s1,        # operand 1's strides (0: broadcast)
    in2_s0, in2_s1,        # operand 2's strides (0: broadcast)
    out0_s0, out0_s1,      # output 0's strides
    n_rows,                # rows (product of the kept sizes)
    n_red,                 # elements per row
    BLOCK_R: tl.constexpr, # lanes: the row, a power of two >= n_red
    STAGES: tl.constexpr,  # rows in the pipeline: STAGES - 1 copied ahead into shared memory
):
    lanes = tl.arange(0, BLOCK_R)
    r = 0 + lanes
    rmask = r < n_red
    i1 = r
    in0_lane = i1 * in0_s1
    in1_lane = i1 * in1_s1
    in2_lane = i1 * in2_s1
    out0_lane = i1 * out0_s1
    v1 = tl.load(in1_ptr + in1_lane, mask=rmask, other=0).to(tl.float32)   # the same for every row: loaded once
    v2 = tl.load(in2_ptr + in2_lane, mask=rmask, other=0).to(tl.float32)   # the same for every row: loaded once
    for row_id in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        row = tl.cast(row_id, tl.int64)   # int64: row offsets may pass 2**31
        rest = row
        i0 = rest % n0
        rest = rest // n0
        in0_row = i0 * in0_s0
        in1_row = i0 * in1_s0
        in2_row = i0 * in2_s0
        out0_row = i0 * out0_s0
        v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
        v3 = tl.sum(tl.where(rmask, v0, 0.0), axis=0) / n_red
        v4 = (v0 - v3)
        v5 = (v4 * v4)
        v6 = tl.sum(tl.where(rmask, v5, 0.0), axis=0) / n_red
        v8 = (v6 + 1e-05)
        v9 = tl.rsqrt(v8)
        v10 = (v4 * v9)
        v11 = (v10 * v1)
        v12 = (v11 + v2)
        tl.store(out0_ptr + out0_row + out0_lane, v12.to(out0_ptr.dtype.element_ty), mask=rmask)


def rowwise_0(a0, a1, a2):
    """rowwise: layer_norm; persistent programs, the next rows copied ahead into shared memory."""
    domain = _broadcast(a0.shape, a1.shape, a2.shape)
    if len(domain) != 2:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 2")
    n_rows = domain[0]
    n_red = domain[1]
    if n_red > 16384:
        raise ValueError(f"rows of {n_red} elements exceed 16384: this kernel holds each row in registers; lower the task at this size for the looped variant")
    if any(_strides(a1, domain)[d] and domain[d] > 1 for d in (0,)):
        raise ValueError("a1 varies over the rows: this kernel loads it once for every row; "
                         "lower the task at this size")
    if any(_strides(a2, domain)[d] and domain[d] > 1 for d in (0,)):
        raise ValueError("a2 varies over the rows: this kernel loads it once for every row; "
                         "lower the task at this size")
    out0 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    own = "STAGES" in CONFIGS[0].kwargs      # else the list is another region's: the table's first row
    stages, warps = (CONFIGS[0].kwargs["STAGES"], CONFIGS[0].num_warps) if own else (3, 32)
    block_r = _pow2(n_red)
    # the rows copied ahead must fit shared memory beside the kernel's own
    stages = max(1, min(stages, 1 + 196608 // max(1, block_r * (a0.element_size()))))
    programs = torch.cuda.get_device_properties(a0.device).multi_processor_count if a0.device.type == "cuda" else 4
    call_warps = warps if block_r >= 32 * warps else 4   # a short row (a smaller size): 4 warps
    if n_rows > 0 and n_red > 0:
        rowwise_0_kernel[(min(n_rows, programs),)](a0, a1, a2, out0, *domain, *_strides(a0, domain), *_strides(a1, domain), *_strides(a2, domain), *out0.stride(), n_rows, n_red, BLOCK_R=block_r, STAGES=stages, num_warps=call_warps)
    return out0,


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        t12, = rowwise_0(x, self.ln.weight, self.ln.bias)
        return t12
