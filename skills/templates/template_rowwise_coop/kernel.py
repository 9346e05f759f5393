"""Template skill: rowwise (coop). Log-softmax over long rows, chunks meeting inside one launch.

Technique: a row of 32,768 fp32 is 128 KiB, more than one program holds well (at 32 warps
a program holds it in registers, but then an SM has one row in flight and its loads and
stores never overlap). Each row is cut into chunks of BLOCK_R elements (8192 at 8 warps:
32 a thread) on consecutive programs of one launch. A program loads its chunk into
registers once, reduces it to partials (the chunk's max and its sum of exp(x - max)),
stores them, counts itself in at its row's counter (an atomic add with release
semantics) and spins (atomic reads with acquire semantics) until all of the row's
chunks have arrived. It then reads the row's partials past L1, combines them (each
chunk's sum rescaled by exp(max_c - max)) and writes its chunk's log-softmax from the
registers it holds. Programs are dispatched in launch order, so with at most one chunk a
row per SM the row's chunks are resident together; longer rows, and the CPU interpreter
(one program at a time), run the same kernel as two launches (PHASE 1, then 2).

Bytes and FLOPs: x is read once and y written once: 2 * 512 KiB here, the roofline
floor. A looped kernel over such rows reads the row twice (statistics, then output), and
torch.compile's three loops read it three times, the later ones from L2 when it still
holds the row. About 5 FLOPs an element: memory-bound.

Fusion points: the prologue (a scale, a mask) is computed once on the registers; the row epilogue (max, log of the sum) is computed by every chunk from the row's
partials, and row-level outputs are stored by the row's first chunk only; the
per-element epilogue runs before the one store. Regions whose reductions form one pass
qualify (sums and extremes with their variance and softmax riders).
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 4
dim = 32768


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


# The cooperative kernel's chunk: BLOCK_R elements held in registers. It launches CONFIGS[0];
# on a GPU the configuration search verifies the others and pins the fastest.
CONFIGS = [
    triton.Config({"BLOCK_R": 8192}, num_warps=8),
    triton.Config({"BLOCK_R": 4096}, num_warps=4),
    triton.Config({"BLOCK_R": 16384}, num_warps=16),
    triton.Config({"BLOCK_R": 8192}, num_warps=16),
    triton.Config({"BLOCK_R": 4096}, num_warps=8),
]


@triton.jit
def _nan_max(a, b):
    # max as torch computes it, a NaN wins: tl.maximum and tl.max drop NaNs on a GPU
    return tl.where((a != a) | (b != b), float("nan"), tl.maximum(a, b))


@triton.jit
def _arrive_and_wait(count_ptr, row, n_split):
    """Count this program's chunk in at its row and wait until all n_split have arrived.
    The partials stored before it are visible to the row's other programs after it."""
    tl.debug_barrier()                                    # every thread's partials are stored
    tl.atomic_add(count_ptr + row, 1, sem="release")
    seen = tl.atomic_add(count_ptr + row, 0, sem="acquire")
    while seen < n_split:
        seen = tl.atomic_add(count_ptr + row, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def rowwise_0_coop_kernel(
    in0_ptr,               # operand 0 (input), lane-level
    n0,                    # domain size of dim 0
    n1,                    # domain size of dim 1 (reduced)
    in0_s0, in0_s1,        # operand 0's strides (0: broadcast)
    out0_ptr,              # output 0, lane-level
    out0_s0, out0_s1,      # output 0's strides
    ws_ptr,                # fp32 workspace, zeroed: each reduction's partials (n_rows, n_split), then the int32 chunks arrived a row
    n_red,                 # elements per row
    n_split,               # chunks per row
    BLOCK_R: tl.constexpr, # elements per chunk, held in registers
    BLOCK_S: tl.constexpr, # lanes over the chunks, >= n_split
    PHASE: tl.constexpr,   # 0: one launch with the wait; 1 then 2: two launches, no wait
    EVEN: tl.constexpr,    # every chunk full: no lane masked
):
    pid = tl.program_id(0)
    row = (pid // n_split).to(tl.int64)   # a row's chunks are consecutive
    split = pid % n_split
    n_cells = (tl.num_programs(0) // n_split).to(tl.int64) * n_split   # n_rows * n_split
    part0_ptr = ws_ptr
    part3_ptr = ws_ptr + n_cells
    count_ptr = (ws_ptr + 2 * n_cells).to(tl.pointer_type(tl.int32), bitcast=True)
    rest = row
    i0 = rest % n0
    rest = rest // n0
    in0_row = i0 * in0_s0
    out0_row = i0 * out0_s0
    lo = split * BLOCK_R
    lanes = tl.arange(0, BLOCK_R)
    chunk = BLOCK_R
    r = lo + lanes
    rmask = tl.full([BLOCK_R], 1, tl.int1) if EVEN else r < n_red
    i1 = r
    in0_lane = i1 * in0_s1
    out0_lane = i1 * out0_s1
    # the chunk in registers: its loads and prologue
    v0 = tl.load(in0_ptr + in0_row + in0_lane, mask=rmask, other=0).to(tl.float32)
    if PHASE != 2:   # the chunk's partials
        n_c = tl.minimum(chunk, n_red - lo).to(tl.float32)   # elements of this chunk
        p0 = tl.reduce(tl.where(rmask, v0, float('-inf')), 0, _nan_max)
        m_ref = tl.where(p0 == float('-inf'), 0.0, p0)
        p3 = tl.sum(tl.where(rmask, tl.exp(v0 - m_ref), 0.0), axis=0)
        tl.store(part0_ptr + row * n_split + split, p0)
        tl.store(part3_ptr + row * n_split + split, p3)
    if PHASE == 0:   # one launch: wait for the row's other chunks
        _arrive_and_wait(count_ptr, row, n_split)
    if PHASE != 1:   # the row's statistics from every chunk's partials, then this chunk's outputs
        s = tl.arange(0, BLOCK_S)
        smask = s < n_split
        n_c = tl.minimum(chunk, n_red - s * chunk).to(tl.float32)
        q0 = tl.load(part0_ptr + row * n_split + s, mask=smask, other=float('-inf'), cache_modifier=".cg")
        v1 = tl.reduce(q0, 0, _nan_max)
        q3 = tl.load(part3_ptr + row * n_split + s, mask=smask, other=0.0, cache_modifier=".cg")
        m_ref = tl.where(v1 == float('-inf'), 0.0, v1)
        q_ref = tl.where(q0 == float('-inf'), m_ref, q0)
        v4 = tl.sum(tl.where(smask, q3 * tl.exp(q_ref - m_ref), 0.0), axis=0)
        v5 = tl.log(v4)
        v2 = (v0 - v1)
        v6 = (v2 - v5)
        tl.store(out0_ptr + out0_row + out0_lane, v6.to(out0_ptr.dtype.element_ty), mask=rmask)


def rowwise_0(a0):
    """rowwise: log_softmax; rows cut into chunks held in registers that combine their statistics inside one launch."""
    domain = _broadcast(a0.shape)
    if len(domain) != 2:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 2")
    n_rows = domain[0]
    n_red = domain[1]
    # at least two chunks a row: one would be the registers variant's program
    block_r = min(CONFIGS[0].kwargs["BLOCK_R"], _pow2(max(_cdiv(n_red, 2), 1)))
    n_split = _cdiv(n_red, block_r)
    out0 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    ws = torch.zeros((n_rows * (2 * n_split + 1),), dtype=torch.float32, device=a0.device)
    st_a0 = _strides(a0, domain)
    if n_rows > 0 and n_red > 0:
        # one launch with the wait where a row's chunks surely fit on the GPU together (one
        # program an SM always fits); else two launches, no wait: the interpreter runs programs
        # one at a time, and a row of more chunks than SMs could wait for chunks never started
        together = a0.device.type == "cuda" and n_split <= torch.cuda.get_device_properties(a0.device).multi_processor_count
        # no FMA contraction: x * scale - max contracted keeps x live beside x * scale, a
        # second copy of the chunk (scaled_softmax: 101 registers a thread, not 67, on sm_90)
        for phase in ((0,) if together else (1, 2)):
            rowwise_0_coop_kernel[(n_rows * n_split,)](a0, *domain, *st_a0, out0, *out0.stride(), ws, n_red, n_split, BLOCK_R=block_r, BLOCK_S=_pow2(n_split), PHASE=phase, EVEN=n_red % block_r == 0, num_warps=CONFIGS[0].num_warps, enable_fp_fusion=False)
    return out0,


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        t6, = rowwise_0(x)
        return t6
