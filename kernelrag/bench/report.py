"""Suite figures, the Markdown table and the roofline plot of a benchmark results file.

    python -m kernelrag.bench.report bench/results/h200-2026-11-29.json
        -> bench/results/h200-2026-11-29.md and bench/results/h200-2026-11-29-roofline.png

Every number comes from the results file; nothing is typed in by hand.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from kernelrag.verify.verdict import recommend

FAST_P = (0.5, 1.0, 1.5, 2.0)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def meets_target(t: dict[str, Any]) -> bool | None:
    """Faster than torch.compile, or at >= 90% of the roofline floor (a kernel at the limit can't win)."""
    if not t.get("correct") or t.get("speedup_vs_compile") is None:
        return None if t.get("correct") else False
    return t["speedup_vs_compile"] >= 1.0 or (t.get("frac_roofline") or 0) >= 0.9


def recommendation(entry: dict[str, Any]) -> str:
    """What a user should run for this task, judged against the better baseline and the roofline."""
    return recommend(bool(entry.get("correct")), bool(entry.get("timed")), entry.get("speedup_vs_eager"),
                     entry.get("speedup_vs_compile"), entry.get("frac_roofline"),
                     entry.get("reason") or entry.get("status") or "")


def finish_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Flatten the headline numbers of the task's final verdict into its entry.

    Everything set here is derived from the recorded verdict, so a report can re-derive
    it at any time (``write_report`` does) without touching a measurement."""
    v = entry.get("verdict") or {}
    entry["correct"] = bool(v.get("ok"))
    for key in ("speedup_vs_eager", "speedup_vs_compile", "achieved_gbps", "achieved_tflops",
                "frac_bandwidth", "frac_compute", "frac_roofline", "roofline_floor_ms", "timed"):
        entry[key] = v.get(key)
    for key in ("kernel_ms", "eager_ms", "compile_ms"):
        t = v.get(key) or {}
        entry[key] = t.get("median_ms")
        entry[key.replace("_ms", "_iqr_ms")] = t.get("iqr_ms")
        entry[key.replace("_ms", "_trials")] = t.get("trials")
    fb, fc = entry["frac_bandwidth"], entry["frac_compute"]
    # the bound is the larger of the two floors, i.e. the larger fraction of its ceiling
    entry["bound"] = None if fb is None or fc is None else ("memory" if fb >= fc else "compute")
    entry["recommendation"] = recommendation(entry)
    return entry


def floored_speedup(t: dict[str, Any], base: str) -> float | None:
    """The task's speedup over ``base`` ("eager" or "compile") with its kernel time floored at
    the roofline floor (VERIFY.md 27): a time below what the hardware allows (a bug, a hack,
    or timer noise on a tiny task) cannot drag an aggregate. The floor is the task's own."""
    speedup = t.get(f"speedup_vs_{base}")
    kernel, floor = t.get("kernel_ms"), t.get("roofline_floor_ms")
    if speedup is None or not kernel or not floor or kernel >= floor:
        return speedup
    return speedup * kernel / floor


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    tasks = list(results.get("tasks", {}).values())
    n = len(tasks)
    correct = [t for t in tasks if t.get("correct")]
    timed = [t for t in correct if t.get("speedup_vs_eager") is not None]
    s: dict[str, Any] = {
        "n_tasks": n, "n_correct": len(correct), "n_timed": len(timed),
        "correct_rate": len(correct) / n if n else 0.0,
        "unhandled": sorted(f"{t.get('task')}: {t.get('reason')}" for t in tasks
                            if t.get("status") in ("unhandled", "no_candidate")),
    }
    for base in ("eager", "compile"):
        s[f"fast_p_vs_{base}"] = {str(p): (sum(1 for t in timed if (floored_speedup(t, base) or 0) > p) / n
                                           if n else 0.0) for p in FAST_P}
        s[f"geomean_speedup_vs_{base}"] = geomean([floored_speedup(t, base) for t in timed])
    # a fused chain: a pattern of more than one op ("matmul>add>gelu"); the goals hold both
    is_fused = [">" in str(t.get("pattern") or "") for t in timed]
    s["n_fused_timed"] = sum(is_fused)
    for kind, want in (("fused", True), ("single", False)):
        s[f"geomean_speedup_vs_compile_{kind}"] = geomean(
            [floored_speedup(t, "compile") for t, fused in zip(timed, is_fused) if fused == want])
    s["geomean_speedup_vs_better_baseline"] = geomean(
        [min(floored_speedup(t, "eager"), floored_speedup(t, "compile") or floored_speedup(t, "eager"))
         for t in timed])
    s["floored_tasks"] = sorted(t["task"] for t in timed if (t.get("kernel_ms") or 0) > 0
                                and t.get("roofline_floor_ms") and t["kernel_ms"] < t["roofline_floor_ms"])
    mem = [t for t in timed if t.get("bound") == "memory" and t.get("frac_bandwidth") is not None]
    s["memory_bound_median_frac_bandwidth"] = median([t["frac_bandwidth"] for t in mem])
    s["n_meeting_target"] = sum(1 for t in tasks if meets_target(t))
    s["impossible"] = sorted(t["task"] for t in timed
                             if max(t.get("frac_roofline") or 0, t.get("frac_bandwidth") or 0,
                                    t.get("frac_compute") or 0) > 1.05)
    s["recommend_baseline"] = sorted(t["task"] for t in tasks if str(t.get("recommendation", "")).startswith("use ")
                                     and not str(t.get("recommendation", "")).startswith("use the kernel"))
    s["recommend_reference"] = sorted(t["task"] for t in tasks
                                      if str(t.get("recommendation", "")).startswith("keep the PyTorch"))
    g = s["geomean_speedup_vs_compile"]
    s["targets"] = {
        "correct_100pct": s["correct_rate"] == 1.0,
        "every_task_beats_compile_or_at_90pct_roofline": n > 0 and s["n_meeting_target"] == n,
        "geomean_vs_compile_ge_1.2": g is not None and g >= 1.2,
        "geomean_vs_compile_fused_ge_1.3": (s["geomean_speedup_vs_compile_fused"] or 0) >= 1.3,
        "fast_1_vs_eager_ge_80pct": s["fast_p_vs_eager"]["1.0"] >= 0.8 if n else False,
        "memory_bound_median_ge_90pct_bandwidth": (s["memory_bound_median_frac_bandwidth"] or 0) >= 0.9,
        "no_impossible_speedups": not s["impossible"],
    }
    return s


def _f(x: Any, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def _runs_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The suite's wall: one line per invocation (a resumed run has several), with how the GPU
    was held (alone for timing, shared for untimed work, by no one)."""
    if not runs:
        return []
    total = sum(r.get("wall_s") or 0.0 for r in runs)
    lines = [f"- wall: {total / 60:.1f} min over {len(runs)} invocation(s), "
             f"{sum(r.get('tasks') or 0 for r in runs)} tasks"]
    for r in runs:
        gate = r.get("gpu_gate") or {}
        held = (f"; GPU alone {gate.get('exclusive_s', 0):.0f} s, shared {gate.get('shared_s', 0):.0f} s, "
                f"held by no one {gate.get('idle_s', 0) + gate.get('idle_with_waiters_s', 0):.0f} s" if gate else "")
        lines.append(f"  - {r.get('started')}: {r.get('tasks')} tasks in {r.get('wall_s', 0):.0f} s, "
                     f"{r.get('parallel')} at a time{held}")
    return lines


def markdown(results: dict[str, Any]) -> str:
    m, s = results.get("machine", {}), results.get("summary") or summarize(results)
    ceil = m.get("ceilings") or {}
    lines = [
        f"# Benchmark: {m.get('gpu', m.get('device'))}",
        "",
        f"torch {m.get('torch')}, triton {m.get('triton')}, driver {m.get('driver')}, CUDA {m.get('cuda')}; "
        f"measured ceilings: copy {_f(ceil.get('copy_gbps'), '{:.0f}')} GB/s, read "
        f"{_f(ceil.get('read_gbps'), '{:.0f}')} GB/s, bf16 matmul "
        f"{_f(ceil.get('bf16_tflops'), '{:.0f}')} TFLOP/s, fp32 matmul {_f(ceil.get('fp32_tflops'), '{:.1f}')} TFLOP/s.",
        "",
        f"- tasks: {s['n_tasks']}, correct: {s['n_correct']} ({s['correct_rate']:.0%}), timed: {s['n_timed']}",
        f"- geomean speedup vs eager: {_f(s['geomean_speedup_vs_eager'], '{:.2f}x')}, "
        f"vs torch.compile: {_f(s['geomean_speedup_vs_compile'], '{:.2f}x')}, "
        f"vs the better of the two: {_f(s['geomean_speedup_vs_better_baseline'], '{:.2f}x')}",
        f"- geomean vs torch.compile on the {s.get('n_fused_timed', 0)} fused chains: "
        f"{_f(s.get('geomean_speedup_vs_compile_fused'), '{:.3f}x')}, on the single ops: "
        f"{_f(s.get('geomean_speedup_vs_compile_single'), '{:.3f}x')}",
        "- fast_p vs eager: " + ", ".join(f"fast_{p}={v:.0%}" for p, v in s["fast_p_vs_eager"].items()),
        "- fast_p vs torch.compile: " + ", ".join(f"fast_{p}={v:.0%}" for p, v in s["fast_p_vs_compile"].items()),
        f"- memory-bound kernels, median fraction of the memory ceiling (read and copy bandwidth): "
        f"{_f(s['memory_bound_median_frac_bandwidth'], '{:.0%}')}",
        f"- tasks faster than torch.compile or at >= 90% of the roofline: {s['n_meeting_target']}/{s['n_tasks']}",
        "- targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in s["targets"].items()),
        *_runs_lines(results.get("runs") or []),
        "",
        "| task | pattern | status | kernel ms | eager ms | compile ms | vs eager | vs compile | GB/s | TFLOP/s "
        "| roofline | recommendation |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in sorted(results.get("tasks", {})):
        t = results["tasks"][name]
        lines.append(
            f"| {name} | `{t.get('pattern', '?')}` | {t.get('status')} | {_f(t.get('kernel_ms'))} | "
            f"{_f(t.get('eager_ms'))} | {_f(t.get('compile_ms'))} | {_f(t.get('speedup_vs_eager'), '{:.2f}x')} | "
            f"{_f(t.get('speedup_vs_compile'), '{:.2f}x')} | {_f(t.get('achieved_gbps'), '{:.0f}')} | "
            f"{_f(t.get('achieved_tflops'), '{:.1f}')} | {_f(t.get('frac_roofline'), '{:.0%}')} | "
            f"{t.get('recommendation', '')} |")
    if s["unhandled"]:
        lines += ["", "Tasks without a verified kernel, with the reason:", ""]
        lines += [f"- {u}" for u in s["unhandled"]]
    return "\n".join(lines) + "\n"


def roofline_plot(results: dict[str, Any], out: Path) -> Path | None:
    """Achieved TFLOP/s against arithmetic intensity, under the measured ceilings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ceil = (results.get("machine") or {}).get("ceilings") or {}
    bw_gbps, peak = ceil.get("copy_gbps"), ceil.get("bf16_tflops")
    pts = []
    for name, t in results.get("tasks", {}).items():
        v = t.get("verdict") or {}
        if t.get("correct") and t.get("kernel_ms") and v.get("flops") and v.get("bytes_moved"):
            pts.append((name, v["flops"] / v["bytes_moved"],
                        t["achieved_tflops"] or v["flops"] / t["kernel_ms"] / 1e9,
                        v["flops"] / (t["eager_ms"] * 1e9) if t.get("eager_ms") else None))
    if not pts or not bw_gbps:
        return None
    fig, ax = plt.subplots(figsize=(9, 6))
    xs = [10 ** (k / 20) for k in range(-40, 81)]
    ax.plot(xs, [min(x * bw_gbps / 1e3, peak or float("inf")) for x in xs], "k-", lw=1.5,
            label=f"measured roofline ({bw_gbps:.0f} GB/s, {peak or 0:.0f} TFLOP/s bf16)")
    if ceil.get("fp32_tflops"):
        ax.axhline(ceil["fp32_tflops"], color="gray", ls="--", lw=1, label=f"fp32 matmul {ceil['fp32_tflops']:.0f} TFLOP/s")
    ax.scatter([p[1] for p in pts], [p[2] for p in pts], c="tab:red", s=28, label="kernelrag kernel", zorder=3)
    eager = [p for p in pts if p[3]]
    ax.scatter([p[1] for p in eager], [p[3] for p in eager], c="tab:blue", marker="x", s=22, label="PyTorch eager")
    for name, x, y, _ in pts:
        ax.annotate(name, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"Roofline: {(results.get('machine') or {}).get('gpu', '')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def write_report(results_path: Path) -> list[Path]:
    results = json.loads(results_path.read_text())
    for entry in results.get("tasks", {}).values():     # derived fields follow the current rules
        finish_entry(entry)
    results["summary"] = summarize(results)
    results_path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    md = results_path.with_suffix(".md")
    md.write_text(markdown(results))
    written = [md]
    png = roofline_plot(results, results_path.with_name(results_path.stem + "-roofline.png"))
    if png:
        written.append(png)
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m kernelrag.bench.report RESULTS.json", file=sys.stderr)
        return 2
    for p in write_report(Path(argv[0])):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
