"""Tile rules as data: the block sizes, warps and stages the emitted launchers pick per shape.

Each table is a tuple of rules, tried in order; the first whose conditions hold gives
the configuration. A launcher carries its table as a literal and picks at run time
from the sizes it sees (``pick_tile``), so one draft serves every shape the verifier
tries, and a rule changed here changes every later draft without touching a kernel.

The CUDA rows of ``GEMM_TILES`` are for an H200 running fp32 through 3xTF32; the GEMM
launcher takes ``GEMM_TILES_BF16X6`` for its bf16x6 path and ``GEMM_TILES_16BIT`` for
bf16 / fp16 operands, whose register and shared-memory budgets differ; the rows without CUDA are for Triton's
interpreter, whose cost is per operation rather than per element: large tiles, few
programs. Conditions are minimum sizes; ``min_programs``
counts the programs the tile would launch (batch * output tiles), so a batched
product of small matrices still gets the large tile when it has enough of them.
"""
from __future__ import annotations

# GEMM of a convolution (one group): M = N * output positions, N = output channels per
# group, K = input channels per group * kernel taps. Large output-channel counts take
# the 128-wide tile so the gathered input tile is loaded once per output tile row. The
# gathered A tile arrives as 4-byte cp.async (masked, misaligned per tap), so its latency is
# hidden by stages in flight: the two large tiles are register-bound to 1 (8 warps, 222-250
# regs) or 2 (4 warps, 234 regs) CTAs per SM in the sm_90 compile, where 3 stages used 98 KB
# (64 KB) of the 228 KB of shared memory; a 4th stage (131 KB, 90 KB) costs no occupancy and
# no registers (same counts, 0 spills).
CONV_TILES = (
    dict(cuda=True, min_m=16384, min_n=128, min_k=128, min_programs=0, tile=(128, 128, 32, 8, 4)),
    dict(cuda=True, min_m=16384, min_n=64, min_k=0, min_programs=0, tile=(128, 64, 32, 4, 4)),
    dict(cuda=True, min_m=16384, min_n=0, min_k=0, min_programs=0, tile=(128, 32, 32, 4, 3)),
    dict(cuda=True, min_m=2048, min_n=0, min_k=0, min_programs=0, tile=(64, 64, 32, 4, 3)),
    dict(cuda=True, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(32, 32, 32, 4, 2)),
    dict(cuda=False, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(256, 64, 64, 4, 1)),
)

# Tiled GEMM / BMM: the 128x128x64 tile (8 warps, 3 stages) measured best for 3xTF32 on an
# H200 at 4096^3, whenever it still launches a full wave of programs (132 SMs).
GEMM_TILES = (
    dict(cuda=True, min_m=128, min_n=128, min_k=0, min_programs=132, tile=(128, 128, 64, 8, 3)),
    dict(cuda=True, min_m=1024, min_n=128, min_k=0, min_programs=0, tile=(128, 128, 64, 8, 3)),
    dict(cuda=True, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(64, 64, 32, 4, 3)),
    dict(cuda=False, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(32, 32, 16, 4, 1)),
)

# 3xTF32 with B split into TF32 parts before the kernel (the launcher's CUDA default): a K step
# loads A and both of B's parts, so BLOCK_K 32 keeps 3 stages of 128x128 in 128 KB of shared
# memory (sm_90 compile: 131,072 bytes; BLOCK_K 64 would need twice that), 192 KB with A's two
# parts as well (SPLIT_A: 196,608 bytes, 4 stages would not fit); the step's fresh three-product
# tile beside the accumulator: 237 registers at 8 warps (227 with SPLIT_A), no spill (triton 3.9).
GEMM_TILES_TF32X3_SPLIT = (
    dict(cuda=True, min_m=128, min_n=128, min_k=0, min_programs=132, tile=(128, 128, 32, 8, 3)),
    dict(cuda=True, min_m=1024, min_n=128, min_k=0, min_programs=0, tile=(128, 128, 32, 8, 3)),
    dict(cuda=True, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(64, 64, 32, 4, 3)),
    dict(cuda=False, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(32, 32, 16, 4, 1)),
)

# bf16x6 fp32 GEMM: three accumulator tiles live at once (the running sum, its Kahan
# compensation and the step's partial), so the 128x128 tile (3 x 64 fp32 registers per thread
# at 8 warps) spills on sm_90 (152 stack bytes at BLOCK_K 64); 128x64 at 8 warps is 254
# registers, no spill, 120 KB of shared memory for 3 stages.
GEMM_TILES_BF16X6 = (
    dict(cuda=True, min_m=128, min_n=64, min_k=0, min_programs=132, tile=(128, 64, 64, 8, 3)),
    dict(cuda=True, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(64, 64, 32, 4, 3)),
    dict(cuda=False, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(32, 32, 16, 4, 1)),
)

# 16-bit GEMM (bf16 / fp16 operands straight to wgmma): half the bytes per element of fp32,
# so a tile twice as wide fits the same shared memory and doubles the flops per byte loaded
# (128x256: 2*128*256 / ((128 + 256) * 2) = 85 flops per byte of shared memory read). On sm_90
# 128x256x64 at 8 warps, 3 stages is 186 registers, no spill, 144 KB of shared memory; where it
# would not fill the 132 SMs, 128x128x64 at 4 warps, 4 stages (128 KB); small products 64x64.
GEMM_TILES_16BIT = (
    dict(cuda=True, min_m=128, min_n=256, min_k=0, min_programs=132, tile=(128, 256, 64, 8, 3)),
    dict(cuda=True, min_m=128, min_n=128, min_k=0, min_programs=132, tile=(128, 128, 64, 4, 4)),
    dict(cuda=True, min_m=1024, min_n=128, min_k=0, min_programs=0, tile=(128, 128, 64, 4, 4)),
    dict(cuda=True, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(64, 64, 64, 4, 3)),
    dict(cuda=False, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(32, 32, 16, 4, 1)),
)

# Direct convolution: M = output positions of one image, N = output channels; the tile
# is (BLOCK_C channels, BLOCK_P positions, num_warps, 1) and BLOCK_K is unused (0). A long
# row of positions takes wide position blocks (coalesced, few halo reloads).
DIRECT_TILES = (
    dict(cuda=True, min_m=2048, min_n=0, min_k=0, min_programs=0, tile=(2, 1024, 0, 4, 1)),
    dict(cuda=True, min_m=256, min_n=0, min_k=0, min_programs=0, tile=(8, 256, 0, 4, 1)),
    dict(cuda=True, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(32, 64, 0, 4, 1)),
    dict(cuda=False, min_m=0, min_n=0, min_k=0, min_programs=0, tile=(16, 256, 0, 4, 1)),
)

# When a convolution takes the direct variant: a GEMM whose N (output channels per group)
# or K (input channels per group * taps) is below one 16-wide tensor-core step wastes most
# of every tl.dot (a depthwise 3x3 conv uses 1 of 16 columns and 9 of 16 K lanes).
DIRECT_BELOW = dict(out_channels_per_group=16, gemm_k=16)

# Which variants may run at all, whatever the graph's evidence ranks first: the evidence is
# per pattern, these costs are per shape. Below DIRECT_BELOW the implicit GEMM is refused
# (a depthwise conv1d, kernel 4, padded to 16x16x16 dots did 64x the useful MMA work and
# ran at 0.16x torch.compile on an H200, 2026-12-01). Past ``gemm_k`` terms per output the
# direct kernel is refused: every term is a CUDA-core FMA and a load (a 3x3 conv over 128
# channels, K = 1152, is compute-bound on tensor cores); between the two both stay offered.
DIRECT_UP_TO = dict(gemm_k=64)

PICK_TILE = '''def pick_tile(rules, cuda, M, N, K, programs):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): the first rule whose minimums
    hold; ``programs(BM, BN)`` counts the programs a tile would launch."""
    for on_cuda, min_m, min_n, min_k, min_programs, tile in rules:
        if on_cuda == cuda and M >= min_m and N >= min_n and K >= min_k \\
                and (min_programs == 0 or programs(tile[0], tile[1]) >= min_programs):
            return tile
    raise ValueError(f"no tile rule for M={M}, N={N}, K={K} (cuda={cuda}): the table needs a catch-all row")
'''


def table_source(name: str, table: tuple[dict, ...]) -> str:
    """The table as a literal for an emitted launcher: one tuple per rule."""
    rows = "".join(f"    ({r['cuda']}, {r['min_m']}, {r['min_n']}, {r['min_k']}, {r['min_programs']}, "
                   f"{tuple(r['tile'])}),\n" for r in table)
    return (f"# {name}: (cuda, min M, min N, min K, min programs, (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages));\n"
            f"# the first row that fits is taken (kernelrag.draft.lower.tiles)\n{name} = (\n{rows})\n")


def direct_fits(out_channels_per_group: int, gemm_k: int) -> bool:
    """True when a convolution with these GEMM sizes should take the direct variant."""
    return (out_channels_per_group < DIRECT_BELOW["out_channels_per_group"]
            or gemm_k < DIRECT_BELOW["gemm_k"])


def refused_variant(variant: str, out_channels_per_group: int, gemm_k: int) -> str | None:
    """Why a convolution with these GEMM sizes must not take ``variant``, or None."""
    if variant == "implicit_gemm" and direct_fits(out_channels_per_group, gemm_k):
        return (f"the group GEMM ({out_channels_per_group} output channels, K = {gemm_k}) is below one 16-wide "
                "tensor-core step: the implicit GEMM would be mostly padding; use the direct variant")
    if variant == "direct" and not direct_fits(out_channels_per_group, gemm_k) \
            and gemm_k > DIRECT_UP_TO["gemm_k"]:
        return (f"K = {gemm_k} terms per output (> {DIRECT_UP_TO['gemm_k']}) on CUDA cores: the direct kernel is "
                "compute-bound where the implicit GEMM runs on tensor cores; use implicit_gemm")
    return None
