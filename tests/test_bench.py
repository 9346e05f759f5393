"""The benchmark runner and its report (CPU: correctness only, no timing asserted)."""
import json
import math
import shutil
from pathlib import Path

import pytest

from kernelrag.bench.report import markdown, meets_target, summarize

ROOT = Path(__file__).resolve().parent.parent


def _task(name, correct, se=None, sc=None, frac_roofline=None, bound="memory", frac_bw=None):
    return {"task": name, "correct": correct, "status": "correct" if correct else "incorrect",
            "speedup_vs_eager": se, "speedup_vs_compile": sc, "frac_roofline": frac_roofline,
            "frac_bandwidth": frac_bw, "bound": bound, "pattern": name, "recommendation": ""}


def test_summary_figures_follow_their_definitions():
    results = {"tasks": {
        "a": _task("a", True, se=2.0, sc=1.5, frac_roofline=0.5, frac_bw=0.5),
        "b": _task("b", True, se=0.5, sc=0.8, frac_roofline=0.95, frac_bw=0.95),
        "c": _task("c", True, se=1.2, sc=0.6, frac_roofline=0.3, frac_bw=0.3),
        "d": _task("d", False),
    }}
    s = summarize(results)
    assert s["n_tasks"] == 4 and s["n_correct"] == 3 and s["correct_rate"] == 0.75
    assert s["fast_p_vs_eager"]["1.0"] == pytest.approx(2 / 4)      # a and c beat eager
    assert s["fast_p_vs_compile"]["1.0"] == pytest.approx(1 / 4)    # only a beats compile
    assert s["fast_p_vs_eager"]["1.5"] == pytest.approx(1 / 4)
    assert s["geomean_speedup_vs_eager"] == pytest.approx(math.prod([2.0, 0.5, 1.2]) ** (1 / 3))
    assert s["memory_bound_median_frac_bandwidth"] == pytest.approx(0.5)
    # a beats compile; b is at the roofline; c is neither; d is wrong
    assert [meets_target(results["tasks"][k]) for k in "abcd"] == [True, True, False, False]
    assert s["targets"]["correct_100pct"] is False
    assert s["impossible"] == []
    results["tasks"]["e"] = _task("e", True, se=50.0, sc=40.0, frac_roofline=1.8, frac_bw=1.8)
    assert summarize(results)["impossible"] == ["e"]
    assert "| a |" in markdown(results)


def test_fused_chains_and_single_ops_have_their_own_geomean():
    results = {"tasks": {
        "a": dict(_task("a", True, se=2.0, sc=1.6), pattern="matmul>add>relu"),
        "b": dict(_task("b", True, se=2.0, sc=1.1), pattern="layer_norm>relu"),
        "c": dict(_task("c", True, se=1.0, sc=0.9), pattern="relu"),
        "d": dict(_task("d", False), pattern="softmax>mul"),      # not timed: in neither geomean
    }}
    s = summarize(results)
    assert s["n_fused_timed"] == 2
    assert s["geomean_speedup_vs_compile_fused"] == pytest.approx((1.6 * 1.1) ** 0.5)
    assert s["geomean_speedup_vs_compile_single"] == pytest.approx(0.9)
    assert s["targets"]["geomean_vs_compile_fused_ge_1.3"] is True
    results["tasks"]["b"]["speedup_vs_compile"] = 1.0
    assert summarize(results)["targets"]["geomean_vs_compile_fused_ge_1.3"] is False
    assert "on the 2 fused chains" in markdown(results)


def test_a_near_zero_time_cannot_drag_the_geomean():
    honest = dict(_task("a", True, se=2.0, sc=2.0), kernel_ms=1.0, roofline_floor_ms=0.5)
    hacked = dict(_task("z", True, se=1e6, sc=1e6), kernel_ms=1e-6, roofline_floor_ms=0.5)
    s = summarize({"tasks": {"a": honest, "z": hacked}})
    # z's time counts as its roofline floor: 1e6 * 1e-6 / 0.5 = 2x, not a million
    assert s["geomean_speedup_vs_eager"] == pytest.approx(2.0)
    assert s["geomean_speedup_vs_better_baseline"] == pytest.approx(2.0)
    assert s["fast_p_vs_compile"]["2.0"] == 0.0 and s["floored_tasks"] == ["z"]


@pytest.mark.slow
def test_runner_solves_lists_and_resumes_on_cpu(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    shutil.copy(ROOT / "bench/tasks/relu.py", tasks / "relu.py")
    (tasks / "weird.py").write_text(
        "import torch\nimport torch.nn as nn\nN = 64\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.linalg.qr(x)[0]\n\n"
        "def get_inputs():\n    return [torch.randn(N, N)]\n\ndef get_init_inputs():\n    return []\n")
    out = tmp_path / "results.json"
    from kernelrag.bench.runner import main

    assert main([str(tasks), "--device", "cpu", "--results", str(out)]) == 0
    results = json.loads(out.read_text())
    relu, weird = results["tasks"]["relu"], results["tasks"]["weird"]
    assert relu["correct"] is True and relu["verdict"]["timed"] is False
    assert relu["recommendation"].startswith("verified for correctness only")
    assert weird["correct"] is False and weird["reason"]          # listed with the reason, not dropped
    assert any(u.startswith("weird:") for u in results["summary"]["unhandled"])
    assert [r["tasks"] for r in results["runs"]] == [2] and results["runs"][0]["wall_s"] > 0
    assert "gpu_gate" not in results["runs"][0]                   # no GPU, no gate
    # a second run resumes: nothing left to do, the entries are kept as they were
    assert main([str(tasks), "--device", "cpu", "--results", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["tasks"]["relu"]["wall_s"] == relu["wall_s"]
    assert [r["tasks"] for r in again["runs"]] == [2, 0]          # each invocation logged: the wall is their sum
    from kernelrag.bench.report import markdown
    assert f"over 2 invocation(s), 2 tasks" in markdown(again)


def test_runner_runs_tasks_side_by_side_and_records_each(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name in ("relu", "sigmoid", "sum_dim"):
        shutil.copy(ROOT / f"bench/tasks/{name}.py", tasks / f"{name}.py")
    out = tmp_path / "results.json"
    from kernelrag.bench.runner import main

    assert main([str(tasks), "--device", "cpu", "--results", str(out), "--rounds", "1", "--parallel", "2"]) == 0
    results = json.loads(out.read_text())
    assert sorted(results["tasks"]) == ["relu", "sigmoid", "sum_dim"]
    for name, entry in results["tasks"].items():
        assert entry["correct"] is True, (name, entry["reason"])
        assert entry["task"] == name and "log_id" not in entry
    with pytest.raises(SystemExit):
        main([str(tasks), "--device", "cpu", "--results", str(out), "--parallel", "zero"])
    assert main([str(tasks), "--device", "cpu", "--results", str(out), "--parallel", "0"]) == 2


@pytest.mark.slow
def test_runner_goes_through_the_generate_loop_and_writes_back_graph_evidence_only(tmp_path, kernelrag_home):
    from kernelrag.bench.runner import main
    from kernelrag.config import load_settings
    from kernelrag.memory.graph import ReasoningGraph

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    shutil.copy(ROOT / "bench/tasks/relu.py", tasks / "relu.py")
    out = tmp_path / "results.json"
    assert main([str(tasks), "--device", "cpu", "--results", str(out), "--rounds", "1"]) == 0
    relu = json.loads(out.read_text())["tasks"]["relu"]
    assert relu["correct"] is True and [a["drafter"] for a in relu["attempts"]] == ["offline"]
    assert not (kernelrag_home / "skills").exists() or not any((kernelrag_home / "skills").rglob("skill.toml"))
    assert not (kernelrag_home / "logs").exists() or not any((kernelrag_home / "logs").iterdir())
    evidence = ReasoningGraph(load_settings()).why(relu["pattern"], relu["transformations"][0])
    records = [r for r in evidence.records if r["log_id"].startswith("bench-")]
    assert records and records[0]["outcome"] == "success"


def test_longest_first_starts_the_slowest_known_task_and_the_unknown_ones_first(tmp_path):
    from kernelrag.bench.runner import earlier_walls, longest_first
    from kernelrag.errors import ConfigError

    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"tasks": {"relu": {"wall_s": 3.0}, "gemm": {"wall_s": 90.0},
                                             "softmax": {"wall_s": 12.0}}}))
    tasks = [tmp_path / f"{n}.py" for n in ("gemm", "new_task", "relu", "softmax")]
    assert [t.stem for t in longest_first(tasks, earlier_walls(earlier))] == ["new_task", "gemm", "softmax", "relu"]
    with pytest.raises(ConfigError, match="no such results file"):
        earlier_walls(tmp_path / "missing.json")


def test_tasks_in_flight_fit_in_the_gpus_memory_the_first_one_whatever_its_size():
    """An 80 GB H100, 2026-12-05: five 4.3 GB tasks in flight ran 26 of 79 tasks out of memory."""
    from kernelrag.bench.admission import GPU_MEMORY_SHARE, TASK_MEMORY_COPIES, MemoryAdmission, task_bytes

    big = ROOT / "bench/tasks/layer_norm.py"
    small = ROOT / "bench/tasks/linear_bias_logsumexp.py"
    big_b, small_b = task_bytes(big), task_bytes(small)
    assert big_b > 1e9 and 0 < small_b < big_b            # counted on the meta device, no memory used
    gpu_b = int(2.5 * TASK_MEMORY_COPIES * big_b / GPU_MEMORY_SHARE)    # room for two big tasks, not three
    gate = MemoryAdmission(gpu_b)
    queue = [big, big, big, small]
    for expected in (0, 0):
        i = gate.pick(queue)
        assert i == expected
        gate.started(queue.pop(i))
    assert gate.pick(queue) == 1 and queue[1] == small      # the third big one waits; the small one goes
    gate.started(queue.pop(1))
    assert gate.pick(queue) is None                          # nothing fits: wait for a task to finish
    gate.finished(big)
    assert gate.pick(queue) == 0
    lone = MemoryAdmission(TASK_MEMORY_COPIES * big_b // 4)  # a card too small for even one: it still runs
    assert lone.pick([big]) == 0
    assert MemoryAdmission(None).pick([big, big]) == 0 and "no GPU memory limit" in MemoryAdmission(None).describe()


def test_a_task_to_run_alone_starts_only_on_an_idle_gpu_and_nothing_starts_beside_it():
    from kernelrag.bench.admission import MemoryAdmission

    a, b, c = (ROOT / f"bench/tasks/{name}.py" for name in ("relu", "sigmoid", "tanh"))
    for gate in (MemoryAdmission(None), MemoryAdmission(10 ** 12)):
        gate.run_alone(a)
        gate.started(b)
        assert gate.pick([a, c]) == 1          # a waits for b; c starts beside b
        gate.started(c)
        gate.finished(b)
        assert gate.pick([a]) is None          # c is still in flight
        gate.finished(c)
        assert gate.pick([a, b]) == 0          # the GPU is idle: a starts
        gate.started(a)
        assert gate.pick([b]) is None          # and nothing beside it


def test_a_task_untimed_for_want_of_gpu_memory_runs_once_more_alone_at_the_end(tmp_path, monkeypatch):
    """Five tasks in flight on an 80 GB H100 (2026-12-07): mse_loss stayed untimed, verified
    again alone in the session, while the other tasks' processes held 66 GiB. The runner
    keeps the first result, then runs the task again with nothing beside it."""
    from kernelrag.bench import runner

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name in ("relu", "sigmoid", "tanh"):
        shutil.copy(ROOT / f"bench/tasks/{name}.py", tasks / f"{name}.py")
    lock, in_flight, seen = runner.threading.Lock(), set(), []

    def solve(path, args, parts, device, _lock):
        with lock:
            in_flight.add(path.stem)
            beside = sorted(in_flight - {path.stem})
        runner.time.sleep(0.2)
        with lock:
            in_flight.discard(path.stem)
        short = path.stem == "sigmoid" and not any(run[0] == "sigmoid" for run in seen)
        seen.append((path.stem, beside))
        verdict = {"ok": True, "untimed_cause": "gpu_memory" if short else None}
        return {"task": path.stem, "path": str(path), "status": "correct", "attempts": [], "verdict": verdict,
                "wall_s": 0.2, "log_id": f"bench-{path.stem}"}

    monkeypatch.setattr(runner, "_solve_one", solve)
    out = tmp_path / "results.json"
    assert runner.main([str(tasks), "--device", "cpu", "--results", str(out), "--parallel", "3"]) == 0
    sigmoid_runs = [beside for name, beside in seen if name == "sigmoid"]
    assert len(sigmoid_runs) == 2 and sigmoid_runs[1] == []     # the second run had the GPU to itself
    entry = json.loads(out.read_text())["tasks"]["sigmoid"]
    assert entry["ran_alone"] is True and entry["verdict"]["untimed_cause"] is None
    assert len(seen) == 4                                        # the others ran once
    results = json.loads(out.read_text())             # a run stopped before the retry: resuming runs it
    results["tasks"]["relu"]["verdict"]["untimed_cause"] = "gpu_memory"
    out.write_text(json.dumps(results))
    assert runner.main([str(tasks), "--device", "cpu", "--results", str(out), "--parallel", "3"]) == 0
    assert seen[4:] == [("relu", [])]


def test_results_files_are_named_after_the_card_that_ran_them():
    from kernelrag.bench.runner import machine_slug

    assert machine_slug({"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}) == "h100"
    assert machine_slug({"device": "cuda", "gpu": "NVIDIA H200"}) == "h200"
    assert machine_slug({"device": "cuda", "gpu": "Tesla"}) == "cuda"
    assert machine_slug({"device": "cpu"}) == "cpu"
