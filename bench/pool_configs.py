"""Global average pooling of short rows (a CNN head's 7x7 map), side by side with eager and torch.compile.

    PYTHONPATH=. python3 bench/pool_configs.py --out FILE.json [--budget-s S] [TASK ...]

For each task (a name in bench/tasks/ whose forward starts with a global average pool), the pool
alone: the offline lowering's global-pool kernel with per-row 64-bit addresses (FLAT=False) over
a grid of rows per program and warps, a flat-index form for contiguous input (one 64-bit base a
program, 32-bit offsets within it, ROUNDS row blocks a program; the template's FLAT path since
2026-12-06), eager ``adaptive_avg_pool2d`` and its torch.compile, each output
checked against eager, then timed in one interleaved run (``verify.tune.time_configs``: L2
flushed before every call, round-robin, medians) with the achieved bandwidth. A survey for
choosing the template's tile, not a verification. Needs only torch, triton and numpy.
"""
from __future__ import annotations

import sys
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"
ROWS_WARPS = ((32, 4), (64, 4), (64, 8), (128, 4), (128, 8), (256, 8), (512, 8))
FLAT = ((64, 4, 1), (128, 4, 1), (128, 8, 1), (256, 8, 1), (128, 4, 4), (256, 8, 4))


@triton.jit
def flat_avg_kernel(x_ptr, y_ptr, R, L,
                    BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr, ROUNDS: tl.constexpr):
    """Mean of each row of a contiguous [R, L]: BLOCK_R rows a block, ROUNDS blocks a program."""
    rr = tl.arange(0, BLOCK_R)
    ls = tl.arange(0, BLOCK_L)
    offs = rr[:, None] * L + ls[None, :]          # 32-bit: a block spans BLOCK_R * L elements
    for i in range(ROUNDS):
        r0 = (tl.program_id(0) * ROUNDS + i) * BLOCK_R
        ok = (r0 + rr < R)[:, None] & (ls < L)[None, :]
        v = tl.load(x_ptr + r0.to(tl.int64) * L + offs, mask=ok, other=0.0).to(tl.float32)
        tl.store(y_ptr + r0 + rr, (tl.sum(v, axis=1) / L).to(y_ptr.dtype.element_ty), mask=r0 + rr < R)


def survey(name: str, folder: Path, iters: int) -> dict:
    import torch
    import torch.nn.functional as F

    from bench.rowwise_configs import load_module
    from kernelrag.draft.lower.lowering import lower, variant_choices
    from kernelrag.task import load_task
    from kernelrag.verify.tune import time_configs

    source = (TASKS / f"{name}.py").read_text()
    task = load_task(source, f"pool_{name}")
    x = task.get_inputs()[0].cuda()
    draft = lower(source, name, variant_choices(source)[0])
    if not draft.ok:
        raise RuntimeError(f"{name}: the lowering failed: {draft.reason}")
    module = load_module(draft.source, folder / f"{name}.py")
    kernel = next(getattr(module, n) for n in dir(module) if n.endswith("_pool_kernel"))
    expected = F.adaptive_avg_pool2d(x, 1)
    xf = x.flatten(2)
    nb, c, length = xf.shape
    rows = nb * c
    block_l = triton.next_power_of_2(length)
    pool = lambda t: F.adaptive_avg_pool2d(t, 1)  # noqa: E731
    compiled = torch.compile(pool)
    runs = {"eager": lambda: pool(x), "compile": lambda: compiled(x)}
    for br, warps in ROWS_WARPS:
        def run(br=br, warps=warps):
            y = torch.empty((nb, c, 1, 1), device=x.device, dtype=x.dtype)
            kernel[(triton.cdiv(rows, br),)](xf, y, rows, c, length, *xf.stride(), BLOCK_R=br, BLOCK_L=block_l,
                                             FLAT=False, num_warps=warps)
            return y
        runs[f"template:BLOCK_R={br},num_warps={warps}"] = run
    if xf.is_contiguous():
        for br, warps, rounds in FLAT:
            def run(br=br, warps=warps, rounds=rounds):
                y = torch.empty((nb, c, 1, 1), device=x.device, dtype=x.dtype)
                flat_avg_kernel[(triton.cdiv(rows, br * rounds),)](xf, y, rows, length, BLOCK_R=br,
                                                                    BLOCK_L=block_l, ROUNDS=rounds, num_warps=warps)
                return y
            runs[f"flat:BLOCK_R={br},num_warps={warps},ROUNDS={rounds}"] = run

    def check(out):
        err = (out.double() - expected.double()).abs().max().item()
        return err <= 1e-5, f"max abs err {err:.3g}"

    timed = time_configs(runs, check=check, iters=iters)
    nbytes = x.numel() * x.element_size() + rows * x.element_size()
    compile_ms = timed.get("compile", {}).get("median_ms")
    for row in timed.values():
        if row.get("median_ms"):
            row["gbps"] = round(nbytes / row["median_ms"] / 1e6, 1)
            if compile_ms:
                row["speedup_vs_compile"] = round(compile_ms / row["median_ms"], 4)
    mine = [label for label in runs if ":" in label and timed.get(label, {}).get("median_ms")]
    best = min(mine, key=lambda label: timed[label]["median_ms"]) if mine else None
    return {"task": name, "shape": list(x.shape), "bytes": nbytes, "runs": timed, "best": best,
            "best_gbps": timed[best]["gbps"] if best else None,
            "best_vs_compile": timed[best].get("speedup_vs_compile") if best else None,
            "per_row_vs_compile": timed.get("template:BLOCK_R=64,num_warps=4", {}).get("speedup_vs_compile")}


def main() -> int:
    from bench.rowwise_configs import survey_cli

    return survey_cli(__doc__, ["adaptive_avg_pool2d_linear"], 30, survey, "pool-configs-",
                      ("best", "best_gbps", "best_vs_compile", "per_row_vs_compile"))


if __name__ == "__main__":
    sys.exit(main())
