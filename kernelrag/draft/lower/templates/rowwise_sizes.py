"""How long a row the row-wise kernels hold in registers, and how the looped passes run.

Sizes measured or compiled for sm_90 (ptxas, Triton 3.6); the template's kernel text is in
``rowwise_emit`` and its placement in ``rowwise``.
"""
from __future__ import annotations

import math

from kernelrag.draft.lower.ir import Graph
from kernelrag.draft.lower.protocol import Region
from kernelrag.draft.lower.templates import common as C

MAX_FUSED = 8192
# Longer rows stay in registers while the row operands' values fit: at 16 warps (512
# threads, at most 128 registers each) ptxas for sm_90 compiled without a spill a softmax
# over 32768 lanes (one row operand, 64 values a thread: 112-114 registers), RMS norm at
# 16384 (x and its weight: 87) and layer norm at 16384 (x, weight and bias, 96 values a
# thread: 126). Over the same three operands, layer norm then ReLU plus x spilled 48 bytes;
# KL divergence of two log-softmaxes at 32768 (two operands, 128 values) 164, so it loops.
# Where the row is held, ``looped`` is not dominated and the generate loop races the two.
# The rms_norm skill, which holds rows of 16384 so, ran at 0.98x torch.compile on the H200
# (2026-12-02) where the looped passes of the same chain ran at 0.72x: one read of each
# row instead of two.
# At 32768 the held softmax compiled without a spill but ran latency-bound: one 16-warp
# program an SM, 24% achieved occupancy, 1.77 ms under ncu against the looped passes' 1.50
# (H200, 2026-12-02). So rows are held up to 16384.
MAX_ROW_IN_REGISTERS = 16384
REGISTER_ROW_VALUES = 49152    # lane values a program holds: 96 a thread at 16 warps
# The looped passes re-read each row, from L2 only if the rows in flight fit there. At 4
# warps an SM holds up to 16 programs: 16 rows of 64 KB (16384 fp32) on 132 SMs is 135 MB
# against the H200's 50 MB L2, so the second read went to HBM (layer/RMS norm at 16384:
# 61-63% of the roofline, 0.76-0.80x torch.compile on 2026-12-02). At 16 warps a layer
# norm's looped kernel takes 40 registers on sm_90 (ptxas): three programs an SM, 25 MB in
# flight. The chunk of a long row is 4096 lanes: 8 values a thread at 16 warps, two 16-byte
# loads in flight per chunk (see the survey below; 2048 lanes until 2026-12-05).
LOOP_BLOCK = 4096
WIDE_LOOP_ROW = 8192           # from this row length the looped passes run LOOP_BLOCK at 16 warps
LOOP_WARPS_LONG = 16
# The looped passes over rows of WIDE_LOOP_ROW or more launch the first (lanes per chunk,
# warps) of the list for their row length at the traced size; the module lists them all as
# ``CONFIGS``, so that the configuration search (``memory.config_search``) verifies the
# others on the GPU, pins the fastest and records each as graph evidence. Lanes per thread
# set the loads a thread has in flight per chunk; warps and registers set how many rows an
# SM keeps in flight, and so whether a row's re-read still finds it in L2. The survey
# (``bench/rowwise_configs.py``, H100, 2026-12-05, against torch.compile in the same run):
# at rows of 32768 fp32 (128 KB) 4096 lanes at 32 warps (at most two programs an SM: 34 MB
# of rows in flight on 132 SMs) won everywhere: three-pass softmax 0.65x -> 1.00x, scaled
# softmax 0.59x -> 0.92x, log-softmax 0.61x -> 0.92x, softmax entropy 0.88x -> 1.34x (the
# looped passes). At 16384, 4096 lanes at 16 warps for layer norm (0.72x -> 0.92x) and
# layer norm then ReLU plus x (0.73x -> 0.90x), at 32 warps for RMS norm then SiLU (0.72x
# -> 0.99x, where 16 warps ran 0.72x): the register count moves the winner, so both lead.
LONG_ROW_CONFIGS = {
    32768: ((4096, 32), (4096, 16), (8192, 16), (2048, 16), (2048, 8), (1024, 4)),
    WIDE_LOOP_ROW: ((LOOP_BLOCK, LOOP_WARPS_LONG), (4096, 32), (8192, 16), (2048, 16), (2048, 8), (1024, 4)),
}
# Longer rows still: at 32768 fp32 (128 KB) four resident 16-warp programs an SM hold 67 MB
# of rows, and the looped softmax read 6.42 GB where torch.compile's kernel, at about half
# the occupancy, read 4.27 GB, the minimum (ncu, H200, 2026-12-02: 1.50 ms against 1.04).
# Two remedies were measured on the H200 that day and left out, as neither closed the gap:
# a grid of two programs an SM, each taking every grid-th row so that 0.7 of the L2 was in
# flight (under ncu: scaled_softmax 6.13 GB at 50% occupancy, 1.78 ms), and with it L2
# eviction hints on the passes' loads (evict_last, then evict_first on the last read). In
# the suite run with both, scaled_softmax took 1.69 ms against 1.67 in the run before and
# layer norm then ReLU plus x at 16384 1.52 ms against 1.44.


def row_counts(region: Region) -> tuple[int, int]:
    """(rows, elements per row) of the region's domain at the traced size."""
    rows, n_red = 1, 1
    for d, n in enumerate(region.domain):
        if d in region.reduced:
            n_red *= n
        else:
            rows *= n
    return rows, n_red


def lane_operands(t, graph: Graph, region: Region) -> int:
    """The region's tensor operands that vary along the row: what the registers path holds."""
    return sum(1 for n in region.loads if not C.is_scalar(graph, n) and t._frame(graph, region, n) == C.LANE)


def row_limit(t, graph: Graph, region: Region) -> int:
    """The longest row (a power of two) the ``registers`` variant holds in registers; longer
    rows run the looped passes. MAX_FUSED for scans and index reductions (their running
    values and int64 indices are not counted here), else up to MAX_ROW_IN_REGISTERS while the
    lane operands' values fit REGISTER_ROW_VALUES."""
    if region.state.get("scans") or region.state.get("argreduce"):
        return MAX_FUSED
    held, limit = max(1, lane_operands(t, graph, region)), MAX_FUSED
    while limit * 2 <= MAX_ROW_IN_REGISTERS and limit * 2 * held <= REGISTER_ROW_VALUES:
        limit *= 2
    return limit


def loops_at_traced_size(t, graph: Graph, region: Region) -> bool:
    """Rows longer than ``row_limit`` at the traced size: the ``registers`` variant runs its
    looped passes there, the same kernel as ``looped``."""
    return math.prod(region.domain[d] for d in region.reduced) > row_limit(t, graph, region)


def row_size_lines(kept: list[int], red: tuple[int, ...]) -> list[str]:
    """Launcher lines: ``n_rows`` (the kept dims' positions) and ``n_red`` (elements a row)."""
    return ["    n_rows = " + (" * ".join(f"domain[{d}]" for d in kept) or "1"),
            "    n_red = " + " * ".join(f"domain[{d}]" for d in red)]


def chunk_lines(kept: list[int], red: tuple[int, ...], target_programs: int) -> list[str]:
    """Launcher lines cutting each row into ``n_split`` chunks of ``chunk`` elements (a multiple of
    a 1024-lane block) so that rows x chunks comes near ``target_programs`` (split and chunked)."""
    return row_size_lines(kept, red) + [
            "    block_r = min(1024, _pow2(max(n_red, 1)))",
            f"    n_split = max(1, min(1024, _cdiv(n_red, block_r), _cdiv({target_programs}, max(n_rows, 1))))",
            "    chunk = _cdiv(_cdiv(n_red, n_split), block_r) * block_r",
            "    n_split = _cdiv(n_red, chunk)"]


def long_row_configs(n_red: int) -> tuple[tuple[int, int], ...]:
    """(lanes per chunk, warps) for looped passes over rows of ``n_red`` elements, the first launched."""
    return LONG_ROW_CONFIGS[max(k for k in LONG_ROW_CONFIGS if k <= max(n_red, WIDE_LOOP_ROW))]


def configs_source(n_red: int) -> str:
    """The module-level ``CONFIGS`` list of a draft whose row-wise kernels loop over rows of
    ``n_red`` elements at the traced size."""
    rows = "".join(f"    triton.Config({{\"BLOCK_R\": {b}}}, num_warps={w}),\n" for b, w in long_row_configs(n_red))
    return ("# The row-wise kernels' looped passes over rows of " + str(WIDE_LOOP_ROW) + " elements or more launch\n"
            "# CONFIGS[0]; on a GPU the configuration search verifies the others and pins the fastest.\n"
            "CONFIGS = [\n" + rows + "]\n")


def long_rows_at_traced_size(t, graph: Graph, region: Region, variant: str, looped_ok: bool) -> bool:
    """The kernel runs its looped passes over rows of WIDE_LOOP_ROW or more at the traced size:
    the launch configuration then comes from ``CONFIGS``."""
    n_red = row_counts(region)[1]
    loops = variant in ("looped", "three_pass") or loops_at_traced_size(t, graph, region)
    return looped_ok and loops and n_red >= WIDE_LOOP_ROW
