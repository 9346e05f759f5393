"""Profiler feedback: one ``ncu`` pass over a verified candidate's kernels (opt-in).

``profile_candidate`` runs the candidate once more (``profile_baseline`` the task's own
model, eager or torch.compile, for a side-by-side reading), in a fresh process under Nsight
Compute (``ncu --clock-control none``: clocks as the timing saw them), with only a
handful of counters so the replay stays cheap:

| field                   | ncu metric                                                       |
|-------------------------|------------------------------------------------------------------|
| duration_ns             | gpu__time_duration.sum                                           |
| sol_memory_pct          | gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed |
| sol_compute_pct         | sm__throughput.avg.pct_of_peak_sustained_elapsed                 |
| achieved_occupancy_pct  | sm__warps_active.avg.pct_of_peak_sustained_active                |
| dram_bytes              | dram__bytes_read.sum + dram__bytes_write.sum                     |

The child warms the model up (compilation, autotuning) outside the profiled range and
brackets exactly one forward call with ``cudaProfilerStart/Stop``
(``--profile-from-start off``). Each kernel gets a limiter: "memory" or "compute" when
that speed-of-light share is at least ``BOUND_PCT`` and the larger one, else
"latency" (neither unit is busy: too few warps in flight, dependent loads, launch
gaps). The longest kernel is the ``main`` one whose reading goes into the verdict, the
drafter's feedback and the graph evidence.

Where ncu is absent, or the driver does not permit performance counters to this user
(``ERR_NVGPUCTRPERM``), the result says so (``profiled: False`` with a note) and the
verdict keeps its event timing alone. Only candidates that already passed verification
are profiled (they passed the static checks and the run-time guard). The child runs
under ncu outside the OS sandbox (ncu has to launch it), with the workers'
allow-listed environment and a private scratch directory as HOME and Triton cache.
"""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "sol_memory_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sol_compute_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
}
BASELINES = ("eager", "compile")
BOUND_PCT = 60.0        # a unit at >= this share of its speed of light is what limits the kernel
WARMUP_CALLS = 2
ADVICE = {
    "memory": "memory-bound: cut DRAM bytes (fuse, keep data in registers / shared memory, wider loads)",
    "compute": "compute-bound: cheaper math (tensor cores, a lower-precision path the tolerance allows), "
               "less redundant work",
    "latency": "latency-bound: neither memory nor compute is busy; raise parallelism (more programs, "
               "more warps or stages, split the reduction) or remove dependent loads and launch gaps",
}


def ncu_path() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for guess in sorted(Path("/usr/local").glob("cuda*/bin/ncu")) + sorted(Path("/opt/nvidia").glob("nsight-compute*/ncu")):
        if guess.is_file():
            return str(guess)
    return None


def limiter(sol_memory_pct: float | None, sol_compute_pct: float | None) -> str:
    mem, comp = sol_memory_pct or 0.0, sol_compute_pct or 0.0
    if max(mem, comp) < BOUND_PCT:
        return "latency"
    return "memory" if mem >= comp else "compute"


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Kernels from ``ncu --csv --page raw`` output: one dict per profiled launch."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]   # drop ==PROF== and program output
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, body = rows[0], rows[1:]
    if body and not any(_number(c) is not None for c in body[0][len(body[0]) // 2:]) and "Kernel Name" in header:
        body = body[1:]                                                # the units row
    kernels = []
    for row in body:
        cells = dict(zip(header, row))
        if "Kernel Name" not in cells:
            continue
        k: dict[str, Any] = {"kernel": cells["Kernel Name"][:120]}
        for metric, name in METRICS.items():
            k[name] = _number(cells.get(metric))
        reads, writes = k.pop("dram_read_bytes"), k.pop("dram_write_bytes")
        k["dram_bytes"] = None if reads is None and writes is None else (reads or 0.0) + (writes or 0.0)
        k["limiter"] = limiter(k["sol_memory_pct"], k["sol_compute_pct"])
        k["advice"] = ADVICE[k["limiter"]]
        kernels.append(k)
    return kernels


def summarize_kernels(kernels: list[dict[str, Any]]) -> dict[str, Any]:
    if not kernels:
        return {"profiled": False, "note": "ncu profiled no kernel in the bracketed forward call"}
    main = max(kernels, key=lambda k: k.get("duration_ns") or 0.0)
    return {"profiled": True, "tool": "ncu --clock-control none", "kernels": len(kernels), "main": main,
            "all": kernels[:16], "total_duration_ns": sum(k.get("duration_ns") or 0.0 for k in kernels)}


def profile_candidate(task_src: str, candidate_src: str, *, timeout_s: float = 300.0, seed: int = 0,
                      ncu: str | None = None) -> dict[str, Any]:
    """Profile one forward call of the candidate on the task's inputs; never raises."""
    return _profile(task_src, candidate_src, {}, timeout_s, seed, ncu)


def profile_baseline(task_src: str, which: str = "compile", *, timeout_s: float = 300.0, seed: int = 0,
                     ncu: str | None = None) -> dict[str, Any]:
    """Profile one forward call of the task's own model, ``"eager"`` or ``"compile"``
    (torch.compile, compiled during the warm-up outside the profiled range), the same way as
    a candidate: what the baseline's kernels move and how long they run, side by side with a
    candidate's. Never raises."""
    if which not in BASELINES:
        raise ValueError(f"baseline {which!r} is not one of {', '.join(BASELINES)}")
    return _profile(task_src, None, {"baseline": which}, timeout_s, seed, ncu)


def _profile(task_src: str, candidate_src: str | None, extra: dict[str, Any], timeout_s: float, seed: int,
             ncu: str | None) -> dict[str, Any]:
    tool = ncu or ncu_path()
    if tool is None:
        return {"profiled": False, "note": "ncu (Nsight Compute) is not installed here"}
    from kernelrag.verify.processes import worker_env

    with tempfile.TemporaryDirectory(prefix="kernelrag-profile-") as tmp:
        root = Path(tmp)
        (root / "task.py").write_text(task_src)
        job = {"task": str(root / "task.py"), "seed": seed, **extra}
        if candidate_src is not None:
            (root / "candidate.py").write_text(candidate_src)
            job["candidate"] = str(root / "candidate.py")
        (root / "job.json").write_text(json.dumps(job))
        cmd = [tool, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
               "--metrics", ",".join(METRICS), "--csv", "--page", "raw", "--print-units", "base",
               sys.executable, "-m", "kernelrag.verify.profile", str(root / "job.json")]
        try:
            # the workers' allow-listed environment, HOME and the Triton cache in the scratch folder
            done = subprocess.run(cmd, cwd=root, env=worker_env("cuda", str(root)), capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"profiled": False, "note": f"ncu did not finish within {timeout_s:.0f} s"}
        except OSError as exc:
            return {"profiled": False, "note": f"ncu could not start: {exc}"}
    return read_result(done.returncode, done.stdout, done.stderr)


def read_result(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The profile from ncu's output, or why there is none."""
    text = stdout + "\n" + stderr
    if "ERR_NVGPUCTRPERM" in text or "permission to access NVIDIA GPU Performance Counters" in text:
        return {"profiled": False, "note": "the driver does not permit GPU performance counters to this user "
                                           "(ERR_NVGPUCTRPERM); event timing only"}
    kernels = parse_ncu_csv(stdout)
    if not kernels:
        tail = " ".join(text.strip().splitlines()[-3:])[:300]
        return {"profiled": False, "note": f"ncu returned no kernel metrics (exit {returncode}): {tail}"}
    return summarize_kernels(kernels)


def evidence_fields(profile: dict[str, Any] | None) -> dict[str, Any]:
    """Flat scalar fields for a graph evidence record: the main kernel's limiter and counters."""
    if not profile:
        return {}
    if not profile.get("profiled"):
        return {"profile_note": str(profile.get("note", ""))[:200]}
    main = profile.get("main") or {}
    out = {"limiter": main.get("limiter")}
    for key in ("sol_memory_pct", "sol_compute_pct", "achieved_occupancy_pct", "dram_bytes"):
        if main.get(key) is not None:
            out[key] = round(float(main[key]), 2)
    return out


def _number(cell: Any) -> float | None:
    if cell is None:
        return None
    text = str(cell).strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _run_child(job: dict[str, Any]) -> int:
    """Inside ncu: warm up (torch.compile's compilation too), then exactly one forward call
    between cudaProfilerStart and Stop."""
    import importlib.util

    import torch

    from kernelrag.verify import correctness as C

    C.pin_fp32_semantics()          # as the timing ran: cuDNN's default TF32 off
    mod = C.load_task(Path(job["task"]).read_text(), "profiled_task")
    torch.set_grad_enabled(False)
    reference = C.build_model(mod, job["seed"], "cuda")
    if job.get("baseline"):
        model = torch.compile(reference) if job["baseline"] == "compile" else reference
    else:
        spec = importlib.util.spec_from_file_location("profiled_candidate", job["candidate"])
        cand = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cand)
        model = cand.ModelNew(*mod.get_init_inputs()).to("cuda")
        C.load_reference_state(model, reference.state_dict())
        del reference
    inputs = C.make_inputs(mod, job["seed"] + 1, "task", "cuda")
    for _ in range(WARMUP_CALLS):
        model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_run_child(json.loads(Path(sys.argv[1]).read_text())))
