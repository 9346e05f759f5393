"""What a generated launcher's Python costs inside a timed call, side by side with its kernels.

    PYTHONPATH=. python3 bench/launch_overhead.py --out FILE.json [--before DIR] [TASK ...]

For each task (a name in bench/tasks/) and each variant combination the lowering offers,
the current draft (and, with ``--before``, an older draft of the same task and combination
read from DIR/<task>__<variants>.py) is timed three ways on the GPU:

- ``host_us``: the host's time a ``forward`` call, measured while the GPU is held busy
  (``torch.cuda._sleep``), so no launch waits for the device;
- ``graph_ms``: a CUDA graph replay of the same call, the kernels alone with no Python;
- ``timed_ms``: the verifier's protocol (L2 flushed, events around one call), where the
  GPU idles while the launcher's Python runs between the flush and the first kernel.

``timed_ms - graph_ms`` is what the launcher costs the measured speedup. With
``--protocol``, the default combination's drafts are also timed by the verifier's own
``time_against_baselines`` (eager and torch.compile interleaved, fresh inputs each round),
with the caching allocator's device allocations counted over it. Also times the
host-side calls a launcher may make (``triton.cdiv``, ``torch.broadcast_shapes``, an
``expand(...).stride()``) one by one. Needs torch, triton and numpy only (the GPU machine).
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "bench" / "tasks"
DEFAULT = ("group_norm", "log_softmax", "scaled_softmax", "softmax", "layer_norm", "rms_norm")


def drafts_of(name: str, before: Path | None) -> dict[str, str]:
    """``{"<variants>:now": source}`` for each variant combination the lowering offers the task,
    and ``"<variants>:before"`` for each older draft found as ``before/<task>__<variants>.py``."""
    from kernelrag.draft.lower.lowering import lower, variant_choices

    source = (TASKS / f"{name}.py").read_text()
    out = {}
    for combo in variant_choices(source):
        tag = "+".join(combo)
        draft = lower(source, name, combo)
        if draft.ok:
            out[f"{tag}:now"] = draft.source
        old = before / f"{name}__{tag}.py" if before else None
        if old is not None and old.exists():
            out[f"{tag}:before"] = old.read_text()
    return out


def write_result(out: str | Path, result: dict) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")


def host_us(fn, calls: int = 40) -> float:
    """Median host time of a call, the GPU kept busy so that no launch blocks."""
    import torch

    samples = []
    for _ in range(5):
        torch.cuda._sleep(int(2e8))                      # ~0.1 s of GPU spin ahead of the calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return round(statistics.median(samples), 2)


def _host_profile(fn, calls: int = 300, top: int = 14) -> list[str]:
    """cProfile of ``calls`` calls made while the GPU is held busy: where the host time goes."""
    import cProfile
    import io
    import pstats

    import torch

    torch.cuda._sleep(int(1e9))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return [line for line in text.getvalue().splitlines() if line.strip()][-top - 1:]


def _graph_ms(fn, replays: int = 30) -> float | None:
    """Median replay time of fn captured in a CUDA graph (the kernels alone)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except Exception as exc:  # noqa: BLE001 - a launcher that cannot be captured is a result
        print(f"  not capturable: {type(exc).__name__}: {exc}"[:200], flush=True)
        return None
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return round(statistics.median(times), 4)


def _micro() -> dict[str, float]:
    """Host microseconds of the calls a launcher may make."""
    import torch
    import triton

    x = torch.empty((64, 8, 8, 256), device="cuda")
    w = torch.empty((1, 8, 8, 1), device="cuda")
    domain = torch.broadcast_shapes(x.shape, w.shape)

    def per_call(fn, n: int = 20000) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return round((time.perf_counter() - t0) / n * 1e6, 3)

    return {"triton.cdiv": per_call(lambda: triton.cdiv(65536, 8192)),
            "triton.next_power_of_2": per_call(lambda: triton.next_power_of_2(5000)),
            "torch.broadcast_shapes": per_call(lambda: torch.broadcast_shapes(x.shape, w.shape, w.shape)),
            "expand.stride": per_call(lambda: w.expand(domain).stride()),
            "get_device_properties": per_call(lambda: torch.cuda.get_device_properties(x.device).multi_processor_count),
            "torch.empty": per_call(lambda: torch.empty((512, 8), device=x.device)),
            "torch.zeros": per_call(lambda: torch.zeros((512,), dtype=torch.int32, device=x.device))}


def _protocol(task, ref, source: str, drafts: dict[str, str], folder: Path) -> dict:
    """The default combination's drafts timed by the verifier's protocol, with the allocator's
    cudaMalloc / cudaFree calls counted over each run."""
    import itertools

    import torch

    from bench.rowwise_configs import load_module
    from kernelrag.verify import correctness as C
    from kernelrag.verify.timing import time_against_baselines

    mod = C.load_task(source, "protocol")
    counter = itertools.count()

    def make_inputs():
        return C.make_inputs(mod, 1000 + next(counter), "task", "cuda")

    compiled = torch.compile(ref)
    with torch.no_grad():
        compiled(*make_inputs())
    default = next(iter(drafts)).split(":")[0]
    out = {}
    for label in [lb for lb in drafts if lb.split(":")[0] == default]:
        module = load_module(drafts[label], folder / f"protocol_{label.replace(':', '_').replace('+', '_')}.py")
        model = module.ModelNew(*task.get_init_inputs()).cuda().eval()
        model.load_state_dict(ref.state_dict())
        before = torch.cuda.memory_stats()
        timing = time_against_baselines(model, ref, compiled, make_inputs, iters=50)
        after = torch.cuda.memory_stats()
        wall = timing["wall_check"]
        out[label] = {"kernel": timing["kernel"], "eager": timing["eager"], "compile": timing["compile"],
                      "kernel_wall_ms": wall.get("kernel_wall_ms"), "kernel_host_gap_ms": wall.get("kernel_host_gap_ms"),
                      "device_allocs": after.get("num_device_alloc", 0) - before.get("num_device_alloc", 0),
                      "device_frees": after.get("num_device_free", 0) - before.get("num_device_free", 0),
                      "alloc_retries": after.get("num_alloc_retries", 0) - before.get("num_alloc_retries", 0)}
        print(f"  protocol {label}: kernel {timing['kernel']['median_ms']:.4f} ms (iqr {timing['kernel']['iqr_ms']:.4f}), "
              f"compile {(timing['compile'] or {}).get('median_ms')}, allocs {out[label]['device_allocs']}, "
              f"frees {out[label]['device_frees']}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=list(DEFAULT), help="task names in bench/tasks/")
    parser.add_argument("--out", required=True, help="results file (JSON)")
    parser.add_argument("--before", help="a folder of older drafts, <task>__<variants>.py")
    parser.add_argument("--iters", type=int, default=30, help="timed calls a draft (the verifier's protocol)")
    parser.add_argument("--protocol", action="store_true",
                        help="also time the default combination's drafts by the verifier's protocol")
    parser.add_argument("--host-profile", action="store_true", help="cProfile each current draft's calls")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no new task after this")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch
    import triton

    from bench.rowwise_configs import load_module
    from kernelrag.task import load_task
    from kernelrag.verify.tolerances import compare, tolerance_for
    from kernelrag.verify.tune import time_configs

    start = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="launch-overhead-") as tmp:
        folder = Path(tmp)
        for name in args.tasks:
            if time.monotonic() - start > args.budget_s:
                break
            source = (TASKS / f"{name}.py").read_text()
            task = load_task(source, f"launch_{name}")
            torch.manual_seed(0)
            ref = task.Model(*task.get_init_inputs()).cuda().eval()
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
            with torch.no_grad():
                expected = ref(*inputs)
            expected = expected[0] if isinstance(expected, (tuple, list)) else expected
            drafts = drafts_of(name, Path(args.before) if args.before else None)
            runs, row = {}, {"task": name, "drafts": {}}
            for label, text in drafts.items():
                module = load_module(text, folder / f"{name}_{len(runs)}.py")
                model = module.ModelNew(*task.get_init_inputs()).cuda().eval()
                model.load_state_dict(ref.state_dict())
                fn = (lambda m=model: m(*inputs))
                with torch.no_grad():
                    out = fn()
                    out = out[0] if isinstance(out, (tuple, list)) else out
                    ok = compare(out, expected, tolerance_for(expected.dtype)).passed   # the verifier's test
                    host = host_us(fn)
                    graph = _graph_ms(fn)
                row["drafts"][label] = {"correct": ok, "host_us": host, "graph_ms": graph}
                if args.host_profile and label.endswith(":now"):
                    with torch.no_grad():
                        row["drafts"][label]["host_profile"] = _host_profile(fn)
                    print("\n".join(row["drafts"][label]["host_profile"]), flush=True)
                if ok:
                    runs[label] = fn
                print(f"{name} {label}: correct={ok} host {host} us, graph {graph} ms", flush=True)
            with torch.no_grad():
                timed = time_configs(runs, iters=args.iters)
            for label, t in timed.items():
                d = row["drafts"][label]
                d["timed"] = t
                if t.get("median_ms") and d.get("graph_ms"):
                    d["outside_graph_ms"] = round(t["median_ms"] - d["graph_ms"], 4)
                print(f"  {label}: timed {t.get('median_ms')} ms, outside the graph {d.get('outside_graph_ms')} ms",
                      flush=True)
            if args.protocol:
                row["protocol"] = _protocol(task, ref, source, drafts, folder)
            rows.append(row)
    result = {"date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "triton": triton.__version__, "micro_us": _micro(), "tasks": rows}
    print("micro (us a call):", result["micro_us"], flush=True)
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
