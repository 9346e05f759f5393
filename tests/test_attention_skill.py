"""The flash-attention skill under the configuration search: every config it lists runs pinned."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelrag.memory.tuning import pinned_source, source_configs

ROOT = Path(__file__).resolve().parents[1]


def test_the_attention_skill_runs_pinned_to_any_of_its_configs(tmp_path):
    """The configuration search pins one config at a time; the skill's dtype filter (16-bit inputs
    take BLOCK_N >= 64) must keep a pinned one even where it would not choose it."""
    source = (ROOT / "skills" / "scaled_dot_product_attention" / "flash_attention_fwd" / "kernel.py").read_text()
    configs = source_configs(source)
    assert len(configs) >= 3 and any(c["BLOCK_N"] == 32 for c in configs)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 70, 32, dtype=torch.float16) for _ in range(3))
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    for i, cfg in enumerate(configs):
        path = tmp_path / f"pinned_{i}.py"
        path.write_text(pinned_source(source, cfg))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        got = module.flash_attention_fwd(q, k, v)
        assert (got.float() - want).abs().max().item() < 2e-3, cfg
        assert module.flash_attention_fwd_kernel.best_config.kwargs["BLOCK_N"] == cfg["BLOCK_N"], cfg


def test_the_tma_survey_variant_matches_sdpa_across_sequence_tails():
    """bench/attention_tma.py (timed beside the skill by the attention survey): the descriptors'
    zero fill past a head's sequence and the key mask give SDPA's output where neither sequence
    length is a multiple of the tile, with and without the warp-specialized loop."""
    from bench import attention_tma

    torch.manual_seed(0)
    q = torch.randn(2, 3, 100, 32, dtype=torch.float16)
    k, v = (torch.randn(2, 3, 80, 32, dtype=torch.float16) for _ in range(2))
    assert attention_tma.supported(q, k, v)
    assert not attention_tma.supported(q.float(), k.float(), v.float())
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    for warp_specialize in (False, True):
        got = attention_tma.launcher(q, k, v, 64, 32, 4, 3, warp_specialize)()
        assert (got.float() - want).abs().max().item() < 2e-3, warp_specialize


def test_the_lazy_rescale_matches_sdpa_where_the_row_maximum_keeps_growing():
    """LAZY_RESCALE keeps a stale reference point until some row's maximum grew by more than 2^8.
    Keys scaled up along the sequence make each tile's maximum outgrow the last, so the
    rescaling branch runs on some tiles and is skipped on others (without it P overflows); the
    result is SDPA's, in the skill and in the survey's TMA variant, with a partial last key tile."""
    from bench import attention_tma

    source = (ROOT / "skills" / "scaled_dot_product_attention" / "flash_attention_fwd" / "kernel.py").read_text()
    spec = importlib.util.spec_from_loader("attention_skill_lazy", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "attention_skill_lazy.py", "exec"), module.__dict__)
    torch.manual_seed(0)
    q = torch.randn(1, 2, 70, 32, dtype=torch.float16)
    growth = torch.linspace(0.2, 12.0, 150).view(1, 1, 150, 1)
    k = (torch.randn(1, 2, 150, 32) * growth).half()
    v = torch.randn(1, 2, 150, 32, dtype=torch.float16)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    kernel = module.flash_attention_fwd_kernel
    for lazy in (False, True):
        o = torch.empty_like(q)
        kernel.fn[(2, 2)](q, k, v, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(), 2, 70, 150, 32,
                          1.4426950408889634 / 32 ** 0.5, BLOCK_M=64, BLOCK_N=32, BLOCK_D=32, D_PADDED=False,
                          PRECISION="tf32", LAZY_RESCALE=lazy)
        assert (o.float() - want).abs().max().item() < 2e-3, lazy
        got = attention_tma.launcher(q, k, v, 64, 32, 4, 3, False, lazy)()
        assert (got.float() - want).abs().max().item() < 2e-3, lazy


@pytest.mark.slow
def test_the_skill_and_the_tma_variant_compile_for_sm90(tmp_path):
    """Their 16-bit tiles as Triton's code generator sees them: the lazy rescale's block-wide
    branch inside the K loop beside the pipelined tensor-core dots, and the TMA variant's
    descriptor loads, plain and warp-specialized."""
    pytest.importorskip("triton.backends.nvidia")
    from cuda_compile import compile_launches

    skill = (ROOT / "skills" / "scaled_dot_product_attention" / "flash_attention_fwd" / "kernel.py").read_text()
    path = tmp_path / "attention_sm90.py"
    path.write_text(skill + "\nflash_attention_fwd_jit = flash_attention_fwd_kernel.fn   # the kernel under its autotuner\n")
    f16 = {"tensor": "float16"}
    launches = [{"kernel": "flash_attention_fwd_jit",
                 "args": [f16] * 4 + [256 * 64 * 2, 256 * 64, 64, 1] * 4 + [2, 256, 256, 64, 0.18],
                 "kwargs": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": 64, "D_PADDED": False, "PRECISION": "tf32",
                            "LAZY_RESCALE": lazy},
                 "options": {"num_warps": 4, "num_stages": 3}} for lazy in (False, True)]
    desc = lambda block: {"tensordesc": "float16", "shape": [4, 256, 64], "strides": [256 * 64, 64, 1],
                          "block": [1, block, 64]}
    tma = [{"kernel": "attention_tma_kernel", "args": [desc(128), desc(64), desc(64), desc(128), 256, 0.18],
            "kwargs": {"BLOCK_M": 128, "BLOCK_N": 64, "HEAD_DIM": 64, "WARP_SPECIALIZE": ws, "LAZY_RESCALE": lazy},
            "options": {"num_warps": 8, "num_stages": 3}} for ws, lazy in ((False, False), (True, False), (False, True))]
    results = compile_launches([(str(path), launches), (str(ROOT / "bench" / "attention_tma.py"), tma)])
    assert len(results) == 5 and all(r["ok"] for r in results), [r["error"][-800:] for r in results if not r["ok"]]
    assert all(r["spill_bytes"] in (0, None) for r in results), results
