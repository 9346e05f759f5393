"""The row-wise kernels' launch configurations over long rows, side by side with torch.compile.

    PYTHONPATH=. python3 bench/rowwise_configs.py --out FILE.json [--budget-s S] [TASK ...]

For each task (a name in bench/tasks/, by default the row-wise losers of the H200 run of
2026-12-05), every variant combination the lowering offers whose draft lists ``CONFIGS``
(looped passes over rows of 8192 elements or more) is pinned to each configuration in turn
(``tuning.pinned_source``, as the configuration search does) and checked against the eager
output; the correct ones are timed together with eager PyTorch and torch.compile in one
interleaved run (``verify.tune.time_configs``: L2 flushed before every call, round-robin
order rotating each round, medians). Speedups are ratios within that run. This is a survey
for choosing the templates' defaults and the order of ``LONG_ROW_CONFIGS``; the verifier's
configuration search is what a generate run uses. Needs only torch, triton and numpy.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"
# below torch.compile in the H200 run of 2026-12-05, worst first
LOSERS = ("scaled_softmax", "layer_norm_relu_residual", "layer_norm", "rms_norm_silu", "softmax_entropy",
          "softmax", "log_softmax")


def load_module(source: str, path: Path):
    path.write_text(source)        # triton.jit reads the kernel's source from its file
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def survey(name: str, folder: Path, iters: int) -> dict:
    import torch

    from kernelrag.draft.lower.lowering import lower, variant_choices
    from kernelrag.memory.tuning import config_id, pinned_source, source_configs
    from kernelrag.task import load_task
    from kernelrag.verify.tune import time_configs

    source = (TASKS / f"{name}.py").read_text()
    task = load_task(source, f"survey_{name}")
    torch.manual_seed(0)
    ref = task.Model(*task.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        expected = ref(*inputs)
    compiled = torch.compile(ref)
    runs = {"eager": lambda: ref(*inputs), "compile": lambda: compiled(*inputs)}
    drafts, defaults = [], {}
    for combo in variant_choices(source):
        draft = lower(source, name, combo)
        configs = source_configs(draft.source) if draft.ok else []
        if not configs:
            continue
        for cfg in configs:
            label = f"{'+'.join(combo)}:{config_id(cfg)}"
            module = load_module(pinned_source(draft.source, cfg), folder / f"{name}_{len(drafts)}.py")
            ours = module.ModelNew(*task.get_init_inputs()).cuda().eval()
            ours.load_state_dict(ref.state_dict())
            runs[label] = (lambda m=ours: m(*inputs))
            drafts.append(label)
            defaults.setdefault("+".join(combo), label)      # CONFIGS[0]: what the draft launches

    wrong = {}
    with torch.no_grad():
        for label in drafts:      # checked before timing: a wrong configuration is reported, never timed
            try:
                out = runs[label]()
            except Exception as exc:   # noqa: BLE001 - a configuration that cannot launch is a result
                wrong[label] = {"status": "compile_error", "detail": f"{type(exc).__name__}: {exc}"[:300]}
                del runs[label]
                continue
            out = out[0] if isinstance(out, (tuple, list)) else out
            if not torch.allclose(out, expected, rtol=1e-4, atol=1e-5):
                wrong[label] = {"status": "incorrect", "detail": f"max abs err {(out - expected).abs().max().item():.3g}"}
                del runs[label]
        timed = {**time_configs(runs, iters=iters), **wrong}
    compile_ms = timed.get("compile", {}).get("median_ms")
    for label in drafts:
        ms = timed[label].get("median_ms")
        if ms and compile_ms:
            timed[label]["speedup_vs_compile"] = round(compile_ms / ms, 4)
    ok = [d for d in drafts if timed[d].get("median_ms")]
    best = min(ok, key=lambda d: timed[d]["median_ms"]) if ok else None
    return {"task": name, "runs": timed, "best": best,
            "best_vs_compile": timed[best].get("speedup_vs_compile") if best else None,
            "default_vs_compile": {combo: timed[label].get("speedup_vs_compile")
                                   for combo, label in defaults.items()}}


def survey_cli(doc: str, tasks: list[str], iters: int, survey_fn, prefix: str, shown: tuple[str, ...]) -> int:
    """A survey script's command line (``tasks`` by default, ``iters`` timed calls of each kernel),
    then ``run_tasks``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=list(tasks), help="task names in bench/tasks/")
    parser.add_argument("--out", required=True, help="results file (JSON)")
    parser.add_argument("--iters", type=int, default=iters, help="timed calls of each kernel")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no new task after this")
    return run_tasks(parser.parse_args(), survey_fn, prefix, shown)


def run_tasks(args: argparse.Namespace, survey_fn, prefix: str, shown: tuple[str, ...]) -> int:
    """``survey_fn(name, folder, iters)`` for each of ``args.tasks`` until ``args.budget_s``, the
    results file rewritten after each task (a step cut by its time limit keeps what it has)."""
    sys.path.insert(0, str(ROOT))
    import torch
    import triton

    start, rows = time.monotonic(), []
    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__,
              "method": "time_configs: L2 flushed before each call, round-robin, medians; ratios within one run",
              "tasks": rows}
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        for name in args.tasks:
            if time.monotonic() - start > args.budget_s:
                rows.append({"task": name, "skipped": "budget"})
                continue
            t0 = time.monotonic()
            try:
                row = survey_fn(name, Path(folder), args.iters)
            except Exception as exc:   # noqa: BLE001 - one task's failure is a result, the rest still run
                row = {"task": name, "error": f"{type(exc).__name__}: {exc}"[:500]}
            row["seconds"] = round(time.monotonic() - t0, 1)
            rows.append(row)
            print(name, *(f"{key}={row.get(key)}" for key in shown), row.get("error", ""), f"{row['seconds']} s",
                  flush=True)
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def main() -> int:
    return survey_cli(__doc__, list(LOSERS), 30, survey, "rowwise-configs-", ("best", "best_vs_compile", "default_vs_compile"))


if __name__ == "__main__":
    sys.exit(main())
