"""What torch.compile generates for a task: its Triton kernels' text, and their times, to read
beside kernelrag's drafts where the compiler wins.

    PYTHONPATH=. python3 bench/inductor_kernels.py --out DIR TASK [TASK ...]

For each task (a name in bench/tasks/), the reference model is compiled on the GPU at the
task's own sizes; the generated code (``torch._inductor.utils.run_and_get_code``) goes to
DIR/TASK.py, and the compiled call's median over 20 calls (CUDA events, after 3 warm-ups)
beside the task's declared bytes goes to DIR/summary.json, with the GPU and versions.
Needs only torch and triton (the GPU machine).
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"


def median_ms(fn, inputs, torch, calls: int = 20) -> float:
    for _ in range(3):
        fn(*inputs)
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="+", help="task names in bench/tasks/")
    parser.add_argument("--out", required=True, help="folder for TASK.py files and summary.json")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no new task after this")
    args = parser.parse_args()
    import torch
    import triton
    from torch._inductor.utils import run_and_get_code

    sys.path.insert(0, str(ROOT))
    from kernelrag.verify.correctness import load_task

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0, rows = time.monotonic(), {}
    for name in args.tasks:
        if time.monotonic() - t0 > args.budget_s:
            rows[name] = {"skipped": "budget"}
            continue
        task = load_task((TASKS / f"{name}.py").read_text(), name)
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs()).cuda().eval()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
        compiled = torch.compile(model)
        with torch.no_grad():
            started = time.monotonic()
            _, code = run_and_get_code(compiled, *inputs)
            compile_s = time.monotonic() - started
            (out / f"{name}.py").write_text("\n\n# ---- next module ----\n\n".join(code))
            row = {"compile_s": round(compile_s, 1), "compiled_ms": median_ms(compiled, inputs, torch),
                   "eager_ms": median_ms(model, inputs, torch),
                   "bytes": task.get_bytes() if hasattr(task, "get_bytes") else None}
        rows[name] = row
        print(name, row, flush=True)
        del model, compiled, inputs
        torch.cuda.empty_cache()
    (out / "summary.json").write_text(json.dumps({
        "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__, "triton": triton.__version__,
        "method": "compiled call median of 20 after 3 warm-ups, CUDA events, no L2 flush", "tasks": rows},
        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
