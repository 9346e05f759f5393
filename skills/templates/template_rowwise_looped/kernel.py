"""Template skill: rowwise (looped). Scaled softmax over rows walked in chunks.

Technique: one program per row. The row is walked in BLOCK_R chunks (1024 lanes, 2048
at 16 warps from 8192 elements) instead of being held. The reductions are grouped into
passes by dependency level. A sum that depends on a max only through exp(y - max(y))
rides in the max's pass as an online softmax: per lane, a running max and a running sum,
rescaled by exp(old max - new max) whenever the max grows. Softmax therefore takes two
passes, statistics then outputs, not three. Each pass recomputes its prologue
(x * 0.125) from the operand instead of storing it: re-reading the row, usually from
L2, costs less than writing and reading an intermediate.

Bytes and FLOPs: 32 rows x 8192 = 262,144 elements. The minimum is one read and one
write, 2.1 MB. The looped kernel reads each row twice, 3.1 MB when the second read
misses L2, and close to the minimum when the rows in flight fit in L2. About 6 FLOPs
per element (scale, subtract, exp, add, divide) is 1.6 MFLOP: memory-bound. On the H200
at 32768 columns this variant read 6.42 GB where torch.compile's kernel read 4.27 GB
(bench/NOTES.md item 17): the second read is where it loses.

Fusion points: prologue and epilogue as in the registers variant, but each is paid
once per pass. Riders (online softmax, shifted variance) share their base's pass, and
every other dependent reduction adds one pass. Scans carry their running total across
chunks in the last pass, which also writes the full-size outputs.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 32
dim = 8192


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


# The row-wise kernels' looped passes over rows of 8192 elements or more launch
# CONFIGS[0]; on a GPU the configuration search verifies the others and pins the fastest.
CONFIGS = [
    triton.Config({"BLOCK_R": 4096}, num_warps=16),
    triton.Config({"BLOCK_R": 4096}, num_warps=32),
    triton.Config({"BLOCK_R": 8192}, num_warps=16),
    triton.Config({"BLOCK_R": 2048}, num_warps=16),
    triton.Config({"BLOCK_R": 2048}, num_warps=8),
    triton.Config({"BLOCK_R": 1024}, num_warps=4),
]


@triton.jit
def _nan_max(a, b):
    # max as torch computes it, a NaN wins: tl.maximum and tl.max drop NaNs on a GPU
    return tl.where((a != a) | (b != b), float("nan"), tl.maximum(a, b))


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
        v2 = (v0 * 0.125)
        v3 = tl.reduce(tl.where(rmask, v2, float('-inf')), 0, _nan_max)
        v4 = (v2 - v3)
        v5 = tl.exp(v4)
        v6 = tl.sum(tl.where(rmask, v5, 0.0), axis=0)
        v7 = tl.exp(v4)
        v8 = (v7 / v6)
        tl.store(out0_ptr + out0_row + out0_lane, v8.to(out0_ptr.dtype.element_ty), mask=rmask)
    else:
        # pass 0: max, sum (online_softmax) over the row, the prologue recomputed per chunk
        acc1 = tl.full([BLOCK_R], float('-inf'), tl.float32)
        acc4 = tl.full([BLOCK_R], 0.0, tl.float32)
        for start in range(0, n_red, BLOCK_R):
            r = start + lanes
            rmask = r < n_red
            i1 = r
            in0_lane = i1 * in0_s1
            out0_lane = i1 * out0_s1
            v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
            v2 = (v0 * 0.125)
            x_max = tl.where(rmask, v2, float('-inf'))
            grows = x_max > acc1
            m_new = tl.maximum(acc1, x_max)
            e = tl.exp(tl.where(grows, acc1 - x_max, x_max - acc1))
            e = tl.where(m_new == float('-inf'), 0.0, e)   # no finite value yet: sums stay 0
            acc4 = tl.where(grows, acc4 * e + 1.0, acc4 + e)
            acc1 = m_new
        v3 = tl.reduce(acc1, 0, _nan_max)
        v6 = tl.sum(acc4 * tl.exp(acc1 - v3), axis=0)
        # last pass: the outputs
        for start in range(0, n_red, BLOCK_R):
            r = start + lanes
            rmask = r < n_red
            i1 = r
            in0_lane = i1 * in0_s1
            out0_lane = i1 * out0_s1
            v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
            v2 = (v0 * 0.125)
            v4 = (v2 - v3)
            v7 = tl.exp(v4)
            v8 = (v7 / v6)
            tl.store(out0_ptr + out0_row + out0_lane, v8.to(out0_ptr.dtype.element_ty), mask=rmask)


def rowwise_0(a0):
    """rowwise: mul > softmax; one program per row of the kept dims."""
    domain = _broadcast(a0.shape)
    if len(domain) != 2:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 2")
    n_rows = domain[0]
    n_red = domain[1]
    out0 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    fits = False
    block_r = min(4096 if n_red >= 8192 else 1024, _pow2(n_red))
    num_warps = min(16, max(1, block_r // 512)) if fits else (16 if n_red >= 8192 else 4)
    if not fits and n_red >= 8192:   # long rows: the launch configuration CONFIGS[0] names
        block_r = min(CONFIGS[0].kwargs["BLOCK_R"], _pow2(n_red))
        num_warps = CONFIGS[0].num_warps
    if n_rows > 0 and n_red > 0:
        rowwise_0_kernel[(n_rows,)](a0, out0, *domain, *_strides(a0, domain), *out0.stride(), n_red, BLOCK_R=block_r, ROW_IN_REGISTERS=fits, num_warps=num_warps)
    return out0,


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        t8, = rowwise_0(x)
        return t8
