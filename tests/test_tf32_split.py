"""The matmul_tf32x3 skill's designs: the TF32 split in the K loop or in a pass before it."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util
from pathlib import Path

import torch

from kernelrag.memory.tuning import pinned_source, source_configs

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (ROOT / "skills" / "matmul" / "matmul_tf32x3" / "kernel.py").read_text()


def _load(path: Path, source: str):
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_split_parts_are_tf32_and_add_up_to_the_input(tmp_path):
    """hi and lo each fit TF32 (the 13 low mantissa bits clear), hi + lo is x to 2^-22, the
    transpose is written K-major, and inf passes through with a zero remainder."""
    module = _load(tmp_path / "skill.py", SOURCE)
    torch.manual_seed(0)
    x = torch.randn(37, 45) * torch.logspace(-20, 20, 45)
    x[3, 4], x[5, 6] = float("inf"), float("-inf")
    for transpose in (False, True):
        hi, lo = module.tf32_parts(x, transpose=transpose)
        want = x.t() if transpose else x
        assert hi.shape == want.shape and hi.is_contiguous()
        assert not (hi.view(torch.int32) & 0x1FFF).any() and not (lo.view(torch.int32) & 0x1FFF).any()
        finite = want.isfinite()
        rel = ((hi + lo - want)[finite] / want[finite]).abs().max().item()
        assert rel <= 2.0 ** -22, rel
        assert torch.equal(hi[~finite], want[~finite]) and not lo[~finite].any()
        assert ((hi - want)[finite] / want[finite]).abs().max().item() <= 2.0 ** -11   # rounded, not cut


def test_every_design_and_config_computes_the_product(tmp_path):
    """Each config pinned, as the configuration search runs it, on a ragged shape that crosses
    tile edges in M, N and K, with B N-major and K-major (the interpreter's dots are IEEE fp32)."""
    configs = source_configs(SOURCE)
    assert {c["SPLIT"] for c in configs} == {0, 1, 2}
    torch.manual_seed(1)
    a, b = torch.randn(70, 90), torch.randn(90, 50)
    want = a.double() @ b.double()
    for i, cfg in enumerate(c for c in configs if c["BLOCK_M"] <= 64 or c["SPLIT"]):
        small = {**cfg, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}   # the interpreter's cost grows with tiles
        module = _load(tmp_path / f"pinned_{i}.py", pinned_source(SOURCE, small))
        for bb in (b, b.t().contiguous().t()):
            got = module.ModelNew()(a, bb)
            assert ((got.double() - want).norm() / want.norm()).item() < 1e-6, cfg
        assert module.CONFIGS[0].kwargs["SPLIT"] == cfg["SPLIT"]


def test_split_configs_keep_the_infs_of_a_at_b(tmp_path):
    """The split configs redo a tile that came out with a NaN, each step's small products'
    non-finite entries zeroed: b = inf meeting a remainder of A of the other sign (-inf + inf) or
    a zero part (0 * inf) would otherwise turn A @ B's infs into NaN (the interpreter computes the
    same products in IEEE fp32). Without the redo this test fails."""
    torch.manual_seed(2)
    a, b = torch.randn(40, 48), torch.randn(48, 36)
    a[5, :8] = ((a[5, :8].view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)  # exact: a_lo = 0
    b[7, 3], b[2, 9] = float("inf"), float("-inf")
    a[11, 20] = float("inf")
    want = a.double() @ b.double()
    for split in (1, 2):
        cfg = next(c for c in source_configs(SOURCE) if c["SPLIT"] == split)
        cfg = {**cfg, "BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
        got = _load(tmp_path / f"inf_{split}.py", pinned_source(SOURCE, cfg)).ModelNew()(a, b).double()
        assert torch.equal(got.isnan(), want.isnan()), split
        assert torch.equal(got.isinf() & (got > 0), want.isinf() & (want > 0)), split
        finite = want.isfinite()
        assert ((got - want)[finite].norm() / want[finite].norm()).item() < 1e-6
