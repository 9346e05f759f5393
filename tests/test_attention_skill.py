"""The flash-attention skill under the configuration search: every config it lists runs pinned."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib.util
from pathlib import Path

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
