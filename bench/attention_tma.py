"""Flash-attention forward with TMA tensor-descriptor loads: a survey variant of the skill's kernel.

The skill (skills/scaled_dot_product_attention/flash_attention_fwd) streams K and V through
pointer loads, which the compiler pipelines with cp.async. Here Q, K, V and O are host-built
tensor descriptors over a [batch * heads, seq, head_dim] view, so each tile is one TMA copy
(bounds per head, zero fill past the sequence) and the registers that held the pointer
arithmetic are free. ``WARP_SPECIALIZE`` asks the compiler to split the K/V loop into
producer and consumer warps (``tl.range(..., warp_specialize=True)``); a triton or GPU that
cannot is reported by the survey as a compile error. ``LAZY_RESCALE`` is the skill's option of
that name. The math is the skill's: online softmax in the exp2 domain, fp32 accumulation, P
cast to the input dtype for P V.

Needs contiguous 16-bit inputs whose head_dim is a power of two (16..256); the survey
(bench/attention_configs.py) launches it only then.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl


@triton.jit
def attention_tma_kernel(desc_q, desc_k, desc_v, desc_o, SEQ_K, qk_scale_log2,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                         WARP_SPECIALIZE: tl.constexpr, LAZY_RESCALE: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    zh = tl.program_id(1)  # batch * heads + head: the descriptors' leading dimension
    q = desc_q.load([zh, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    full = SEQ_K // BLOCK_N * BLOCK_N  # keys in whole tiles: no key mask, as in the skill
    for start_n in tl.range(0, full, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        acc, l_i, m_i = _fold(acc, l_i, m_i, q, desc_k, desc_v, zh, start_n, SEQ_K, qk_scale_log2,
                              BLOCK_N, HEAD_DIM, False, LAZY_RESCALE)
    if full < SEQ_K:  # the last, partial key tile: the descriptor fills it with zeros, masked here
        acc, l_i, m_i = _fold(acc, l_i, m_i, q, desc_k, desc_v, zh, full, SEQ_K, qk_scale_log2,
                              BLOCK_N, HEAD_DIM, True, LAZY_RESCALE)
    o = acc / l_i[:, None]
    desc_o.store([zh, start_m, 0], o.to(q.dtype).reshape(1, BLOCK_M, HEAD_DIM))


@triton.jit
def _fold(acc, l_i, m_i, q, desc_k, desc_v, zh, start_n, SEQ_K, qk_scale_log2,
          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASK_TAIL: tl.constexpr, LAZY_RESCALE: tl.constexpr):
    """One key tile folded into the online softmax state (acc, l_i, m_i), as the skill's _attend."""
    k = desc_k.load([zh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
    s = tl.dot(q, tl.trans(k))
    if MASK_TAIL:
        s = tl.where((start_n + tl.arange(0, BLOCK_N))[None, :] < SEQ_K, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale_log2)
    if LAZY_RESCALE:   # the skill's LAZY_RESCALE: a new reference only past a growth of 2^8
        if tl.max(m_new - m_i, axis=0) > 8.0:
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha
            acc = acc * alpha[:, None]
            m_i = m_new
    else:
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha
        acc = acc * alpha[:, None]
        m_i = m_new
    p = tl.exp2(s * qk_scale_log2 - m_i[:, None])
    l_i = l_i + tl.sum(p, axis=1)
    v = desc_v.load([zh, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
    return tl.dot(p.to(v.dtype), v, acc), l_i, m_i


def supported(q, k, v) -> bool:
    """Contiguous fp16/bf16 [batch, heads, seq, head_dim] with a power-of-two head_dim."""
    import torch

    d = q.shape[-1]
    return (q.ndim == k.ndim == v.ndim == 4 and q.dtype in (torch.float16, torch.bfloat16)
            and q.dtype == k.dtype == v.dtype and k.shape == v.shape
            and q.shape[:2] == k.shape[:2] and k.shape[3] == d and 16 <= d <= 256
            and d & (d - 1) == 0 and all(t.is_contiguous() for t in (q, k, v)))


def launcher(q, k, v, block_m: int, block_n: int, warps: int, stages: int, warp_specialize: bool,
             lazy_rescale: bool = False):
    """A no-argument callable running the kernel at one configuration (descriptors built once)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    z, h, seq_q, d = q.shape
    seq_k = k.shape[2]
    o = torch.empty_like(q)

    def desc(t, seq, block):
        view = t.view(z * h, seq, d)
        return TensorDescriptor(view, list(view.shape), list(view.stride()), [1, block, d])

    dq, dk, dv, do = desc(q, seq_q, block_m), desc(k, seq_k, block_n), desc(v, seq_k, block_n), desc(o, seq_q, block_m)
    grid = (triton.cdiv(seq_q, block_m), z * h)
    scale = 1.4426950408889634 / math.sqrt(d)

    def run():
        attention_tma_kernel[grid](dq, dk, dv, do, seq_k, scale, BLOCK_M=block_m, BLOCK_N=block_n,
                                   HEAD_DIM=d, WARP_SPECIALIZE=warp_specialize, LAZY_RESCALE=lazy_rescale,
                                   num_warps=warps, num_stages=stages)
        return o
    return run
