"""The tuning memory: keys, the store, graph-ranked searches, cached winners re-verified."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from kernelrag.config import load_settings
from kernelrag.errors import KernelRAGError
from kernelrag.memory.graph import ReasoningGraph
from kernelrag.memory.tuning import (TuningKey, TuningStore, autotune, config_dict, config_id, pinned_source,
                                     rank_configs)

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "skills" / "matmul" / "matmul_tf32x3" / "kernel.py"
ENV = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0"}
CONFIGS = [{"BLOCK_M": bm, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
           for bm in (64, 128, 256)]


class FakeTimer:
    """Stands in for the GPU timer: a fixed median per BLOCK_M, and a record of what it was asked."""

    def __init__(self, ms_by_block_m):
        self.ms, self.calls = ms_by_block_m, []

    def __call__(self, runs, check=None, **options):
        self.calls.append(sorted(runs))
        out = {}
        for name, run in runs.items():
            passed, detail = check(run())
            block_m = int(name.split("BLOCK_M=")[1].split(",")[0])
            out[name] = ({"status": "ok", "detail": detail, "median_ms": self.ms[block_m], "iqr_ms": 0.01,
                          "trials": 30} if passed else {"status": "incorrect", "detail": detail})
        return out


def _key(source="src", m=4096):
    return TuningKey.make(source, {"M": m, "N": 4096, "K": 4096}, ["torch.float32", "torch.float32"], ENV)


def _graph(tmp_path):
    """A graph of this test's evidence only (no shipped seed evidence or skills)."""
    return ReasoningGraph(load_settings(home=tmp_path / "home"), seed_dir=tmp_path / "no-seed", with_skills=False)


def test_key_follows_what_triton_keys_by():
    base = _key()
    assert base.id == _key().id and base.dtypes == ("float32", "float32")
    assert dict(base.key) == {"K": 4096, "M": 4096, "N": 4096}
    assert len({base.id, _key(source="other").id, _key(m=2048).id,
                TuningKey.make("src", {"M": 4096, "N": 4096, "K": 4096}, ["float32"] * 2,
                               {**ENV, "triton": "3.5.0"}).id}) == 4
    with pytest.raises(KernelRAGError, match="GPU name"):
        TuningKey.make("src", {}, [], {"gpu": None, "torch": "2", "triton": "3"})


def test_config_dict_and_id_from_triton_configs():
    import triton

    cfg = triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3)
    assert config_dict(cfg) == {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    assert config_id(cfg) == "BLOCK_M=128,BLOCK_N=64,num_stages=3,num_warps=4" == config_id(config_dict(cfg))


def test_search_writes_every_result_and_the_next_call_skips_it(tmp_path):
    store, graph = TuningStore(tmp_path / "cache"), _graph(tmp_path)
    timer = FakeTimer({64: 2.0, 128: 1.0, 256: 1.5})
    launched = []

    def launch(cfg):
        launched.append(cfg["BLOCK_M"])
        return cfg["BLOCK_M"]

    first = autotune(_key(), CONFIGS, launch, lambda out: (True, "ok"), store, graph=graph, pattern="matmul",
                     transformations=["tiling"], timer=timer, skill="matmul_tf32x3")
    assert not first.from_cache and first.winner["BLOCK_M"] == 128 and first.winner_ms == 1.0
    assert len(first.timed) == 3 and first.graph_records == 3
    entry = json.loads(store.path.read_text())["entries"][_key().id]
    assert entry["winner"] == config_id(CONFIGS[1]) and len(entry["results"]) == 3
    outcomes = sorted((r["config"].split(",")[1], r["outcome"], round(r["rel_to_best"], 3))
                      for r in graph.why("matmul", "autotuned_block_sizes").records if r.get("config"))
    assert outcomes == [("BLOCK_M=128", "success", 1.0), ("BLOCK_M=256", "slower", 0.667),
                        ("BLOCK_M=64", "slower", 0.5)]
    launched.clear()
    again = autotune(_key(), CONFIGS, launch, lambda out: (True, "still right"), store, graph=graph,
                     pattern="matmul", timer=timer)
    assert again.from_cache and again.winner["BLOCK_M"] == 128 and "re-verified" in again.reverified
    assert launched == [128] and len(timer.calls) == 1          # one re-check launch, no timing


def test_a_cached_winner_that_fails_its_recheck_is_not_trusted(tmp_path):
    store = TuningStore(tmp_path)
    timer = FakeTimer({64: 2.0, 128: 1.0, 256: 1.5})
    autotune(_key(), CONFIGS, lambda c: c["BLOCK_M"], lambda out: (True, "ok"), store, timer=timer)
    wrong_for_128 = lambda out: (out != 128, "rel err 0.3" if out == 128 else "ok")   # noqa: E731
    result = autotune(_key(), CONFIGS, lambda c: c["BLOCK_M"], wrong_for_128, store, timer=timer)
    assert not result.from_cache and "failed re-verification: rel err 0.3" in result.reverified
    assert result.winner["BLOCK_M"] == 256                      # the next best stored result
    stored = store.get(_key())
    assert stored["results"][config_id(CONFIGS[1])]["status"] == "incorrect"
    assert stored["winner"] == config_id(CONFIGS[2])


def test_failed_configs_are_evidence_too(tmp_path):
    store, graph = TuningStore(tmp_path / "c"), _graph(tmp_path)
    timer = FakeTimer({64: 2.0, 128: 1.0, 256: 1.5})
    result = autotune(_key(), CONFIGS, lambda c: c["BLOCK_M"], lambda out: (out != 256, "bad" if out == 256 else "ok"),
                      store, graph=graph, pattern="matmul", timer=timer)
    assert result.winner["BLOCK_M"] == 128
    outcome = {r["config"].split(",")[1]: r["outcome"]
               for r in graph.why("matmul", "autotuned_block_sizes").records if r.get("config")}
    assert outcome["BLOCK_M=256"] == "incorrect"


def test_ranking_follows_the_evidence_of_related_patterns(tmp_path):
    store, graph = TuningStore(tmp_path / "c"), _graph(tmp_path)
    assert [c["BLOCK_M"] for c in rank_configs(CONFIGS, graph, "matmul>add>relu", ENV["gpu"])] == [64, 128, 256]
    autotune(_key(), CONFIGS, lambda c: c["BLOCK_M"], lambda out: (True, "ok"), store, graph=graph, pattern="matmul",
             timer=FakeTimer({64: 3.0, 128: 1.0, 256: 1.2}))
    ranked = [c["BLOCK_M"] for c in rank_configs(CONFIGS, graph, "matmul>add>relu", ENV["gpu"])]
    assert ranked == [128, 256, 64]
    assert [c["BLOCK_M"] for c in rank_configs(CONFIGS, graph, "matmul", "NVIDIA A100")] == [64, 128, 256]
    timer = FakeTimer({64: 3.0, 128: 1.0, 256: 1.2})
    linear_key = TuningKey.make("linear", {"M": 8192, "N": 4096, "K": 4096}, ["float32"] * 3, ENV)
    top = autotune(linear_key, CONFIGS, lambda c: c["BLOCK_M"], lambda out: (True, "ok"), store, graph=graph,
                   pattern="matmul>add>relu", timer=timer, top_k=2)
    assert timer.calls == [sorted(config_id(c) for c in CONFIGS[1:])] and top.winner["BLOCK_M"] == 128


def test_pinned_source_keeps_one_config_and_still_parses():
    source = KERNEL.read_text()
    cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
    pinned = pinned_source(source, cfg, "tuned: key abc")
    tree = ast.parse(pinned)
    configs = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "CONFIGS")
    assert len(configs.value.elts) == 1 and "# tuned: key abc" in pinned
    assert pinned.count("triton.Config(") == 1 and "def matmul_tf32x3(" in pinned
    with pytest.raises(KernelRAGError, match="CONFIGS"):
        pinned_source("x = 1\n", cfg)


def test_store_rejects_a_foreign_file(tmp_path):
    store = TuningStore(tmp_path)
    store.path.write_text('{"format": "something-else"}')
    with pytest.raises(KernelRAGError, match="not a kernelrag-tuning file"):
        store.get(_key())


def test_fp32_gemm_bench_records_each_path_against_cublas_fp32(tmp_path):
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("fp32_gemm", ROOT / "bench" / "fp32_gemm.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    graph = _graph(tmp_path)
    tuner = SimpleNamespace(graph=graph, env={**ENV, "date": "2026-12-01T00:00:00Z", "driver": "580"})
    row = {"n": 4096, "paths": {
        "ieee": {"median_ms": 2.7, "tflops": 51.0, "rel_err": 1.1e-6, "how": "cuBLAS fp32"},
        "tf32": {"median_ms": 0.38, "tflops": 362.0, "rel_err": 2.9e-4, "how": "cuBLAS TF32"},
        "skill_tf32x3": {"median_ms": 1.3, "tflops": 105.0, "rel_err": 2.5e-7, "how": "skill"},
        "skill_tf32x3_b_kmajor": {"median_ms": 3.0, "tflops": 45.0, "rel_err": 2.5e-7, "how": "skill"},
        "template_tf32x3": {"median_ms": 1.25, "tflops": 110.0, "rel_err": 2.4e-7, "how": "template"}}}
    bench.path_evidence(tuner, row)
    got = {r["variant"]: (r["outcome"], r["speedup_vs_eager"])
           for r in graph.why("matmul", "tensor_cores").records if r.get("variant", "").startswith("path:")}
    assert got == {"path:tf32": ("incorrect", float(f"{2.7 / 0.38:.4g}")),
                   "path:skill_tf32x3": ("success", float(f"{2.7 / 1.3:.4g}")),
                   "path:skill_tf32x3_b_kmajor": ("slower", 0.9),
                   "path:template_tf32x3": ("success", float(f"{2.7 / 1.25:.4g}"))}
    for entry in row["paths"].values():
        entry["x_cublas_fp32"] = entry["tflops"] / 51.0
    assert bench.goal_row(row) == {"path": "template_tf32x3", "x_cublas_fp32": 110.0 / 51.0, "rel_err": 2.4e-7,
                                   "met": True}                       # the faster of kernelrag's two paths
    row["paths"]["template_tf32x3"]["rel_err"] = 2e-6
    assert bench.goal_row(row)["met"] is False                         # fast, but past the 1e-6 bound
    autotune(_key(), CONFIGS, lambda c: c["BLOCK_M"], lambda out: (True, "ok"), TuningStore(tmp_path / "c"),
             graph=graph, pattern="matmul", timer=FakeTimer({64: 2.0, 128: 1.0, 256: 1.5}))
    assert bench.write_evidence(tmp_path / "ev.jsonl", graph) == 7            # 4 paths + 3 configurations
    lines = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    reloaded = ReasoningGraph(load_settings(home=tmp_path / "other"))
    assert len(reloaded.record_many(lines)) == 7                               # valid evidence records


# --- the configuration search through the verifier (kernelrag/memory/config_search.py) ---
def _verdict(ms=None, status="correct"):
    from kernelrag.verify.verdict import Timing, Verdict

    correct = status == "correct"
    return Verdict(ok=correct, status=status, correct=correct, reason=status, gpu=ENV["gpu"], device="cuda",
                   torch_version=ENV["torch"], triton_version=ENV["triton"],
                   kernel_ms=Timing(ms, 0.01, 100) if ms is not None and correct else None)


class FakeVerifier:
    """Stands in for the GPU verifier: a median per pinned BLOCK_M, or a failure; records each call."""

    def __init__(self, ms_by_block_m, fail=()):
        self.ms, self.fail, self.calls = ms_by_block_m, set(fail), []

    def __call__(self, source):
        from kernelrag.memory.tuning import source_configs

        [cfg] = source_configs(source)              # the candidate is pinned to one configuration
        self.calls.append(cfg["BLOCK_M"])
        if cfg["BLOCK_M"] in self.fail:
            return _verdict(status="incorrect")
        return _verdict(self.ms[cfg["BLOCK_M"]])


REGIME = {"input_shapes": [[4096, 4096], [4096, 4096]], "output_shape": [4096, 4096], "dtypes": ["float32"] * 2}


def test_source_configs_reads_the_configs_list_without_running_it():
    from kernelrag.memory.tuning import source_configs

    configs = source_configs(KERNEL.read_text())
    assert len(configs) > 1 and all("BLOCK_M" in c and "num_warps" in c for c in configs)
    assert source_configs("CONFIGS = [make()]\n") == [] and source_configs("x = (") == []
    assert source_configs(pinned_source(KERNEL.read_text(), configs[1])) == [configs[1]]


def test_the_search_times_the_top_configs_through_the_verifier_and_remembers_the_winner(tmp_path):
    from kernelrag.memory.config_search import search_configs, searchable
    from kernelrag.memory.tuning import source_configs

    source = KERNEL.read_text()
    configs = source_configs(source)
    block_ms = {c["BLOCK_M"]: 1.0 + i for i, c in enumerate(configs)}
    fastest = min(block_ms, key=block_ms.get)
    assert searchable(source, _verdict(5.0)) and not searchable(source, _verdict(status="incorrect"))
    store, graph = TuningStore(tmp_path), ReasoningGraph(load_settings())
    verify = FakeVerifier(block_ms)
    found = search_configs(source, _verdict(5.0), verify, store, regime=REGIME, graph=graph, pattern="matmul",
                           transformations=["tiling"], top_k=len(configs))
    assert not found.from_memory and found.winner["BLOCK_M"] == fastest
    assert found.winner_verdict.kernel_ms.median_ms == block_ms[fastest]
    assert source_configs(found.winner_source) == [found.winner]
    assert found.graph_records == len(configs) and len(verify.calls) == len(configs)
    # the next task with the same key: one verification of the stored winner, no search
    again = FakeVerifier(block_ms)
    second = search_configs(source, _verdict(5.0), again, store, regime=REGIME, graph=graph, pattern="matmul")
    assert second.from_memory and again.calls == [fastest] and second.winner == found.winner
    # other shapes are another key: searched afresh
    other = dict(REGIME, input_shapes=[[2048, 2048], [2048, 2048]])
    third = FakeVerifier(block_ms)
    assert not search_configs(source, _verdict(5.0), third, store, regime=other, top_k=2).from_memory
    assert len(third.calls) == 2


def test_a_stored_winner_that_fails_again_is_marked_and_the_search_goes_on(tmp_path):
    from kernelrag.memory.config_search import search_configs, tuning_key
    from kernelrag.memory.tuning import source_configs

    source = KERNEL.read_text()
    configs = source_configs(source)
    block_ms = {c["BLOCK_M"]: 1.0 + i for i, c in enumerate(configs)}
    store = TuningStore(tmp_path)
    first = search_configs(source, _verdict(5.0), FakeVerifier(block_ms), store, regime=REGIME, top_k=2)
    broken = FakeVerifier(block_ms, fail={first.winner["BLOCK_M"]})
    found = search_configs(source, _verdict(5.0), broken, store, regime=REGIME, top_k=2)
    assert not found.from_memory and "failed when verified again" in found.note
    entry = store.get(tuning_key(source, _verdict(5.0), REGIME))
    assert entry["results"][config_id(first.winner)]["status"] == "incorrect"
    assert found.winner is not None and found.winner != first.winner


def test_the_search_hands_its_new_configs_to_the_batch_verifier_at_once(tmp_path):
    """With a session, the configurations go to its workers together (each still timed alone)."""
    from kernelrag.memory.config_search import search_configs
    from kernelrag.memory.tuning import source_configs

    source = KERNEL.read_text()
    configs = source_configs(source)
    block_ms = {c["BLOCK_M"]: 1.0 + i for i, c in enumerate(configs)}
    single, batches = FakeVerifier(block_ms), []

    def verify_all(sources):
        batches.append(len(sources))
        return [single(s) for s in sources]

    found = search_configs(source, _verdict(5.0), FakeVerifier({}), TuningStore(tmp_path), regime=REGIME,
                           top_k=3, verify_all=verify_all)
    assert batches == [3] and len(single.calls) == 3
    assert found.winner["BLOCK_M"] == min(single.calls, key=block_ms.get)


def test_a_config_left_untimed_by_other_processes_memory_is_neither_stored_nor_evidence(tmp_path):
    """H200, 2026-12-05: configurations timed while other tasks held the GPU's memory were
    stored as "incorrect" or "crashed" and recorded in the graph as failures."""
    from kernelrag.memory.config_search import search_configs, tuning_key
    from kernelrag.memory.tuning import source_configs

    source = KERNEL.read_text()
    configs = source_configs(source)
    block_ms = {c["BLOCK_M"]: 1.0 + i for i, c in enumerate(configs)}
    held = config_id(configs[0])

    class Held(FakeVerifier):
        def __call__(self, source):
            v = super().__call__(source)
            if config_id(source_configs(source)[0]) == held:
                v.kernel_ms, v.untimed_cause = None, "gpu_memory"
            return v

    store, graph = TuningStore(tmp_path), ReasoningGraph(load_settings(home=tmp_path / "home"))
    found = search_configs(source, _verdict(5.0), Held(block_ms), store, regime=REGIME, graph=graph,
                           pattern="matmul", transformations=["tiling"], top_k=len(configs))
    entry = store.get(tuning_key(source, _verdict(5.0), REGIME))
    assert entry["results"][held]["status"] == "untimed" and len(entry["results"]) == len(configs)
    assert found.graph_records == len(configs) - 1 and "left for the next search" in found.note
    assert config_id(found.winner) != held
    # the next search verifies the stored winner again and times the one left untimed, alone
    again = FakeVerifier(block_ms)
    second = search_configs(source, _verdict(5.0), again, store, regime=REGIME, top_k=len(configs))
    assert len(again.calls) == 2 and again.calls[1] == configs[0]["BLOCK_M"]
    assert store.get(tuning_key(source, _verdict(5.0), REGIME))["results"][held]["status"] == "ok"
    assert second.winner["BLOCK_M"] == min(block_ms, key=block_ms.get)


def test_a_kept_kernel_without_configurations_leaves_the_search_to_the_fastest_round_that_has_them():
    """H200, 2026-12-05: rms_norm_silu kept rows in registers (0.79x torch.compile, no
    configurations) and never searched the looped passes' CONFIGS, whose 32-warp
    configuration had run 1.37x its default on an H100."""
    from types import SimpleNamespace

    from kernelrag.memory.config_search import faster_than, tunable_round

    tunable, plain = KERNEL.read_text(), "def kernel():\n    pass\n"

    def rnd(source, ms, status="correct"):
        v = _verdict(ms, status)
        return SimpleNamespace(draft=source, verdict=v, ok=v.ok)

    kept = rnd(plain, 1.0)
    near, far, slower_broken = rnd(tunable, 1.3), rnd(tunable, 1.7), rnd(tunable, 1.1, "incorrect")
    assert tunable_round([kept, far, near, slower_broken], kept) is near
    assert tunable_round([kept, far], kept) is None                  # past TUNE_REACH: not worth a search
    both = rnd(tunable, 1.0)
    assert tunable_round([both, near], both) is both                 # the kept round has configurations
    assert tunable_round([rnd(plain, None), near], rnd(plain, None)) is None   # untimed: nothing to compare
    a, b = _verdict(2.0), _verdict(1.0)
    assert faster_than(b, a) and not faster_than(a, b)
    a.speedup_vs_eager, b.speedup_vs_eager = 3.0, 2.5                # side by side with eager: drift cancels
    assert faster_than(a, b)
