"""Flash-attention forward: O = softmax(Q K^T * scale) V without materialising Q K^T.

Technique. One program per (BLOCK_M query rows, batch, head). It keeps its Q
tile in registers and streams K and V in BLOCK_N-row tiles. For each tile it
computes the scores S = Q K^T, and folds them into an online softmax: a
running row maximum m, a running row sum l of exp(S - m), and an output
accumulator acc = sum exp(S - m) V. When a new tile raises the maximum, the
old l and acc are rescaled by exp(m_old - m_new) so all terms share one
reference point. At the end O = acc / l. The seq x seq score matrix exists
only one BLOCK_M x BLOCK_N tile at a time, so DRAM traffic is Q, K, V and O
once per query block instead of O(seq^2) for the scores and probabilities.

Details. exp is computed as exp2 with the scale pre-multiplied by log2(e)
(exp2 is the native instruction). Tails: key columns past seq_len get score
-inf (probability 0); head dimensions are padded up to a power of two with
zeros, which change neither dot product. Accumulation is fp32; fp16 inputs use
tensor cores for both dots (P is cast to fp16 for P V, as in FlashAttention),
fp32 inputs use input_precision="ieee" (TF32 would fail an fp32 tolerance).

Inner loop. K is loaded as a [BLOCK_N, BLOCK_D] tile (rows contiguous, as stored)
and transposed in registers for the dot, so both operands of Q K^T stay
K-major, the layout Hopper's tensor cores read from shared memory. The scale
is folded into the exponent, exp2(s * scale - m), one FMA per score. Only
the last key tile is masked (MASK_TAIL): the full tiles run without
comparisons, and with HEAD_DIM a power of two the head dimension is unmasked too.
Tile shapes are autotuned per (SEQ_Q, SEQ_K, HEAD_DIM) among the configs for the
dtype (_prune).
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


# The tile configurations, smallest first: a checker that runs only the first one still crosses
# tile boundaries. _prune keeps per dtype those timed fastest side by side for 16 x 16 heads x
# 4096 x 64 fp16 (bench/attention_configs.py). H200: 64 x 64 / 4 warps / 3 stages 427 TFLOP/s,
# 128 x 64 / 8 warps / 4 stages 418, / 3 stages 417; 64 x 128 387; 128 x 32 350. H100: 64 x 64
# 443, 128 x 64 / 8 warps 431, 128 x 64 / 4 warps 410, 128 x 128 291-348. On a GPU the
# verifier's configuration search times them again per task and pins the winner (memory).
# LAZY_RESCALE is not listed: on an H100 (2026-12-07, bench/results/attention-configs-h100-
# 2026-12-07-0541.json) it ran 0.84-0.87x torch.compile on the tiles where the plain form ran
# 1.02-1.04x; its block-wide branch splits the K loop the compiler otherwise pipelines.
CONFIGS = [
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 32}, num_warps=4, num_stages=3),
]


def _prune(configs, named_args, **kwargs):
    """16-bit inputs up to head_dim 128: the tiles with BLOCK_N >= 64. fp32 and longer heads: BLOCK_N
    32, or 3 stages at most (an "ieee" dot holds 4x the registers of a 16-bit one). A list pinned to
    one configuration (the configuration search) keeps it whatever it is."""
    wide = named_args["q_ptr"].dtype != torch.float32 and named_args["HEAD_DIM"] <= 128
    kept = [c for c in configs if (c.kwargs["BLOCK_N"] >= 64 if wide
                                   else c.kwargs["BLOCK_N"] == 32 or c.num_stages <= 3)]
    return kept or configs


@triton.autotune(configs=CONFIGS, key=["SEQ_Q", "SEQ_K", "HEAD_DIM"],
                 prune_configs_by={"early_config_prune": _prune})
@triton.jit
def flash_attention_fwd_kernel(
    q_ptr,  # Q [Z, H, SEQ_Q, HEAD_DIM]
    k_ptr,  # K [Z, H, SEQ_K, HEAD_DIM]
    v_ptr,  # V [Z, H, SEQ_K, HEAD_DIM]
    o_ptr,  # O [Z, H, SEQ_Q, HEAD_DIM], output in the input dtype
    stride_qz, stride_qh, stride_qm, stride_qd,  # element strides of Q
    stride_kz, stride_kh, stride_kn, stride_kd,  # element strides of K
    stride_vz, stride_vh, stride_vn, stride_vd,  # element strides of V
    stride_oz, stride_oh, stride_om, stride_od,  # element strides of O
    H,  # heads, to split program_id(1) into (batch, head)
    SEQ_Q, SEQ_K, HEAD_DIM,  # query length, key length, features per head
    qk_scale_log2,  # softmax scale * log2(e): scores come out in the exp2 domain
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # key rows per inner step
    BLOCK_D: tl.constexpr,  # HEAD_DIM rounded up to a power of two (>= 16 for tl.dot)
    D_PADDED: tl.constexpr,  # BLOCK_D > HEAD_DIM: the head dimension needs a mask
    PRECISION: tl.constexpr,  # "ieee" for fp32 inputs; ignored for 16-bit inputs
    LAZY_RESCALE: tl.constexpr = False,  # rescale only when the row maximum grows by more than 2^8
):
    pid_m = tl.program_id(0)
    pid_zh = tl.program_id(1)
    z = pid_zh // H
    h = pid_zh % H
    q_ptr += z.to(tl.int64) * stride_qz + h.to(tl.int64) * stride_qh
    k_ptr += z.to(tl.int64) * stride_kz + h.to(tl.int64) * stride_kh
    v_ptr += z.to(tl.int64) * stride_vz + h.to(tl.int64) * stride_vh
    o_ptr += z.to(tl.int64) * stride_oz + h.to(tl.int64) * stride_oh

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM

    # The Q tile is read once and stays in registers for the whole sweep over K and V.
    q = tl.load(q_ptr + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=(offs_m[:, None] < SEQ_Q) & d_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running row max (exp2 domain)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running row sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # running sum of exp2(s - m_i) * V

    full = SEQ_K // BLOCK_N * BLOCK_N  # keys in whole tiles: no key mask needed
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                            0, full, SEQ_K, HEAD_DIM, qk_scale_log2,
                            BLOCK_N, BLOCK_D, D_PADDED, False, PRECISION, LAZY_RESCALE)
    if full < SEQ_K:  # the last, partial key tile
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
                                full, SEQ_K, SEQ_K, HEAD_DIM, qk_scale_log2,
                                BLOCK_N, BLOCK_D, D_PADDED, True, PRECISION, LAZY_RESCALE)

    o = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             o.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < SEQ_Q) & d_ok[None, :])


@triton.jit
def _attend(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_kd, stride_vn, stride_vd,
            lo, hi, SEQ_K, HEAD_DIM, qk_scale_log2,
            BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D_PADDED: tl.constexpr,
            MASK_TAIL: tl.constexpr, PRECISION: tl.constexpr, LAZY_RESCALE: tl.constexpr):
    """Fold the key tiles [lo, hi) into the online softmax state (acc, l_i, m_i)."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_mask, fill = None, None  # full tiles of a power-of-two head dimension: no mask at all
        if MASK_TAIL:
            kv_mask, fill = cols[:, None] < SEQ_K, 0.0
            if D_PADDED:
                kv_mask = kv_mask & (offs_d[None, :] < HEAD_DIM)
        elif D_PADDED:
            kv_mask, fill = offs_d[None, :] < HEAD_DIM, 0.0
        # K tile [BLOCK_N, BLOCK_D] as stored, transposed in registers: both dot operands K-major
        k = tl.load(k_ptr + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=fill)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if MASK_TAIL:
            s = tl.where(cols[None, :] < SEQ_K, s, float("-inf"))  # keys past the end get probability 0

        # Online softmax update. Every tile has >= 1 valid key, so m_new is finite and
        # the first rescale factor is exp2(-inf) = 0, which clears the initial state.
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale_log2)
        if LAZY_RESCALE:
            # Keep the old reference point while no row's maximum grew by more than 8 (exp2
            # domain): p stays <= 2^8, well inside the 16-bit P's range, and acc / l is the
            # same quotient whatever the reference. The block-wide test skips the acc
            # multiply (one per score element at BLOCK_N = HEAD_DIM) on most tiles.
            if tl.max(m_new - m_i, axis=0) > 8.0:
                alpha = tl.exp2(m_i - m_new)
                l_i = l_i * alpha
                acc = acc * alpha[:, None]
                m_i = m_new
            p = tl.exp2(s * qk_scale_log2 - m_i[:, None])
            l_i = l_i + tl.sum(p, axis=1)
        else:
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s * qk_scale_log2 - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)

        v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=fill)
        if not LAZY_RESCALE:
            acc = acc * alpha[:, None]
            m_i = m_new
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    return acc, l_i, m_i


def flash_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) v for [batch, heads, seq, head_dim] fp32/fp16/bf16 tensors."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"need 4-D [batch, heads, seq, head_dim] tensors, got {q.shape}, {k.shape}, {v.shape}")
    Z, H, SEQ_Q, D = q.shape
    if k.shape[:2] != (Z, H) or k.shape[3] != D or v.shape != k.shape:
        raise ValueError(f"k and v must be [{Z}, {H}, seq_k, {D}] and equal; got {k.shape}, {v.shape}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"need q, k, v of one dtype among fp32/fp16/bf16, got {q.dtype}, {k.dtype}, {v.dtype}")
    if D > 256:
        raise ValueError(f"head_dim {D} > 256 does not fit one register tile; split the head dimension")
    SEQ_K = k.shape[2]
    o = torch.empty_like(q)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    qk_scale_log2 = (1.0 / math.sqrt(D)) * 1.4426950408889634  # 1.4427 = log2(e)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    grid = lambda meta: (triton.cdiv(SEQ_Q, meta["BLOCK_M"]), Z * H)
    flash_attention_fwd_kernel[grid](
        q, k, v, o,
        q.stride(0), q.stride(1), q.stride(2), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2), k.stride(3),
        v.stride(0), v.stride(1), v.stride(2), v.stride(3),
        o.stride(0), o.stride(1), o.stride(2), o.stride(3),
        H, SEQ_Q, SEQ_K, D, qk_scale_log2,
        BLOCK_D=BLOCK_D, D_PADDED=BLOCK_D > D, PRECISION=precision,
    )
    return o


class ModelNew(nn.Module):
    """F.scaled_dot_product_attention(Q, K, V) (non-causal) through flash_attention_fwd_kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return flash_attention_fwd(Q, K, V)
