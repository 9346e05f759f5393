"""Cooperative rows and tall-skinny products, side by side with torch.compile and today's drafts.

    PYTHONPATH=. python3 bench/coop_rows.py --out FILE.json [--budget-s S] [TASK ...]

For each task (a name in bench/tasks/), the hand-written kernels of bench/coop_kernels.py
are launched over a grid of chunk sizes and warps, checked against the eager output (the
one-launch kernel with its wait, and the two-launch form the CPU interpreter would run),
then timed in one interleaved run with eager PyTorch, torch.compile and the offline
lowering's drafts for the task, one a variant combination, the default first, each launching
its CONFIGS[0] (``verify.tune.time_configs``: L2 flushed before every
call, round-robin, medians). Speedups are ratios within that run. A survey for choosing a
template, not a verification: the verifier's protocol is what a generate run uses.
Needs only torch, triton and numpy.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"
ROWS = ("log_softmax", "scaled_softmax", "softmax", "layer_norm", "rms_norm", "rms_norm_silu",
        "layer_norm_relu_residual", "group_norm", "group_norm_silu", "instance_norm_relu")
DEFAULT = ("matmul_tall_skinny",) + ROWS
CHUNK_WARPS = ((2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16))
# (stages, warps) of the persistent pipelined norm: 1 stage holds the row in registers, no copy
# ahead; 2 and 3 keep one and two rows in flight in shared memory (64 KB each at 16384 fp32)
PIPED = ((1, 16), (1, 32), (2, 16), (2, 32), (3, 32))
SKINNY = [(bm, bn, w, fma, stream) for bm, bn, w in ((64, 256, 4), (128, 128, 4), (128, 128, 8), (128, 256, 8),
                                                      (256, 128, 8), (64, 128, 4), (32, 256, 4))
          for fma in (0, 1) for stream in (0, 1)]


def _row_spec(name: str, ref, x):
    """(kernel, constant kwargs, tensor args before y) for a row task, from its Model."""
    import torch.nn as nn

    from bench import coop_kernels as K

    if "softmax" in name:
        return K.coop_softmax, dict(SCALE=0.125 if name == "scaled_softmax" else 1.0, LOG=name == "log_softmax"), []
    act = {"rms_norm_silu": 1, "group_norm_silu": 1, "instance_norm_relu": 2, "layer_norm_relu_residual": 3}.get(name, 0)
    if name.startswith("rms_norm"):
        return K.coop_norm, dict(RMS=True, PER_COLUMN=True, INNER=1, GROUPS=1, ACT=act, eps=ref.eps), \
            [ref.weight.detach(), ref.weight.detach()]
    norm = next(m for m in ref.modules() if isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm2d)))
    if isinstance(norm, nn.LayerNorm):
        return K.coop_norm, dict(RMS=False, PER_COLUMN=True, INNER=1, GROUPS=1, ACT=act, eps=norm.eps), \
            [norm.weight.detach(), norm.bias.detach()]
    groups = norm.num_groups if isinstance(norm, nn.GroupNorm) else x.shape[1]
    inner = x.shape[2] * x.shape[3]
    return K.coop_norm, dict(RMS=False, PER_COLUMN=False, INNER=inner, GROUPS=groups, ACT=act, eps=norm.eps), \
        [norm.weight.detach(), norm.bias.detach()]


def _row_launchers(name: str, ref, x):
    import torch

    from bench import coop_kernels as K

    kernel, consts, params = _row_spec(name, ref, x)
    per_column = consts.get("PER_COLUMN", True)       # softmax and layer/RMS norm: rows along the last dim
    rows = x.numel() // x.shape[-1] if per_column else x.shape[0] * consts["GROUPS"]
    n = x.numel() // rows
    launchers = {}
    for chunk, warps in CHUNK_WARPS:
        if n % chunk or n // chunk < 2 or (not per_column and consts["INNER"] % chunk):
            continue
        n_chunks = n // chunk

        def run(phases=False, chunk=chunk, n_chunks=n_chunks, warps=warps):
            y = torch.empty_like(x)
            part = torch.empty(2 * rows * n_chunks, device=x.device, dtype=torch.float32)
            count = torch.zeros(rows, device=x.device, dtype=torch.int32)
            for phase in ((1, 2) if phases else (0,)):
                kernel[(rows * n_chunks,)](x, *params, y, part, count, N=n, CHUNK=chunk, N_CHUNKS=n_chunks,
                                           PHASE=phase, num_warps=warps, **consts)
            return y
        launchers[f"coop:CHUNK={chunk},num_warps={warps}"] = run
    if per_column and kernel is not K.coop_softmax and n & (n - 1) == 0:
        programs = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        for stages, warps in PIPED:
            def piped(phases=False, stages=stages, warps=warps):
                y = torch.empty_like(x)
                K.piped_norm[(min(programs, rows),)](x, *params, y, rows, consts["eps"], N=n, RMS=consts["RMS"],
                                                     ACT=consts["ACT"], STAGES=stages, num_warps=warps)
                return y
            launchers[f"piped:STAGES={stages},num_warps={warps}"] = piped
    return launchers


def _skinny_launchers(a, b):
    import torch

    from bench import coop_kernels as K

    m, k = a.shape
    n = b.shape[1]
    launchers = {}
    for bm, bn, warps, fma, stream in SKINNY:
        def run(bm=bm, bn=bn, warps=warps, fma=fma, stream=stream):
            c = torch.empty(m, n, device=a.device, dtype=torch.float32)
            K.skinny_dot[(m // bm * (n // bn),)](a, b, c, M=m, N=n, K=k, BM=bm, BN=bn, GROUP=8, FMA=fma,
                                                  STREAM=stream, num_warps=warps)
            return c
        launchers[f"skinny:BM={bm},BN={bn},num_warps={warps},{'fma' if fma else 'dot_ieee'}{',cs' if stream else ''}"] = run
    launchers["write_ceiling:torch.full"] = lambda: torch.full((m, n), 1.0, device=a.device)
    return launchers


def survey(name: str, folder: Path, iters: int) -> dict:
    import torch

    from bench.rowwise_configs import load_module
    from kernelrag.draft.lower.lowering import lower, variant_choices
    from kernelrag.task import load_task
    from kernelrag.verify.tune import time_configs

    source = (TASKS / f"{name}.py").read_text()
    task = load_task(source, f"coop_{name}")
    torch.manual_seed(0)
    ref = task.Model(*task.get_init_inputs()).cuda().eval()
    with torch.no_grad():       # parameters off their defaults, as the verifier redraws them
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + 1.0)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        expected = ref(*inputs)
    compiled = torch.compile(ref)
    runs = {"eager": lambda: ref(*inputs), "compile": lambda: compiled(*inputs)}
    lowered = {}
    for combo in variant_choices(source)[:4]:      # the default first
        draft = lower(source, name, combo)
        if draft.ok:
            module = load_module(draft.source, folder / f"{name}_{len(lowered)}.py")
            ours = module.ModelNew(*task.get_init_inputs()).cuda().eval()
            ours.load_state_dict(ref.state_dict())
            lowered[f"lowered:{'+'.join(combo)}"] = lambda m=ours: m(*inputs)
    default = next(iter(lowered), None)
    mine = _skinny_launchers(*inputs) if name == "matmul_tall_skinny" else _row_launchers(name, ref, inputs[0])
    checks, wrong = {}, {}
    with torch.no_grad():
        for label, run in [*mine.items(), *lowered.items()]:
            try:
                out = run()
                if label.startswith("coop") and label == next(iter(mine)):
                    two = run(phases=True)
                    checks["two_launches_equal_one"] = bool(torch.equal(two, out))
            except Exception as exc:   # noqa: BLE001 - a kernel that cannot build or launch is a result
                wrong[label] = {"status": "compile_error", "detail": f"{type(exc).__name__}: {exc}"[:400]}
                mine.pop(label, None)
                lowered.pop(label, None)
                continue
            if label.startswith("write_ceiling"):
                continue
            out = out[0] if isinstance(out, (tuple, list)) else out
            err = (out.double() - expected.double()).abs().max().item()
            if not torch.allclose(out, expected, rtol=1e-4, atol=1e-5):
                wrong[label] = {"status": "incorrect", "detail": f"max abs err {err:.3g}"}
                mine.pop(label, None)
                lowered.pop(label, None)
            else:
                checks[label] = f"max abs err {err:.3g}"
        runs.update(mine)
        runs.update(lowered)
        timed = {**time_configs(runs, iters=iters), **wrong}
    compile_ms = timed.get("compile", {}).get("median_ms")
    for label, row in timed.items():
        if row.get("median_ms") and compile_ms:
            row["speedup_vs_compile"] = round(compile_ms / row["median_ms"], 4)
    ok = [label for label in mine if timed.get(label, {}).get("median_ms")]
    best = min(ok, key=lambda label: timed[label]["median_ms"]) if ok else None
    nbytes = task.get_bytes() if hasattr(task, "get_bytes") else None
    return {"task": name, "bytes": nbytes, "runs": timed, "checks": checks, "best": best,
            "best_vs_compile": timed[best].get("speedup_vs_compile") if best else None,
            "lowered_default": default, "lowered_vs_compile": {label: timed[label].get("speedup_vs_compile")
                                                               for label in timed if label.startswith("lowered")}}


def main() -> int:
    from bench.rowwise_configs import survey_cli

    return survey_cli(__doc__, list(DEFAULT), 20, survey, "coop-rows-", ("best", "best_vs_compile", "lowered_vs_compile"))


if __name__ == "__main__":
    sys.exit(main())
