"""The flash-attention skill's tile configurations, side by side with SDPA and torch.compile.

    PYTHONPATH=. python3 bench/attention_configs.py --out FILE.json [--budget-s S] [TASK ...]

For each task (a name in bench/tasks/ whose Model is one scaled_dot_product_attention), the
skill's kernel (skills/scaled_dot_product_attention/flash_attention_fwd) is launched once per
configuration: "skill:" those its autotuner tries for the task's dtype, "other:" the rest of its
CONFIGS and a few more (EXTRA), "lazy:" the autotuner's tiles with the kernel's LAZY_RESCALE on,
"tma:" the TMA-descriptor variant of bench/attention_tma.py (TMA). Each output is checked
against the eager one, then all are timed in one interleaved run with eager PyTorch (SDPA's own
backend choice), torch.compile and the skill's autotuned entry point
(``verify.tune.time_configs``: L2 flushed before every call, round-robin, medians).
Speedups are ratios within that run. A survey for choosing the autotuner's list, not a
verification. Needs only torch, triton and numpy.
"""
from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"
SKILL = ROOT / "skills" / "scaled_dot_product_attention" / "flash_attention_fwd" / "kernel.py"
LOG2E = 1.4426950408889634
# timed beside the skill's own CONFIGS, to find better ones: (BLOCK_M, BLOCK_N, warps, stages)
EXTRA = ((64, 64, 4, 4), (64, 128, 4, 3), (128, 64, 4, 3), (128, 128, 8, 3))
# the TMA-descriptor variant (bench/attention_tma.py):
# (BLOCK_M, BLOCK_N, warps, stages, warp-specialized, lazy rescale)
TMA = ((64, 64, 4, 3, False, False), (128, 64, 8, 3, False, False), (128, 64, 4, 3, False, False),
       (128, 128, 8, 2, False, False), (128, 128, 8, 3, False, False), (128, 64, 8, 3, True, False),
       (128, 128, 8, 2, True, False), (64, 64, 4, 3, False, True), (128, 64, 8, 3, False, True))


def _config_launchers(skill, q, k, v):
    import torch
    import triton

    kernel = skill.flash_attention_fwd_kernel
    z, h, seq_q, d = q.shape
    block_d = max(16, triton.next_power_of_2(d))
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    launchers = {}
    chosen = skill._prune(kernel.configs, {"q_ptr": q, "HEAD_DIM": d})
    tiles = [(c.kwargs, c.num_warps, c.num_stages, c in chosen) for c in kernel.configs]
    tiles += [({"BLOCK_M": m, "BLOCK_N": n}, w, s, False) for m, n, w, s in EXTRA]
    for meta, warps, stages, pruned_in in tiles:
        meta = dict(meta)

        def run(meta=meta, warps=warps, stages=stages, lazy=False):
            o = torch.empty_like(q)
            kernel.fn[(triton.cdiv(seq_q, meta["BLOCK_M"]), z * h)](
                q, k, v, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(), h, seq_q, k.shape[2], d,
                LOG2E / math.sqrt(d), BLOCK_D=block_d, D_PADDED=block_d > d, PRECISION=precision,
                LAZY_RESCALE=lazy, num_warps=warps, num_stages=stages, **meta)
            return o
        label = ",".join(f"{key}={value}" for key, value in meta.items())
        kind = "skill" if pruned_in else "other"     # other: not among the autotuner's choices for this dtype
        launchers[f"{kind}:{label},num_warps={warps},num_stages={stages}"] = run
        if pruned_in:   # the same tile with the lazy rescale (the skill's LAZY_RESCALE, not in CONFIGS)
            launchers[f"lazy:{label},num_warps={warps},num_stages={stages}"] = functools.partial(run, lazy=True)
    from bench import attention_tma

    if attention_tma.supported(q, k, v):
        for m, n, warps, stages, ws, lazy in TMA:
            launchers[f"tma:BLOCK_M={m},BLOCK_N={n},num_warps={warps},num_stages={stages}"
                      f"{',warp_specialize' if ws else ''}{',lazy_rescale' if lazy else ''}"] = \
                attention_tma.launcher(q, k, v, m, n, warps, stages, ws, lazy)
    return launchers


def survey(name: str, folder: Path, iters: int) -> dict:
    import torch

    from bench.rowwise_configs import load_module
    from kernelrag.task import load_task
    from kernelrag.verify.tune import time_configs

    task = load_task((TASKS / f"{name}.py").read_text(), f"attn_{name}")
    skill = load_module(SKILL.read_text(), folder / "flash_attention_fwd.py")
    torch.manual_seed(0)
    ref = task.Model(*task.get_init_inputs()).cuda().eval()
    q, k, v = (x.cuda() for x in task.get_inputs())
    with torch.no_grad():
        expected = ref(q, k, v)
    compiled = torch.compile(ref)
    runs = {"eager": lambda: ref(q, k, v), "compile": lambda: compiled(q, k, v),
            "skill:autotuned": lambda: skill.flash_attention_fwd(q, k, v)}
    mine = _config_launchers(skill, q, k, v)
    runs.update(mine)
    tol = 1e-4 if q.dtype == torch.float32 else 2e-2

    def check(out):
        err = (out.double() - expected.double()).abs().max().item()
        return err <= tol * (1 + expected.abs().max().item()), f"max abs err {err:.3g}"

    with torch.no_grad():
        timed = time_configs(runs, check=check, iters=iters)
    compile_ms = timed.get("compile", {}).get("median_ms")
    flops = task.get_flops() if hasattr(task, "get_flops") else None
    for row in timed.values():
        if row.get("median_ms") and compile_ms:
            row["speedup_vs_compile"] = round(compile_ms / row["median_ms"], 4)
        if row.get("median_ms") and flops:
            row["tflops"] = round(flops / row["median_ms"] / 1e9, 1)
    ok = [label for label in mine if timed.get(label, {}).get("median_ms")]   # the best of all tiles
    best = min(ok, key=lambda label: timed[label]["median_ms"]) if ok else None
    chosen = skill.flash_attention_fwd_kernel.best_config
    return {"task": name, "shape": list(q.shape), "dtype": str(q.dtype), "flops": flops, "runs": timed,
            "best": best, "best_vs_compile": timed[best].get("speedup_vs_compile") if best else None,
            "autotuned_vs_compile": timed.get("skill:autotuned", {}).get("speedup_vs_compile"),
            "autotuner_chose": str(chosen) if chosen is not None else None}


def main() -> int:
    from bench.rowwise_configs import survey_cli

    return survey_cli(__doc__, ["attention"], 30, survey, "attention-configs-",
                      ("best", "best_vs_compile", "autotuned_vs_compile"))


if __name__ == "__main__":
    sys.exit(main())
