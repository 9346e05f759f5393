"""Template skill: elementwise (hoisted). Rotary embedding with cos and sin loaded once a program.

Technique: q and k are (batch, heads, positions, head_dim); cos and sin are (positions,
head_dim), the same for every batch and head. A flat kernel reads cos and sin for every
output element: from L2, 8 bytes an element beside the 4 it streams from HBM. Here each
program takes a block of the (positions, head_dim) plane, loads its cos and sin once
into registers, and loops over the leading (batch, head) dims: each step's offset is
one multiply-add, and only q and k are read. ``torch.cat((-x2, x1), -1)`` is a per-lane
choice of piece: two masked loads and a ``tl.where``, never a copy. The launcher gives
each program 8 steps (fewer where the programs would be few, more where the grid's
second dim would pass 65,535).

Bytes and FLOPs: q and k read once and both outputs written once, cos and sin once a
program: 4 * 1 MiB here plus 2 * 64 KiB, the roofline floor. 3 FLOPs an output element:
memory-bound.

Fusion points: any elementwise op on the domain joins; an operand with fewer dims than
the domain (broadcast over the leading ones) is hoisted, the others are read at each
step. A reduction on the domain takes the chain as its prologue (``rowwise``) instead.
"""


import torch
import torch.nn as nn
import triton
import triton.language as tl


batch_size = 2
num_heads = 8
seq_len = 256
head_dim = 64


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
    in1_ptr,                        # operand 1 (input)
    in2_ptr,                        # operand 2 (chunk)
    in3_ptr,                        # operand 3 (chunk)
    in4_ptr,                        # operand 4 (input)
    in5_ptr,                        # operand 5 (input)
    in6_ptr,                        # operand 6 (chunk)
    in7_ptr,                        # operand 7 (chunk)
    out0_ptr,                       # output 0
    out1_ptr,                       # output 1
    n1: tl.constexpr,               # domain size of dim 1: a constant, so / and % are shifts and multiplies
    n2: tl.constexpr,               # domain size of dim 2: a constant, so / and % are shifts and multiplies
    n3: tl.constexpr,               # domain size of dim 3: a constant, so / and % are shifts and multiplies
    cat0_o1: tl.constexpr,          # where each piece of cat 8 after the first starts along its dim (constants)
    cat1_o1: tl.constexpr,          # where each piece of cat 15 after the first starts along its dim (constants)
    in0_s0, in0_s1, in0_s2, in0_s3, # operand 0's strides (0: broadcast)
    in1_s0, in1_s1,                 # operand 1's strides (0: broadcast)
    in2_s0, in2_s1, in2_s2, in2_s3, # operand 2's strides (0: broadcast)
    in3_s0, in3_s1, in3_s2, in3_s3, # operand 3's strides (0: broadcast)
    in4_s0, in4_s1,                 # operand 4's strides (0: broadcast)
    in5_s0, in5_s1, in5_s2, in5_s3, # operand 5's strides (0: broadcast)
    in6_s0, in6_s1, in6_s2, in6_s3, # operand 6's strides (0: broadcast)
    in7_s0, in7_s1, in7_s2, in7_s3, # operand 7's strides (0: broadcast)
    n_elements,                     # elements in the domain
    IN0_FLAT: tl.constexpr,         # operand 0 is laid out as the domain: read at the flat index
    IN1_FLAT: tl.constexpr,         # operand 1 is laid out as the domain: read at the flat index
    IN2_FLAT: tl.constexpr,         # operand 2 is laid out as the domain: read at the flat index
    IN3_FLAT: tl.constexpr,         # operand 3 is laid out as the domain: read at the flat index
    IN4_FLAT: tl.constexpr,         # operand 4 is laid out as the domain: read at the flat index
    IN5_FLAT: tl.constexpr,         # operand 5 is laid out as the domain: read at the flat index
    IN6_FLAT: tl.constexpr,         # operand 6 is laid out as the domain: read at the flat index
    IN7_FLAT: tl.constexpr,         # operand 7 is laid out as the domain: read at the flat index
    n_outer,                        # the loop's extent: the product of domain dims 0-1
    OUTER,                          # loop steps per program
    BLOCK: tl.constexpr,            # elements per program and step
    INDEX_64: tl.constexpr,         # an offset may pass 2**31: index in int64
):
    inner = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)   # lanes of the plane
    mask = inner < (n2 * n3)
    rest = inner
    i3 = rest % n3
    rest = rest // n3
    i2 = rest
    v2 = tl.load(in1_ptr + ((inner % (n2 * n3)) if IN1_FLAT else (i2 * in1_s0 + i3 * in1_s1)), mask=mask, other=0, eviction_policy="evict_last").to(tl.float32)
    v3 = tl.load(in4_ptr + ((inner % (n2 * n3)) if IN4_FLAT else (i2 * in4_s0 + i3 * in4_s1)), mask=mask, other=0, eviction_policy="evict_last").to(tl.float32)
    o_lo = tl.program_id(1) * OUTER
    for o in range(o_lo, tl.minimum(o_lo + OUTER, n_outer)):   # steps over dims before the plane
        if INDEX_64:
            offs = o.to(tl.int64) * (n2 * n3) + inner
        else:
            offs = o * (n2 * n3) + inner
        at = o
        i1 = at % n1
        at = at // n1
        i0 = at
        v0 = tl.load(in0_ptr + ((offs) if IN0_FLAT else (i0 * in0_s0 + i1 * in0_s1 + i2 * in0_s2 + i3 * in0_s3)), mask=mask, other=0).to(tl.float32)
        v4 = (v0 * v2)
        m1 = mask & (i3 < cat0_o1)   # the lanes that read piece 0 of cat 8
        v6_f1 = tl.load(in2_ptr + ((offs) if IN2_FLAT else (i0 * in2_s0 + i1 * in2_s1 + i2 * in2_s2 + i3 * in2_s3)), mask=m1, other=0, eviction_policy="evict_last").to(tl.float32)
        v7_f1 = (-v6_f1)
        k2 = i3 - cat0_o1   # index in piece 1 of cat 8
        m2 = mask & (i3 >= cat0_o1)   # the lanes that read piece 1 of cat 8
        v5_f2 = tl.load(in3_ptr + ((offs + (k2 - i3) * in3_s3) if IN3_FLAT else (i0 * in3_s0 + i1 * in3_s1 + i2 * in3_s2 + k2 * in3_s3)), mask=m2, other=0, eviction_policy="evict_last").to(tl.float32)
        v8 = tl.where(i3 < cat0_o1, v7_f1, v5_f2)
        v9 = (v8 * v3)
        v10 = (v4 + v9)
        tl.store(out0_ptr + offs, v10.to(out0_ptr.dtype.element_ty), mask=mask)
        v1 = tl.load(in5_ptr + ((offs) if IN5_FLAT else (i0 * in5_s0 + i1 * in5_s1 + i2 * in5_s2 + i3 * in5_s3)), mask=mask, other=0).to(tl.float32)
        v11 = (v1 * v2)
        m3 = mask & (i3 < cat1_o1)   # the lanes that read piece 0 of cat 15
        v13_f3 = tl.load(in6_ptr + ((offs) if IN6_FLAT else (i0 * in6_s0 + i1 * in6_s1 + i2 * in6_s2 + i3 * in6_s3)), mask=m3, other=0, eviction_policy="evict_last").to(tl.float32)
        v14_f3 = (-v13_f3)
        k4 = i3 - cat1_o1   # index in piece 1 of cat 15
        m4 = mask & (i3 >= cat1_o1)   # the lanes that read piece 1 of cat 15
        v12_f4 = tl.load(in7_ptr + ((offs + (k4 - i3) * in7_s3) if IN7_FLAT else (i0 * in7_s0 + i1 * in7_s1 + i2 * in7_s2 + k4 * in7_s3)), mask=m4, other=0, eviction_policy="evict_last").to(tl.float32)
        v15 = tl.where(i3 < cat1_o1, v14_f3, v12_f4)
        v16 = (v15 * v3)
        v17 = (v11 + v16)
        tl.store(out1_ptr + offs, v17.to(out1_ptr.dtype.element_ty), mask=mask)


def elementwise_0(a0, a1, a2, a3, a4, a5, a6, a7):
    """elementwise: mul > neg > cat > add; one program per 1024 outputs."""
    for t, r in ((a0, 4), (a1, 2), (a2, 4), (a3, 4), (a4, 2), (a5, 4), (a6, 4), (a7, 4),):   # each operand's strides are passed for its traced rank
        if t.dim() != r:
            raise ValueError(f"an operand of rank {t.dim()} where the task traced rank {r}")
    p8 = [tuple(a2.shape), tuple(a3.shape)]   # the shapes of cat 8's pieces
    if len({s[:3] + s[4:] for s in p8}) != 1 or len(p8[0]) != 4:
        raise ValueError(f"cat along dim 3 of pieces shaped {p8}: "
                         "the other dims differ")
    sh8 = p8[0][:3] + (sum(s[3] for s in p8),) + p8[0][4:]
    o8 = [sum(s[3] for s in p8[:p]) for p in range(1, 2)]   # where each later piece starts
    p15 = [tuple(a6.shape), tuple(a7.shape)]   # the shapes of cat 15's pieces
    if len({s[:3] + s[4:] for s in p15}) != 1 or len(p15[0]) != 4:
        raise ValueError(f"cat along dim 3 of pieces shaped {p15}: "
                         "the other dims differ")
    sh15 = p15[0][:3] + (sum(s[3] for s in p15),) + p15[0][4:]
    o15 = [sum(s[3] for s in p15[:p]) for p in range(1, 2)]   # where each later piece starts
    domain = _broadcast(a0.shape, a1.shape, sh8, a4.shape, a5.shape, sh15)
    if len(domain) != 4:
        raise ValueError(f"operands broadcast to {tuple(domain)}, expected rank 4")
    out0 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    out1 = torch.empty(domain, dtype=a0.dtype, device=a0.device)
    n_elements = 1
    for s in domain:
        n_elements *= s
    strides = [0 if n == 1 else s for t in (a0, a1, a2, a3, a4, a5, a6, a7,) for n, s in zip(t.shape, t.stride())]   # 0: broadcast
    index_64 = n_elements >= 2**31 or _wide(a0, a1, a2, a3, a4, a5, a6, a7, out0, out1)   # the farthest offset read or written
    cont = _contiguous(domain)
    flat = (strides[0:4] == cont[0:], strides[4:6] == cont[2:], strides[6:10] == cont[0:], strides[10:14] == cont[0:], strides[14:16] == cont[2:], strides[16:20] == cont[0:], strides[20:24] == cont[0:], strides[24:28] == cont[0:],)
    n_outer = 1
    for n in domain[:2]:
        n_outer *= n
    plane = n_elements // n_outer if n_outer else 0
    if plane >= 2**31:
        raise ValueError(f"a plane of {plane} lanes: the hoisted kernel indexes it in int32; "
                         "lower the task at this size for the flat variant")
    block = max(128, min(1024, triton.next_power_of_2(max(plane, 1))))
    steps = max(1, min(8, n_outer * _cdiv(plane, block) // 2048))   # fewer steps where programs would be few
    steps = max(steps, _cdiv(n_outer, 65535))
    if n_elements > 0:
        elementwise_0_kernel[(_cdiv(plane, block), _cdiv(n_outer, steps))](a0, a1, a2, a3, a4, a5, a6, a7, out0, out1, *domain[1:], *o8, *o15, *strides, n_elements, *flat, n_outer, steps, BLOCK=block, INDEX_64=index_64)
    return out0, out1


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, cos, sin):
        p5 = q.chunk(2, 3)   # views: free
        t5 = p5[0]   # a view: free
        t6 = p5[1]   # a view: free
        p12 = k.chunk(2, 3)   # views: free
        t12 = p12[0]   # a view: free
        t13 = p12[1]   # a view: free
        t10, t17 = elementwise_0(q, cos, t6, t5, sin, k, t13, t12)
        return t10, t17
