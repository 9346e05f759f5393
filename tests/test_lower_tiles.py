"""Tile rules are data carried into the launchers: what each shape picks, and that drafts carry the table."""
from __future__ import annotations

import pytest

from kernelrag.draft.lower import tiles
from kernelrag.draft.lower.conv import ConvSpec, render_conv
from kernelrag.draft.lower.conv_direct import render_direct_conv
from kernelrag.draft.lower.gemm import render_gemm
from kernelrag.draft.lower.gemm_spec import GemmSpec


def picker(table_name: str):
    """pick_tile over the table as an emitted launcher sees it (the literal, not the dicts)."""
    space: dict = {}
    exec(tiles.table_source(table_name, getattr(tiles, table_name)) + tiles.PICK_TILE, space)
    return lambda cuda, m, n, k, programs=lambda bm, bn: 0: space["pick_tile"](space[table_name], cuda, m, n, k,
                                                                              programs)


def cdiv(a, b):
    return -(-a // b)


def test_conv_tiles_follow_the_problem_shape():
    pick = picker("CONV_TILES")
    # conv2d_bias_relu on the H200: M = 32 * 128 * 128, N = 128 output channels, K = 128 * 9
    assert pick(True, 32 * 128 * 128, 128, 128 * 9) == (128, 128, 32, 8, 4)
    assert pick(True, 32 * 128 * 128, 64, 64 * 9) == (128, 64, 32, 4, 4)
    assert pick(True, 4096, 32, 27)[:2] == (64, 64)
    assert pick(True, 100, 8, 9)[:2] == (32, 32)
    assert pick(False, 32 * 128 * 128, 128, 1152) == pick(False, 10, 1, 1)     # the interpreter: one tile


def test_gemm_tiles_count_the_batch():
    pick = picker("GEMM_TILES")
    # bmm: 128 products of 512 x 512: the large tile still launches 128 * 16 programs
    bmm = pick(True, 512, 512, 1024, lambda bm, bn: 128 * cdiv(512, bm) * cdiv(512, bn))
    assert bmm == (128, 128, 64, 8, 3)
    one = pick(True, 512, 512, 1024, lambda bm, bn: cdiv(512, bm) * cdiv(512, bn))
    assert one[:2] == (64, 64)                 # one 512 x 512 product: 16 large tiles would idle the GPU
    assert pick(True, 4096, 4096, 4096, lambda bm, bn: cdiv(4096, bm) * cdiv(4096, bn))[:3] == (128, 128, 64)


def test_direct_tiles_widen_along_long_rows():
    pick = picker("DIRECT_TILES")
    assert pick(True, 4096, 4096, 1)[:2] == (2, 1024)       # the causal conv1d: 4096 positions per image
    assert pick(True, 300, 64, 1)[:2] == (8, 256)


def test_a_table_without_a_catch_all_says_so():
    space: dict = {}
    exec(tiles.PICK_TILE, space)
    with pytest.raises(ValueError, match="catch-all"):
        space["pick_tile"](((True, 100, 0, 0, 0, (64, 64, 32, 4, 3)),), True, 10, 10, 10, lambda bm, bn: 0)


@pytest.mark.parametrize("source,table", [
    (lambda: render_conv(ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1))).source, "CONV_TILES"),
    (lambda: render_direct_conv(ConvSpec(1, (4,), (1,), (3,), (1,))).source, "DIRECT_TILES"),
    (lambda: render_gemm(GemmSpec()).source, "GEMM_TILES"),
    (lambda: render_gemm(GemmSpec()).source, "GEMM_TILES_BF16X6"),
    (lambda: render_gemm(GemmSpec()).source, "GEMM_TILES_16BIT"),
    (lambda: render_gemm(GemmSpec()).source, "GEMM_TILES_TF32X3_SPLIT"),
])
def test_launchers_carry_the_table_as_data(source, table):
    text = source()
    assert tiles.table_source(table, getattr(tiles, table)) in text
    assert f"pick_tile({table}," in text or f" {table} if " in text or f" else {table}\n" in text


def test_gemm_tiles_follow_the_dot_path():
    """16-bit operands take the 128x256 tile (half the bytes per element), bf16x6 the 128x64 one
    (three accumulator tiles in registers), and both fall back when the big tile idles SMs."""
    grid = lambda m, n, batch=1: lambda bm, bn: batch * cdiv(m, bm) * cdiv(n, bn)
    bf16, x6 = picker("GEMM_TILES_16BIT"), picker("GEMM_TILES_BF16X6")
    assert bf16(True, 8192, 8192, 8192, grid(8192, 8192)) == (128, 256, 64, 8, 3)
    assert bf16(True, 1024, 1024, 4096, grid(1024, 1024)) == (128, 128, 64, 4, 4)   # 32 programs at 128x256
    assert bf16(True, 256, 256, 64, grid(256, 256))[:2] == (64, 64)
    assert x6(True, 4096, 4096, 4096, grid(4096, 4096)) == (128, 64, 64, 8, 3)
    assert x6(True, 512, 512, 512, grid(512, 512))[:2] == (64, 64)
    for table in (bf16, x6):
        assert table(False, 8192, 8192, 8192) == picker("GEMM_TILES")(False, 8192, 8192, 8192)


def test_which_convolutions_go_direct():
    assert tiles.direct_fits(1, 9)            # depthwise 3x3
    assert tiles.direct_fits(1, 4)            # depthwise causal conv1d, kernel 4
    assert tiles.direct_fits(4, 36)           # 4 output channels per group
    assert not tiles.direct_fits(128, 9 * 128)
    assert not tiles.direct_fits(64, 27)      # an RGB stem: 64 output channels, K = 3 * 9


def test_which_conv_variants_are_refused_by_shape():
    assert "padding" in tiles.refused_variant("implicit_gemm", 1, 4)       # depthwise conv1d, kernel 4
    assert tiles.refused_variant("direct", 1, 4) is None
    assert "CUDA cores" in tiles.refused_variant("direct", 128, 9 * 128)   # 3x3 over 128 channels
    assert tiles.refused_variant("implicit_gemm", 128, 9 * 128) is None
    assert tiles.refused_variant("direct", 32, 27) is None                 # an RGB stem: both offered
    assert tiles.refused_variant("implicit_gemm", 32, 27) is None
