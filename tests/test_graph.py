"""The reasoning graph: recording outcomes, ranking, persistence, seeding, export."""
from __future__ import annotations

import json
import multiprocessing
import sys

import pytest

from kernelrag.config import load_settings
from kernelrag.errors import GraphError
from kernelrag.memory.graph import ReasoningGraph, load_vocabulary, outcome_from_verdict
from kernelrag.memory.graph_query import wilson_lower
from kernelrag.patterns import OpPattern

H200 = "NVIDIA H200"


@pytest.fixture
def settings(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    return load_settings(seed_skills_dir=str(seed))


def _graph(settings) -> ReasoningGraph:
    return ReasoningGraph(settings)


def _record(g, pattern, tids, outcome="success", gpu=H200, **kw):
    return g.record_outcome(pattern, tids, gpu, outcome, **kw)


def test_vocabulary_is_data():
    vocab = load_vocabulary()
    assert {"online_softmax", "split_k", "causal_block_skipping", "welford"} <= set(vocab)
    assert all(v["name"] and v["description"] and v["applies_to"] for v in vocab.values())


def test_record_validates(settings):
    g = _graph(settings)
    with pytest.raises(GraphError, match="unknown transformation.*valid ids.*online_softmax"):
        _record(g, "relu", ["warp_magic"])
    with pytest.raises(GraphError, match="outcome 'great'"):
        _record(g, "relu", ["vectorized_loads"], outcome="great")
    with pytest.raises(GraphError, match="positive finite"):
        _record(g, "relu", ["vectorized_loads"], speedup_vs_eager=-1.0)
    with pytest.raises(GraphError, match="unknown"):
        _record(g, OpPattern(signature="unknown", known=False, reason="untraceable"), ["tiling"])
    assert not settings.graph_path.exists()        # nothing written by refused records


def test_few_trials_rank_below_many_with_same_rate(settings):
    g = _graph(settings)
    for i in range(2):
        _record(g, "softmax[dim=-1]", ["two_pass_reduction"], speedup_vs_eager=1.5, log_id=f"few-{i}")
    for i in range(12):
        _record(g, "softmax[dim=-1]", ["online_softmax"], speedup_vs_eager=1.5, log_id=f"many-{i}")
    ranked = g.suggest("softmax[dim=-1]")
    assert [s.transformation for s in ranked] == ["online_softmax", "two_pass_reduction"]
    assert ranked[0].success_rate_lb > ranked[1].success_rate_lb
    assert ranked[0].attempts == 12 and ranked[0].median_speedup_vs_eager == 1.5


def test_speedup_against_the_better_baseline_raises_the_score(settings):
    g = _graph(settings)
    for i in range(4):
        _record(g, "layer_norm", ["welford"], speedup_vs_eager=3.0, speedup_vs_compile=2.0)
        _record(g, "layer_norm", ["two_pass_reduction"], speedup_vs_eager=3.0, speedup_vs_compile=1.1)
    top = g.suggest("layer_norm")
    assert top[0].transformation == "welford"
    assert top[0].expected_speedup == pytest.approx(2.0) and top[1].expected_speedup == pytest.approx(1.1)


def test_failures_lower_the_rank_and_are_listed(settings):
    g = _graph(settings)
    for i in range(3):
        _record(g, "matmul", ["tiling"], speedup_vs_eager=1.2, log_id=f"ok-{i}")
    _record(g, "matmul", ["split_k"], speedup_vs_eager=1.3, log_id="sk-ok")
    _record(g, "matmul", ["split_k", "atomic_reduction"], "incorrect", log_id="sk-bad", detail="race on C")
    _record(g, "matmul", ["stream_k"], "compile_error", log_id="stk")
    ranked = g.suggest("matmul")
    assert [s.transformation for s in ranked][:2] == ["tiling", "split_k"]
    assert "stream_k" not in {s.transformation for s in ranked}      # never worked: not suggested
    fails = g.failures("matmul")
    assert {f.log_id for f in fails} == {"sk-bad", "stk"}
    bad = next(f for f in fails if f.log_id == "sk-bad")
    assert bad.transformations == ["split_k", "atomic_reduction"] and bad.detail == "race on C"
    assert g.failures("matmul", gpu="A100") == []


def test_why_returns_records_buckets_and_log_ids(settings):
    g = _graph(settings)
    _record(g, "relu", ["vectorized_loads"], speedup_vs_eager=1.1, log_id="a", dtype="float32",
            regime={"size_class": "large"}, versions={"torch": "2.11.0", "triton": "3.6.0"})
    _record(g, "relu", ["vectorized_loads"], "slower", gpu="NVIDIA A100", speedup_vs_eager=0.9, log_id="b",
            dtype="float16", regime={"size_class": "small"})
    ev = g.why("relu", "vectorized_loads")
    assert ev.log_ids == ["a", "b"] and len(ev.records) == 2
    assert ev.stats.failures_by_reason == {"slower": 1}
    assert {(b.gpu, b.dtype, b.size_class) for b in ev.buckets} == {(H200, "float32", "large"),
                                                                     ("NVIDIA A100", "float16", "small")}
    h200 = next(b for b in ev.buckets if b.gpu == H200)
    assert h200.torch_versions == ["2.11.0"] and h200.stats.best_speedup_vs_eager == 1.1
    assert "a, b" in ev.summary()
    assert g.why("relu", "tiling").stats.attempts == 0
    with pytest.raises(GraphError, match="unknown transformation"):
        g.why("relu", "nope")


def test_gpu_filter(settings):
    g = _graph(settings)
    _record(g, "relu", ["vectorized_loads"], gpu="NVIDIA A100", speedup_vs_eager=1.1)
    assert g.suggest("relu", gpu="h200") == []
    assert g.suggest("relu", gpu="a100")[0].gpus == ["NVIDIA A100"]


def test_similar_pattern_fallback_is_discounted_and_labelled(settings):
    g = _graph(settings)
    for _ in range(5):
        _record(g, "matmul", ["grouped_ordering"], speedup_vs_eager=1.4)
        _record(g, "matmul>add>relu", ["epilogue_fusion"], speedup_vs_eager=1.4)
    _record(g, "relu", ["vectorized_loads"], speedup_vs_eager=1.4)
    rows = {s.transformation: s for s in g.suggest("matmul>add>relu")}
    assert rows["epilogue_fusion"].source == "exact"
    sim = rows["grouped_ordering"]
    assert sim.source == "similar:matmul" and 0 < sim.score < rows["epilogue_fusion"].score
    assert "vectorized_loads" not in rows       # relu shares only an elementwise op
    fresh = g.suggest("matmul>add>gelu")         # no exact evidence at all: only related patterns
    assert fresh and all(s.source.startswith("similar:") for s in fresh)


def test_persistence_and_reload(settings):
    g = _graph(settings)
    _record(g, "bmm", ["tiling"], speedup_vs_eager=1.2, log_id="x1")
    data = json.loads(settings.graph_path.read_text())
    assert data["graph"]["format"] == "kernelrag-graph" and data["links"]
    again = _graph(settings)
    assert again.why("bmm", "tiling").log_ids == ["x1"]
    assert again.g.nodes["transformation:tiling"]["tid"] == "tiling"


def _worker(home: str, seed: str, worker: int, n: int) -> None:
    s = load_settings(home=home, seed_skills_dir=seed)
    g = ReasoningGraph(s)
    for i in range(n):
        g.record_outcome("softmax[dim=-1]", ["online_softmax"], H200, "success",
                         speedup_vs_eager=1.0 + i / 100, log_id=f"w{worker}-{i}")


@pytest.mark.parametrize("lock", ["filelock", "fcntl"])
def test_concurrent_recording_loses_nothing(settings, lock, monkeypatch):
    if lock == "fcntl":
        monkeypatch.setitem(sys.modules, "filelock", None)      # import fails: the fcntl fallback
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(str(settings.home), str(settings.seed_skills_dir), w, 25))
             for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    ev = _graph(settings).why("softmax[dim=-1]", "online_softmax")
    assert ev.stats.attempts == 100
    assert set(ev.log_ids) == {f"w{w}-{i}" for w in range(4) for i in range(25)}


def test_corrupt_file_gives_clear_error_and_keeps_a_backup(settings):
    settings.graph_path.parent.mkdir(parents=True, exist_ok=True)
    settings.graph_path.write_text('{"nodes": [ broken')
    with pytest.raises(GraphError) as err:
        _graph(settings)
    msg = str(err.value)
    assert str(settings.graph_path) in msg and "corrupt" in msg and "Delete" in msg
    backups = list(settings.graph_path.parent.glob("graph.json.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_text() == '{"nodes": [ broken'
    with pytest.raises(GraphError):
        _graph(settings)                          # same bytes: no second copy
    assert len(list(settings.graph_path.parent.glob("graph.json.corrupt-*"))) == 1
    settings.graph_path.write_text('{"graph": {}, "nodes": [], "links": []}')   # valid JSON, wrong format
    with pytest.raises(GraphError, match="not a kernelrag-graph"):
        _graph(settings)


def test_seeded_from_shipped_evidence(settings):
    evidence = settings.seed_skills_dir / "evidence.jsonl"
    good = {"pattern": "softmax[dim=-1]", "transformations": ["online_softmax"], "gpu": H200,
            "outcome": "success", "speedup_vs_eager": 2.5, "log_id": "seed-2025-01-01-softmax", "variant": "kernel"}
    alt = dict(good, transformations=["two_pass_reduction"], outcome="slower", speedup_vs_eager=1.8,
               variant="alternatives/two_pass_reduction.py")
    bad = dict(good, transformations=["made_up"])
    evidence.write_text("\n".join(json.dumps(r) for r in (good, alt, bad)) + "\nnot json\n")
    g = _graph(settings)
    assert not settings.graph_path.exists()              # seeding reads; the first record writes
    assert [s.transformation for s in g.suggest("softmax[dim=-1]")] == ["online_softmax"]
    assert g.failures("softmax[dim=-1]")[0].outcome == "slower"
    assert len(g.warnings) == 2 and "evidence.jsonl:3" in g.warnings[0]
    _record(g, "relu", ["vectorized_loads"])
    g2 = _graph(settings)                                # no double replay after the write
    assert g2.why("softmax[dim=-1]", "online_softmax").stats.attempts == 1


def test_seed_skills_become_nodes(tmp_path):
    from pathlib import Path

    fixtures = Path(__file__).parent / "fixtures" / "skills"
    s = load_settings(seed_skills_dir=str(fixtures))
    g = ReasoningGraph(s)
    assert g.skills_for("softmax[dim=-1]") == ["softmax_fx"]
    assert g.g.has_edge("skill:softmax_fx", "transformation:one_row_per_program")


@pytest.mark.parametrize("fmt", ["graphml", "dot", "json"])
def test_export(settings, tmp_path, fmt):
    g = _graph(settings)
    _record(g, "softmax[dim=-1]", ["online_softmax"], speedup_vs_eager=2.0, log_id="e1")
    path = g.export(tmp_path / f"g.{fmt}", fmt)
    text = path.read_text()
    if fmt == "dot":
        assert text.startswith("digraph kernelrag {") and '"pattern:softmax[dim=-1]" -> ' in text
        assert "1/1 ok, 2.00x" in text
    elif fmt == "graphml":
        import networkx as nx

        back = nx.read_graphml(path)
        edge = back.edges["pattern:softmax[dim=-1]", "transformation:online_softmax"]
        assert edge["attempts"] == 1 and edge["log_ids"] == "e1"
    else:
        assert json.loads(text)["graph"]["format"] == "kernelrag-graph"
    with pytest.raises(GraphError, match="not one of"):
        g.export(tmp_path / "g.png", "png")


def test_wilson_lower_and_outcomes():
    assert wilson_lower(0, 0) == 0.0
    assert wilson_lower(1, 1) < wilson_lower(10, 10) < wilson_lower(100, 100) < 1.0
    assert wilson_lower(5, 10) < wilson_lower(10, 10)
    assert outcome_from_verdict({"ok": True, "timed": True, "speedup_vs_eager": 2.0,
                                 "speedup_vs_compile": 0.9}) == "slower"
    assert outcome_from_verdict({"ok": True, "timed": True, "speedup_vs_eager": 2.0,
                                 "speedup_vs_compile": 1.1}) == "success"
    assert outcome_from_verdict({"ok": True, "timed": False}) == "success"
    assert outcome_from_verdict({"ok": False, "status": "incorrect"}) == "incorrect"
    assert outcome_from_verdict({"ok": False, "status": "not_checkable"}) is None


def test_remeasured_seed_record_replaces_the_old_one(settings):
    evidence = settings.seed_skills_dir / "evidence.jsonl"
    rec = {"pattern": "relu", "transformations": ["vectorized_loads"], "gpu": H200, "outcome": "success",
           "speedup_vs_eager": 1.1, "log_id": "seed-2025-01-01-relu", "variant": "kernel"}
    evidence.write_text(json.dumps(rec) + "\n")
    _record(_graph(settings), "relu", ["vectorized_loads"], log_id="mine")     # graph file now exists
    evidence.write_text(json.dumps(dict(rec, speedup_vs_eager=1.3)) + "\n")   # measured again, same day
    ev = _graph(settings).why("relu", "vectorized_loads")
    assert sorted(r["log_id"] for r in ev.records) == ["mine", "seed-2025-01-01-relu"]
    assert ev.stats.best_speedup_vs_eager == 1.3


def test_op_pattern_regime_is_recorded(settings):
    from pathlib import Path

    from kernelrag.patterns import op_pattern

    p = op_pattern(Path(__file__).parent / "fixtures" / "tasks" / "linear_relu.py")
    rec = _record(_graph(settings), p, ["epilogue_fusion", "tiling"], speedup_vs_eager=1.3)
    assert rec["pattern"] == "matmul>add>relu" and rec["dtype"] == "float32"
    assert rec["regime"]["size_class"] == "small"
    ev = _graph(settings).why("matmul>add>relu", "tiling")
    assert [(b.dtype, b.size_class) for b in ev.buckets] == [("float32", "small")]
