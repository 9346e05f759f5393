"""Where the losing kernels lose: each task's composed draft verified once more under ncu.

    PYTHONPATH=. python3 bench/profile_tasks.py --out DIR/profile.json [TASK ...]

For each task (a name in bench/tasks/, by default the memory-bound losers of the H200 run
of 2026-12-02), every variant combination the lowering offers is drafted offline and
verified on the GPU with ``profile=True``: the verifier's timing, then one ncu pass
(``--clock-control none``) that names each kernel's limiter (memory, compute, latency)
with its speed-of-light shares, occupancy and DRAM bytes (see ``kernelrag.verify.profile``).
DRAM bytes against the task's declared bytes say whether a kernel re-reads from HBM what
should have stayed in L2. After a task's drafts, its torch.compile baseline is profiled the
same way (``profile_baseline``), so each draft's kernels are read beside the compiler's:
``ncu_ms`` is the summed kernel time under ncu and ``outside_kernels_ms`` the timed median
less it (launch gaps and host work the timed call waited for; on 2026-12-02 the drafts'
timed medians were 0.08-0.20 ms above their ncu kernel time). Writes one JSON file: per task
and combination, the verdict's status, times, speedups and profile, and per task the
compiler's profile. Needs only torch, triton and numpy (the GPU machine).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"
# the suite's losers against torch.compile in the H200 run of 2026-12-02 (s5), worst first
LOSERS = ("scaled_softmax", "group_norm", "rotary_embedding_qk", "linear_swiglu_bf16", "layer_norm",
          "rms_norm_silu", "matmul_tall_skinny")


def gaps(timed: dict | float | None, profile: dict | None) -> dict:
    """ncu's summed kernel time, and how much of the timed median lies outside the kernels."""
    median = timed.get("median_ms") if isinstance(timed, dict) else timed
    if not profile or not profile.get("profiled") or median is None:
        return {}
    ncu_ms = profile["total_duration_ns"] / 1e6
    return {"ncu_ms": round(ncu_ms, 4), "outside_kernels_ms": round(float(median) - ncu_ms, 4)}


def summary(profile: dict) -> str:
    if not profile.get("profiled"):
        return str(profile.get("note"))
    main = profile["main"]
    return (f"{profile['kernels']} kernel(s), {profile['total_duration_ns'] / 1e6:.3f} ms, main {main['kernel'][:60]}: "
            f"{main['limiter']}, DRAM {(main['dram_bytes'] or 0) / 1e9:.2f} GB, SOL memory {main['sol_memory_pct']}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=list(LOSERS), help="task names in bench/tasks/")
    parser.add_argument("--out", required=True, help="results file (JSON)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="start no new verification after this")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from kernelrag.draft.lower.lowering import lower, variant_choices
    from kernelrag.verify import VerifySession
    from kernelrag.verify.profile import profile_baseline

    rows, pairs, compiled = [], [], {}
    with tempfile.TemporaryDirectory(prefix="profile-tasks-") as folder:
        for name in args.tasks:
            task = TASKS / f"{name}.py"
            for combo in variant_choices(task.read_text()):
                draft = lower(task.read_text(), name, combo)
                if not draft.ok:
                    rows.append({"task": name, "variants": list(combo), "error": draft.reason})
                    continue
                candidate = Path(folder) / f"{name}_{'_'.join(combo)}.py"
                candidate.write_text(draft.source)
                pairs.append((name, combo, task, candidate))
        # one candidate at a time: the ncu pass runs after the verification's timing, outside
        # the GPU gate, and must not overlap another candidate's timed rounds
        start = time.monotonic()
        with VerifySession(device="cuda", workers=1) as session:
            for i, (name, combo, task, candidate) in enumerate(pairs):
                if time.monotonic() - start > args.budget_s:
                    break
                [v] = session.verify_pairs([(task, candidate)], errors="return", overrides=[{"profile": True}])
                if isinstance(v, Exception):
                    rows.append({"task": name, "variants": list(combo), "error": str(v)})
                    continue
                v = v.to_dict()
                rows.append({"task": name, "variants": list(combo),
                             **{k: v.get(k) for k in ("status", "kernel_ms", "compile_ms", "eager_ms",
                                                      "speedup_vs_compile", "frac_roofline", "bytes_moved",
                                                      "profile", "wall_s")},
                             **gaps(v.get("kernel_ms"), v.get("profile"))})
                print(f"{name} {'+'.join(combo)}: {v.get('status')}, {v.get('speedup_vs_compile')} x compile; "
                      f"{(v.get('profile') or {}).get('main')}", flush=True)
                last_of_task = i + 1 == len(pairs) or pairs[i + 1][0] != name
                if last_of_task and time.monotonic() - start < args.budget_s:
                    p = profile_baseline(task.read_text(), "compile", timeout_s=180.0)
                    compiled[name] = {"compile_ms": v.get("compile_ms"), "profile": p,
                                      **gaps(v.get("compile_ms"), p)}
                    print(f"{name} torch.compile: {summary(p)}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": datetime.date.today().isoformat(), "rows": rows, "compile": compiled},
                              indent=1) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
