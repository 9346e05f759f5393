"""Template skill: elementwise (block1024). GELU of x times a gain along the last dim, plus a residual.

Technique: one program per 1024 outputs of the flattened (N, C, H, W) domain. The flat
index is split into per-dim indices once per program, and each operand is read through
its own strides, with stride 0 along a broadcast dim. The (W,) gain is therefore read in
place: it is never expanded to a full tensor or copied, and it stays in L1/L2 because
every program touches the same W values. Every intermediate (x * gain, the erf GELU) is a
fp32 register value; only the final sum is stored, in the output's dtype.

Bytes and FLOPs: at the reference size (16 x 64 x 32 x 32 = 1,048,576 elements) the
kernel reads x and the residual and writes the output once: 3 * 4 MiB = 12.6 MB, plus
256 B of gain. About 12 FLOPs per element (the erf GELU's polynomial, a multiply, an
add) is 12.6 MFLOP, near 1 FLOP per byte, far below the H200's ridge point
(~160 FLOP/B for fp32 FMA), so time is bytes / bandwidth. The floor at 4.3 TB/s is
about 3 us; a chain would need ~50 ops per element before compute mattered.

Fusion points: any elementwise node, or a cat/stack (a per-lane choice of operand),
whose shape broadcasts to the domain joins the region, so a chain of any length costs
one read of each operand and one write. A reduction or scan over the domain adopts the
region as its prologue (the rowwise template), so the chain is recomputed in the
reduction's loads instead of being stored. A GEMM or conv output is not a fusion point
here: those templates take the chain into their own epilogue.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 16
channels = 64
height = 32
width = 32


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


def _wide(*tensors):
    """Whether an element offset into any of ``tensors`` may pass 2**31 - 1 (int32 lanes would wrap)."""
    for t in tensors:
        reach = t.numel() if t.is_contiguous() else 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
        if reach >= 2**31:
            return True
    return False


def _contiguous(shape):
    """The strides of a contiguous tensor of ``shape`` (torch.empty(shape).stride() without the tensor)."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def _cdiv(a, b):
    """ceil(a / b) for ints: triton.cdiv without its constexpr wrapper."""
    return -(-a // b)


@triton.jit
def elementwise_0_kernel(
    in0_ptr,                        # operand 0 (input)
    in1_ptr,                        # operand 1 (param)
    in2_ptr,                        # operand 2 (input)
    out0_ptr,                       # output 0
    n1: tl.constexpr,               # domain size of dim 1: a constant, so / and % are shifts and multiplies
    n2: tl.constexpr,               # domain size of dim 2: a constant, so / and % are shifts and multiplies
    n3: tl.constexpr,               # domain size of dim 3: a constant, so / and % are shifts and multiplies
    in0_s0, in0_s1, in0_s2, in0_s3, # operand 0's strides (0: broadcast)
    in1_s0,                         # operand 1's strides (0: broadcast)
    in2_s0, in2_s1, in2_s2, in2_s3, # operand 2's strides (0: broadcast)
    n_elements,                     # elements in the domain
    IN0_FLAT: tl.constexpr,         # operand 0 is laid out as the domain: read at the flat index
    IN1_FLAT: tl.constexpr,         # operand 1 is laid out as the domain: read at the flat index
    IN2_FLAT: tl.constexpr,         # operand 2 is laid out as the domain: read at the flat index
    BLOCK: tl.constexpr,            # elements per program
    INDEX_64: tl.constexpr,         # an offset may pass 2**31: index in int64
):
    if INDEX_64:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:   # int32 lanes: half the registers and instructions of int64 index math
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements   # the last program covers the tail
    rest = offs
    i3 = rest % n3
    rest = rest // n3
    i2 = rest % n2
    rest = rest // n2
    i1 = rest % n1
    rest = rest // n1
    i0 = rest
    v0 = tl.load(in0_ptr + ((offs) if IN0_FLAT else (i0 * in0_s0 + i1 * in0_s1 + i2 * in0_s2 + i3 * in0_s3)), mask=mask, other=0).to(tl.float32)
    v2 = tl.load(in1_ptr + ((offs % (n3)) if IN1_FLAT else (i3 * in1_s0)), mask=mask, other=0, eviction_policy="evict_last").to(tl.float32)
    v3 = (v0 * v2)
    v4 = (0.5 * v3 * (1.0 + tl.math.erf(v3 * 0.7071067811865476)))
    v1 = tl.load(in2_ptr + ((offs) if IN2_FLAT else (i0 * in2_s0 + i1 * in2_s1 + i2 * in2_s2 + i3 * in2_s3)), mask=mask, other=0).to(tl.float32)
    v5 = (v4 + v1)
    tl.store(out0_ptr + offs, v5.to(out0_ptr.dtype.element_ty), mask=mask)


def elementwise_0(a0, a1, a2):
    """elementwise: mul > gelu > add; one program per 1024 outputs."""
    for t, r in ((a0, 4), (a1, 1), (a2, 4),):   # each operand's strides are passed for its traced rank
        if t.dim() != r:
            raise ValueError(f"an operand of rank {t.dim()} where the task traced rank {r}")
    domain = _broadcast(a0.shape, a1.shape, a2.shape)
    if len(domain) != 4:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 4")
    out0 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    n_elements = 1
    for s in domain:
        n_elements *= s
    strides = [0 if n == 1 else s for t in (a0, a1, a2,) for n, s in zip(t.shape, t.stride())]   # 0: broadcast
    index_64 = n_elements >= 2**31 or _wide(a0, a1, a2, out0)   # the farthest offset read or written
    cont = _contiguous(domain)
    flat = (strides[0:4] == cont[0:], strides[4:5] == cont[3:], strides[5:9] == cont[0:],)
    if n_elements > 0:
        elementwise_0_kernel[(_cdiv(n_elements, 1024),)](a0, a1, a2, out0, *domain[1:], *strides, n_elements, *flat, BLOCK=1024, INDEX_64=index_64)
    return out0,


class ModelNew(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(width))

    def forward(self, x, residual):
        t5, = elementwise_0(x, self.gain, residual)
        return t5
