"""Every variant the lowering emits compiles for an sm_90 GPU, checked on a CPU.

The interpreter accepts kernels Triton's code generator rejects: a loop-carried variable
whose type changes in the loop (``rest`` of the row index is int64 and was once reused,
as int32, for the lane index inside the looped passes), a scalar re-assigned a block.
Each task below is lowered in every variant combination (and ``split`` where a region
allows it), its launcher run once at small sizes to record the launches (the interpreter's
hooks see each launch; the kernel bodies are not run: ``record(..., execute=False)``), and
each launched kernel is compiled with Triton's own binder for ``cuda:90`` (``cuda_compile``).
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import re
import types
from pathlib import Path

import pytest
import torch

from cuda_compile import compile_launches, load, record
from kernelrag.draft.lower.lowering import lower, variant_choices
from kernelrag.verify.task import ShrinkLevel, shrink

SUITE = Path(__file__).parents[1] / "bench" / "tasks"
FIXTURES = Path(__file__).parent / "fixtures"
TASKS = [SUITE / "softmax.py", SUITE / "group_norm_silu.py", SUITE / "cross_entropy_label_smoothing.py",
         SUITE / "mse_loss.py", SUITE / "argmax_dim.py", SUITE / "bmm_scale_softmax.py",
         FIXTURES / "lower" / "reverse_cumsum.py", FIXTURES / "tasks" / "cumprod_kernelbench.py",
         FIXTURES / "gemm_tasks" / "matrix_scalar.py", SUITE / "rotary_embedding_qk.py",
         FIXTURES / "lower" / "cat_stack_slices.py"]


def module_of(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def combinations(src: str) -> list[tuple[str, ...]]:
    """The combinations a generate run tries, plus ``split`` and ``looped`` everywhere they
    apply (``variant_choices`` leaves ``looped`` out where the traced rows are too long to
    hold: the same kernel as ``registers`` there, but not at the small sizes run here)."""
    combos = variant_choices(src)
    extra = [tuple(alt if v in ("registers", "looped") else v for v in combos[0]) for alt in ("split", "looped")]
    return combos + [c for c in dict.fromkeys(extra) if c not in combos and lower(src, "s", c).ok]


def launched(path: Path, combos: list[tuple[str, ...]], tmp_path: Path, rewrite=None,
             execute: bool = True) -> list[tuple[str, list]]:
    """(module file, its recorded launches) for each variant combination of the task at
    ``path``, run once under the interpreter at small sizes; ``rewrite`` edits the source first.
    ``execute=False``: the launchers run and every launch is recorded, but no kernel body
    runs (``cuda_compile.record``)."""
    src = path.read_text()
    small = module_of(shrink(src, ShrinkLevel(64, 16), "small", cpu=True).source, "small")
    modules = []
    for combo in combos:
        d = lower(src, path.stem, combo)
        assert d.ok, d.reason
        source = rewrite(d.source) if rewrite else d.source
        file = tmp_path / f"cand_{'_'.join(combo)}.py"
        cand = load(source, str(file))
        launches = record(cand, execute)
        torch.manual_seed(0)
        cand.ModelNew(*small.get_init_inputs())(*small.get_inputs())
        assert launches, f"{combo}: no kernel launched"
        modules.append((str(file), launches))
    return modules


def assert_all_compile(modules: list[tuple[str, list]]) -> list[dict]:
    results = compile_launches(modules)
    bad = [f"{Path(r['path']).stem} {r['kernel']}: {r['error'][-1500:]}" for r in results if not r["ok"]]
    assert not bad, "\n\n".join(bad)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("path", TASKS, ids=lambda p: p.stem)
def test_every_variant_compiles_for_sm90(path, tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    modules = launched(path, combinations(path.read_text()), tmp_path, execute=False)
    assert len(assert_all_compile(modules)) >= len(modules)


# the CUDA-only paths: tf32x3 dots with K-major (transposed) operands, CUDA tile rules, the
# direct and channel-wise convolution kernels, the global pool (the transposed convolution's
# phase GEMMs take minutes under the interpreter at CUDA tiles: checked by hand, 2026-12-01);
# conv2d_gelu_residual's residual takes the epilogue's full-tile load (the bias its per-channel one);
# linear_bias_logsumexp's tiles store row partials (gemm_rows) on the 3xTF32 split path
GPU_PATH_TASKS = [SUITE / name for name in ("depthwise_conv1d_causal_silu.py", "batch_norm_eval_relu.py",
                                            "adaptive_avg_pool2d_linear.py", "bmm.py", "conv2d_bias_relu.py",
                                            "conv2d_gelu_residual.py", "qk_scale_mask_softmax.py",
                                            "linear_bias_logsumexp.py")]


@pytest.mark.slow
@pytest.mark.parametrize("path", GPU_PATH_TASKS, ids=lambda p: p.stem)
def test_every_variant_compiles_for_sm90_as_it_launches_on_a_gpu(path, tmp_path):
    """As above, with each launcher taking its CUDA branch (``x.is_cuda`` read as True: CUDA
    tiles, ``input_precision="tf32x3"``), which the interpreter otherwise never runs."""
    pytest.importorskip("triton.backends.nvidia")

    def cuda_branch(source: str) -> str:
        gpu_source = re.sub(r"\b\w+\.is_cuda\b", "True", source)
        assert gpu_source != source, "the launcher no longer branches on is_cuda: update this test"
        return gpu_source

    modules = launched(path, variant_choices(path.read_text()), tmp_path, cuda_branch, execute=False)
    precisions = {launch["kwargs"].get("PRECISION") for _, launches in modules for launch in launches}
    assert precisions == {None} or "tf32x3" in precisions, precisions     # the CUDA branch was taken
    assert_all_compile(modules)


def test_a_loop_carried_type_change_is_caught(tmp_path):
    """The check itself: the old lane index (``rest`` re-used inside the loop) fails to compile."""
    pytest.importorskip("triton.backends.nvidia")
    src = (SUITE / "group_norm.py").read_text()
    d = lower(src, "group_norm", ("looped",))
    assert "lane_rest" in d.source
    broken = d.source.replace("lane_rest", "rest")
    small = module_of(shrink(src, ShrinkLevel(64, 16), "small", cpu=True).source, "small")
    cand = load(broken, str(tmp_path / "broken.py"))
    launches = record(cand, execute=False)
    cand.ModelNew(*small.get_init_inputs())(*small.get_inputs())   # the interpreter runs it
    results = compile_launches([(str(tmp_path / "broken.py"), launches)])
    assert results and not results[0]["ok"]
    assert "Loop-carried variable rest" in results[0]["error"], results[0]["error"]


SM90_SHARED_BYTES = 232448   # shared memory a block may use on sm_90 (227 KB)


def _tile_launch(dtype: str, precision: str, tile: tuple, split_b: bool = False, split_a: bool = False) -> dict:
    """A launch of the GEMM template's tile kernel at 4096^3 (A [M, K], B^T-major [K, N] strides;
    split_b: B given as TF32 parts, 3xTF32's CUDA default; split_a: A too, its default from N 4096)."""
    bm, bn, bk, warps, stages = tile
    t, size = {"tensor": dtype}, 4096
    args = [t, t, t, t, t, size, size, size, 1, 0, 0, size, 1, 0, 0, 1, size, 0, 0, size, 1]
    return {"kernel": "mm_kernel", "args": args,
            "kwargs": dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=1, PRECISION=precision,
                           SPLIT_B=split_b, SPLIT_A=split_a, STORE_CACHE="", num_warps=warps, num_stages=stages)}


@pytest.mark.slow
def test_every_cuda_gemm_tile_compiles_for_its_dot_path(tmp_path):
    """Each CUDA row of the GEMM tile tables compiles for sm_90 on the path that picks it (the
    interpreter never runs them: its rows are the CPU ones), bf16x6's helper included."""
    pytest.importorskip("triton.backends.nvidia")
    from kernelrag.draft.lower import tiles
    from kernelrag.draft.lower.gemm import render_gemm
    from kernelrag.draft.lower.gemm_spec import GemmSpec

    path = tmp_path / "mm_tiles.py"
    path.write_text(render_gemm(GemmSpec(name="mm", epilogue="acc = tl.minimum(tl.maximum(acc, -0.5), 0.5)\n")).source)
    paths = {   # table -> (dtype, dot path, B split into TF32 parts, A too) of the launches that pick it
        "GEMM_TILES": [("float32", "tf32x3", False, False)],
        "GEMM_TILES_TF32X3_SPLIT": [("float32", "tf32x3", True, False), ("float32", "tf32x3", True, True)],
        "GEMM_TILES_BF16X6": [("float32", "bf16x6", False, False)],
        "GEMM_TILES_16BIT": [("bfloat16", "tf32", False, False), ("float16", "tf32", False, False)]}
    launches = [_tile_launch(dtype, precision, row["tile"], split_b, split_a) for table, uses in paths.items()
                for row in getattr(tiles, table) if row["cuda"] for dtype, precision, split_b, split_a in uses]
    # a short K (a tall-skinny product, K = 16): one step on 64 x 128 tiles, the store streamed out
    t, m = {"tensor": "float32"}, 32768
    launches.append({"kernel": "mm_kernel", "args": [t, t, t, t, t, m, m, 16, 1, 0, 0, 16, 1, 0, 0, m, 1, 0, 0, m, 1],
                     "kwargs": dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=16, GROUP_M=8, SPLIT_K=1, PRECISION="ieee",
                                    SPLIT_B=False, SPLIT_A=False, STORE_CACHE=".cs", num_warps=4, num_stages=1)})
    distinct = {repr(launch) for launch in launches}           # tables repeat a tile across rows
    results = assert_all_compile([(str(path), launches)])
    assert len(results) == len(distinct) >= 8
    too_big = [r for r in results if (r.get("shared_bytes") or 0) > SM90_SHARED_BYTES]   # fails only at launch
    assert not too_big, too_big


@pytest.mark.slow
def test_the_tma_kernel_compiles_for_every_16bit_tile_with_tma_and_wgmma(tmp_path):
    """The persistent TMA kernel of 16-bit products (only a GPU launches it) compiles for sm_90
    at each CUDA tile of the 16-bit table, both weight layouts, with a bias epilogue."""
    pytest.importorskip("triton.backends.nvidia")
    from kernelrag.draft.lower import tiles
    from kernelrag.draft.lower.gemm import render_gemm
    from kernelrag.draft.lower.gemm_spec import GemmSpec

    path = tmp_path / "mm_tma.py"
    path.write_text(render_gemm(GemmSpec(name="mm", epilogue="acc = acc + e0\n", extra_rows=(False,))).source)
    size, launches = 4096, []
    for row in (r for r in tiles.GEMM_TILES_16BIT if r["cuda"]):
        bm, bn, bk, warps, stages = row["tile"]
        for b_nk in (True, False):
            desc = lambda block: {"tensordesc": "bfloat16", "shape": [size, size], "strides": [size, 1], "block": block}
            args = [desc([bm, bk]), desc([bn, bk] if b_nk else [bk, bn]), {"tensor": "bfloat16"},
                    {"tensor": "bfloat16"}, size, size, size, 0, 0, size, 1, 0, 0, 0, 1]
            launches.append({"kernel": "mm_tma_kernel", "args": args,
                             "kwargs": dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, B_NK=b_nk, NUM_SMS=132,
                                            num_warps=warps, num_stages=stages)})
    results = assert_all_compile([(str(path), launches)])
    assert len(results) == len({repr(launch) for launch in launches}) >= 6
    assert all(r["spill_bytes"] in (0, None) for r in results), results


def test_the_compile_keeps_the_launch_options_and_reports_registers_and_spills(tmp_path):
    """num_warps reaches the compile (the interpreter drops it before its hooks), and ptxas
    reports what the kernel costs on sm_90: the CPU-side performance signal."""
    pytest.importorskip("triton.backends.nvidia")
    import torch

    src = '''import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''
    mod = load(src, str(tmp_path / "copy.py"))
    launches = record(mod)
    x = torch.arange(300, dtype=torch.float32)
    y = torch.empty_like(x)
    mod.copy_kernel[(1,)](x, y, 300, BLOCK=512, num_warps=8)
    assert torch.equal(x, y) and launches[0]["options"] == {"num_warps": 8}
    [result] = compile_launches([(str(tmp_path / "copy.py"), launches)])
    assert result["ok"], result["error"]
    assert 0 < result["registers"] <= 255 and result["spill_bytes"] == 0
    assert result["ld_global"] >= 1 and result["st_global"] >= 1       # global memory instructions counted


@pytest.mark.slow
def test_the_3xtf32_splits_add_each_large_product_in_fp32_not_on_the_tensor_cores(tmp_path):
    """Triton rewrites acc + tl.dot(x, y, 0) into tl.dot(x, y, acc): the large TF32 products then
    accumulate on the tensor cores over all of K, which lost 2e-5 relative at 8192^3 (H100,
    2026-12-06), 3xTF32's point gone, and the CPU interpreter cannot see it. In the sm_90 PTX the
    K loop must start a tile afresh (a wgmma with scale-d 0) and add it with the CUDA cores
    (an fp32 add for each of a thread's 64 accumulator entries at 128 x 128 on 8 warps): the GEMM
    template's step (A split in the kernel or before it), the matmul_tf32x3 skill's split configs
    and the conv template's weight split (the GEMM lowering's tf32x3_split_step)."""
    pytest.importorskip("triton.backends.nvidia")
    from kernelrag.draft.lower.gemm import render_gemm
    from kernelrag.draft.lower.gemm_spec import GemmSpec

    gemm = tmp_path / "mm_split.py"
    gemm.write_text(render_gemm(GemmSpec(name="mm", epilogue="")).source)
    skill = Path(__file__).resolve().parents[1] / "skills" / "matmul" / "matmul_tf32x3" / "kernel.py"
    t, size = {"tensor": "float32"}, 4096
    skill_launches = [{"kernel": "matmul_tf32x3_kernel",
                       "args": [t] * 5 + [size] * 3 + [size, 1, size, 1, size, 1],
                       "kwargs": dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, SPLIT=split,
                                      PRECISION="tf32", num_warps=8, num_stages=3)} for split in (1, 2)]
    from kernelrag.draft.lower.conv import ConvSpec, render_conv

    conv = render_conv(ConvSpec(2, (3, 3), (1, 1), (1, 1), (1, 1), 1))
    conv_module = load(conv.source, str(tmp_path / "conv_split.py"))
    seen = record(conv_module, execute=False)
    getattr(conv_module, conv.entry)(torch.randn(2, 64, 16, 16), torch.randn(64, 64, 3, 3), precision="tf32x3",
                                     split_b=True)
    main = next(launch for launch in seen if launch["kernel"].endswith("conv_kernel"))
    assert main["kwargs"]["SPLIT_B"] is True
    conv_launch = {**main, "kwargs": {**main["kwargs"], "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32},
                   "options": {**main["options"], "num_warps": 8, "num_stages": 4}}
    results = assert_all_compile([(str(gemm), [_tile_launch("float32", "tf32x3", (128, 128, 32, 8, 3), True, split_a)
                                               for split_a in (False, True)]),
                                  (str(skill), skill_launches), (str(tmp_path / "conv_split.py"), [conv_launch])])
    assert len(results) == 5
    for r in results:
        assert r["loop_fresh_wgmma"] >= 1 and r["loop_f32_adds"] >= 64, r


@pytest.mark.slow
def test_the_tf32_split_passes_compile_with_vector_loads_and_stores(tmp_path):
    """The GEMM template's split passes for sm_90: B's alone (tf32_split_kernel) and A's with B's
    in one launch (tf32_split_pair_kernel, one branch a tensor): each global load and store 16
    bytes wide, as a memory-bound pass needs, in both of the pair's branches (A^T read down its
    columns, B along its rows), and no spill."""
    pytest.importorskip("triton.backends.nvidia")
    from kernelrag.draft.lower.gemm import render_gemm
    from kernelrag.draft.lower.gemm_spec import GemmSpec

    rendered = render_gemm(GemmSpec(name="mm"))
    path = str(tmp_path / "mm_parts.py")
    module = load(rendered.source, path)
    seen = record(module, execute=False)
    for split_a in (True, False):
        getattr(module, rendered.entry)(torch.randn(64, 96), torch.randn(96, 80), precision="tf32x3",
                                        split_b=True, split_a=split_a)
    passes = [launch for launch in seen if launch["kernel"].startswith("tf32_split")]
    assert sorted(launch["kernel"] for launch in passes) == ["tf32_split_kernel", "tf32_split_pair_kernel"]
    for r in assert_all_compile([(path, passes)]):
        assert r["spill_bytes"] == 0 and r["ld_global"] == r["ld_global_v4"] > 0, r
        assert r["st_global"] == r["st_global_v4"] > 0, r
