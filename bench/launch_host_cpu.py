"""The generated launchers' Python alone, on the CPU: each draft's ``forward`` with its kernels stubbed.

    PYTHONPATH=. python3 bench/launch_host_cpu.py --out FILE.json [--before DIR] [TASK ...]
    PYTHONPATH=. python3 bench/launch_host_cpu.py --render DIR [TASK ...]

A launcher's Python runs inside every timed call, and the GPU waits for whatever of it the
L2 flush before the call does not hide (bench/launch_overhead.py measures that on the GPU).
This times the same Python where no GPU is: for each task (a name in bench/tasks/) and each
variant combination the lowering offers, the draft's module is loaded, every ``*_kernel`` in
it replaced by a stub that accepts a launch and does nothing, and ``forward`` called on the
task's inputs at the CPU-check size (``verify.task.shrink``): medians of 7 rounds of N calls,
a task's drafts interleaved round by round.
The CPU runs a coop launcher's two-launch form and its tensors are host memory, so the figures
compare drafts with each other, not with a GPU host. ``--render DIR`` writes the current drafts
as ``<task>__<variants>.py``; run it at an older commit and pass the folder as ``--before``.
Needs torch and triton only.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"
DEFAULT = ("rotary_embedding_qk", "add_relu", "layer_norm_modulate", "scaled_softmax", "log_softmax", "group_norm")


class _Stub:
    """Stands in for a Triton kernel: ``kernel[grid](*args, **meta)`` returns at once."""

    def __getitem__(self, grid):
        return lambda *args, **meta: None


def _host_us(fns: dict, calls: int, rounds: int = 7) -> dict[str, float]:
    """Median microseconds a call of each fn, the fns interleaved round by round (drift hits all alike)."""
    for fn in fns.values():
        for _ in range(max(10, calls // 10)):
            fn()
    samples: dict[str, list[float]] = {label: [] for label in fns}
    for r in range(rounds):
        order = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
        for label in order:
            fn = fns[label]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[label].append((time.perf_counter() - t0) / calls * 1e6)
    return {label: round(statistics.median(v), 2) for label, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=list(DEFAULT), help="task names in bench/tasks/")
    parser.add_argument("--out", help="results file (JSON)")
    parser.add_argument("--before", help="a folder of older drafts, <task>__<variants>.py")
    parser.add_argument("--render", help="write the current drafts into this folder and stop")
    parser.add_argument("--calls", type=int, default=2000, help="calls a round")
    args = parser.parse_args()
    if not (args.out or args.render):
        parser.error("give --out FILE (time the drafts) or --render DIR (write them)")
    sys.path.insert(0, str(ROOT))
    import torch

    from bench.launch_overhead import drafts_of, write_result
    from bench.rowwise_configs import load_module
    from kernelrag.task import load_task
    from kernelrag.verify.task import ShrinkLevel, shrink

    if args.render:
        folder = Path(args.render)
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.tasks:
            for label, text in drafts_of(name, None).items():
                (folder / f"{name}__{label.split(':')[0]}.py").write_text(text)
        print(f"drafts written to {folder}")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="launch-host-") as tmp, torch.no_grad():
        for name in args.tasks:
            small = shrink((TASKS / f"{name}.py").read_text(), ShrinkLevel(64, 16), "small", cpu=True)
            task = load_task(small.source, f"host_{name}")
            torch.manual_seed(0)
            inputs = task.get_inputs()
            fns = {}
            for i, (label, text) in enumerate(drafts_of(name, Path(args.before) if args.before else None).items()):
                module = load_module(text, Path(tmp) / f"{name}_{i}.py")
                for attr in [a for a in dir(module) if a.endswith("_kernel")]:
                    setattr(module, attr, _Stub())
                fns[label] = (lambda m=module.ModelNew(*task.get_init_inputs()): m(*inputs))
            row = {"task": name, "host_us": _host_us(fns, args.calls)}
            for label, us in row["host_us"].items():
                print(f"{name} {label}: {us} us a forward", flush=True)
            rows.append(row)
    result = {"date": datetime.date.today().isoformat(), "cpu": platform.processor() or platform.machine(),
              "python": platform.python_version(), "torch": torch.__version__,
              "method": "forward with every *_kernel stubbed, inputs at the CPU-check size; medians of 7 "
                        "interleaved rounds",
              "tasks": rows}
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
