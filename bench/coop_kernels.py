"""Hand-written kernels for the survey in bench/coop_rows.py (Triton; torch, triton only).

Cooperative rows: a row too long for one program's registers is cut into N_CHUNKS chunks,
one program each, launched consecutively. Each program loads its chunk once into registers,
stores its chunk's partial statistics, arrives at the row's counter and waits until every
chunk of the row has arrived; then it combines the row's partials (a few values), applies
the normalisation to the chunk it still holds and writes it. The operand is read once and
the output written once: the two passes of the roofline floor, where a looped kernel or
torch.compile's pair reads the row twice.

The wait needs every chunk of a row resident at once: programs are dispatched in launch
order, so that holds while N_CHUNKS programs fit on the GPU beside the ones waiting (a few
hundred do). PHASE=1 then PHASE=2 runs the same arithmetic as two launches with no wait (the
interpreter runs programs one at a time, so a wait there never ends).

Tall-skinny products: (M, K) @ (K, N) with K <= 32, where the M x N output's write is the
whole cost: one K step, tile shapes for the store, exact fp32 (FMA or tl.dot "ieee").
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _arrive_and_wait(cnt_ptr, row, N_CHUNKS: tl.constexpr):
    tl.debug_barrier()                                   # the chunk's partials are stored
    tl.atomic_add(cnt_ptr + row, 1, sem="release")
    seen = tl.atomic_add(cnt_ptr + row, 0, sem="acquire")
    while seen < N_CHUNKS:
        seen = tl.atomic_add(cnt_ptr + row, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def coop_softmax(x_ptr, y_ptr, part_ptr, cnt_ptr, SCALE: tl.constexpr, N: tl.constexpr,
                 CHUNK: tl.constexpr, N_CHUNKS: tl.constexpr, LOG: tl.constexpr, PHASE: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // N_CHUNKS
    offs = (pid % N_CHUNKS) * CHUNK + tl.arange(0, CHUNK)
    base = row.to(tl.int64) * N
    x = tl.load(x_ptr + base + offs).to(tl.float32) * SCALE
    if PHASE != 2:
        m = tl.max(x, 0)
        tl.store(part_ptr + 2 * pid, m)
        tl.store(part_ptr + 2 * pid + 1, tl.sum(tl.exp(x - m), 0))
    if PHASE == 0:
        _arrive_and_wait(cnt_ptr, row, N_CHUNKS)
    if PHASE != 1:
        k = row * N_CHUNKS + tl.arange(0, N_CHUNKS)
        pm = tl.load(part_ptr + 2 * k, cache_modifier=".cg")
        ps = tl.load(part_ptr + 2 * k + 1, cache_modifier=".cg")
        top = tl.max(pm, 0)
        total = tl.sum(ps * tl.exp(pm - top), 0)
        if LOG:
            y = x - top - tl.log(total)
        else:
            y = tl.exp(x - top) * (1.0 / total)
        tl.store(y_ptr + base + offs, y)


@triton.jit
def _act(y, x, ACT: tl.constexpr):
    """The norms' epilogue: ACT 0 none, 1 SiLU, 2 ReLU, 3 ReLU + x."""
    if ACT == 1:
        y = y / (1.0 + tl.exp(-y))
    if ACT == 2:
        y = tl.maximum(y, 0.0)
    if ACT == 3:
        y = tl.maximum(y, 0.0) + x
    return y


@triton.jit
def coop_norm(x_ptr, w_ptr, b_ptr, y_ptr, part_ptr, cnt_ptr, eps, N: tl.constexpr, CHUNK: tl.constexpr,
              N_CHUNKS: tl.constexpr, RMS: tl.constexpr, PER_COLUMN: tl.constexpr, INNER: tl.constexpr,
              GROUPS: tl.constexpr, ACT: tl.constexpr, PHASE: tl.constexpr):
    """Layer/RMS norm (PER_COLUMN: weight per column) or group/instance norm (a weight per
    channel of INNER elements, GROUPS groups a sample). ACT: 0 none, 1 SiLU, 2 ReLU, 3 ReLU + x."""
    pid = tl.program_id(0)
    row = pid // N_CHUNKS
    offs = (pid % N_CHUNKS) * CHUNK + tl.arange(0, CHUNK)
    base = row.to(tl.int64) * N
    x = tl.load(x_ptr + base + offs).to(tl.float32)
    if PHASE != 2:
        if RMS:
            tl.store(part_ptr + 2 * pid, tl.sum(x * x, 0))
        else:
            mean_c = tl.sum(x, 0) / CHUNK
            d = x - mean_c
            tl.store(part_ptr + 2 * pid, mean_c)
            tl.store(part_ptr + 2 * pid + 1, tl.sum(d * d, 0))
    if PHASE == 0:
        _arrive_and_wait(cnt_ptr, row, N_CHUNKS)
    if PHASE != 1:
        k = row * N_CHUNKS + tl.arange(0, N_CHUNKS)
        if RMS:
            rstd = tl.rsqrt(tl.sum(tl.load(part_ptr + 2 * k, cache_modifier=".cg"), 0) / N + eps)
            y = x * rstd
        else:
            means = tl.load(part_ptr + 2 * k, cache_modifier=".cg")
            m2s = tl.load(part_ptr + 2 * k + 1, cache_modifier=".cg")
            mean = tl.sum(means, 0) / N_CHUNKS
            dm = means - mean
            var = (tl.sum(m2s, 0) + CHUNK * tl.sum(dm * dm, 0)) / N      # Chan's rule, equal chunks
            y = (x - mean) * tl.rsqrt(var + eps)
        if PER_COLUMN:
            y = y * tl.load(w_ptr + offs)
            if not RMS:
                y = y + tl.load(b_ptr + offs)
        else:
            ch = (row % GROUPS) * (N // INNER) + ((pid % N_CHUNKS) * CHUNK) // INNER
            y = y * tl.load(w_ptr + ch) + tl.load(b_ptr + ch)
        y = _act(y, x, ACT)
        tl.store(y_ptr + base + offs, y)


@triton.jit
def piped_norm(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, eps, N: tl.constexpr, RMS: tl.constexpr, ACT: tl.constexpr,
               STAGES: tl.constexpr):
    """Layer/RMS norm over rows of N (a power of two) with a weight (and bias) per column, on a
    persistent grid: each program takes every grid-th row. The weight and bias are loaded once
    into registers; with STAGES > 1 Triton's software pipeliner turns the row's load into
    ``cp.async`` copies into shared memory, STAGES - 1 rows ahead, so the next rows stream in
    while this one is reduced and written (compiled for sm_90 on a CPU: no ``ld.global`` left for
    x, 64 KB of shared memory a stage at 16384 fp32). ACT as ``coop_norm``."""
    pid = tl.program_id(0)
    cols = tl.arange(0, N)
    w = tl.load(w_ptr + cols)
    if not RMS:
        b = tl.load(b_ptr + cols)
    for row in tl.range(pid, n_rows, tl.num_programs(0), num_stages=STAGES):
        base = tl.cast(row, tl.int64) * N
        x = tl.load(x_ptr + base + cols).to(tl.float32)
        if RMS:
            y = x * tl.rsqrt(tl.sum(x * x, 0) / N + eps) * w
        else:
            d = x - tl.sum(x, 0) / N
            y = d * tl.rsqrt(tl.sum(d * d, 0) / N + eps) * w + b
        y = _act(y, x, ACT)
        tl.store(y_ptr + base + cols, y)


@triton.jit
def skinny_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
               BN: tl.constexpr, GROUP: tl.constexpr, FMA: tl.constexpr, STREAM: tl.constexpr):
    pid = tl.program_id(0)
    per_group = GROUP * (N // BN)
    first_m = (pid // per_group) * GROUP
    pm = first_m + (pid % per_group) % GROUP
    pn = (pid % per_group) // GROUP
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    if FMA:
        acc = tl.zeros((BM, BN), tl.float32)
        for k in tl.static_range(K):
            acc += tl.load(a_ptr + om * K + k)[:, None] * tl.load(b_ptr + k * N + on)[None, :]
    else:
        ok = tl.arange(0, K)
        a = tl.load(a_ptr + om[:, None] * K + ok[None, :])
        b = tl.load(b_ptr + ok[:, None] * N + on[None, :])
        acc = tl.dot(a, b, input_precision="ieee")
    ptrs = c_ptr + om[:, None].to(tl.int64) * N + on[None, :]
    if STREAM:
        tl.store(ptrs, acc, cache_modifier=".cs")
    else:
        tl.store(ptrs, acc)
