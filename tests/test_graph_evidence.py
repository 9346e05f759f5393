"""Evidence is keyed by kernel content hash plus environment: re-verifying one kernel
updates its record; a write the home cannot take raises kernelrag's own error."""
from __future__ import annotations

import pytest

from kernelrag.api import KernelRAG
from kernelrag.config import load_settings
from kernelrag.errors import GraphError
from kernelrag.memory.graph import ReasoningGraph, kernel_hash


@pytest.fixture
def graph(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    return ReasoningGraph(load_settings(seed_skills_dir=str(seed)))


def _verified(graph, source, torch="2.13.0", gpu="cpu"):
    return graph.record_outcome("softmax[dim=-1]", ["online_softmax"], gpu, "success",
                                versions={"torch": torch, "triton": "3.9.0"}, kernel_hash=kernel_hash(source))


def test_one_kernel_verified_three_times_is_one_success(graph):
    for _ in range(3):
        _verified(graph, "kernel A")
    ev = graph.why("softmax[dim=-1]", "online_softmax")
    assert (ev.stats.successes, ev.stats.attempts) == (1, 1)
    assert ev.records[0]["verifications"] == 3
    assert "1 of 1 distinct kernels verified" in ev.summary() and "re-verifications" in ev.summary()
    ReasoningGraph(graph.settings, seed_dir=graph.seed_dir)            # persisted: a fresh load agrees
    assert ReasoningGraph(graph.settings, seed_dir=graph.seed_dir).why(
        "softmax[dim=-1]", "online_softmax").stats.successes == 1


def test_another_kernel_or_environment_is_new_evidence(graph):
    _verified(graph, "kernel A")
    _verified(graph, "kernel B")
    _verified(graph, "kernel A", torch="2.11.0")
    _verified(graph, "kernel A", gpu="NVIDIA H200")
    graph.record_outcome("softmax[dim=-1]", ["online_softmax"], "cpu", "success")     # no hash: counts
    graph.record_outcome("softmax[dim=-1]", ["online_softmax"], "cpu", "success")
    assert graph.why("softmax[dim=-1]", "online_softmax").stats.successes == 6


@pytest.mark.slow
def test_generate_three_times_records_one_success(kernelrag_home):
    kr = KernelRAG(device="cpu")
    for _ in range(3):
        assert kr.generate("bench/tasks/relu.py", max_rounds=1, use_memory=False).ok
    kr.graph.reload()
    rows = {r.transformation: r for r in kr.graph.table("relu", gpu="cpu")}   # seed evidence is on H200
    assert rows and all(r.successes == 1 for r in rows.values())


def test_record_outcome_in_a_home_that_cannot_be_written(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("KERNELRAG_HOME", str(tmp_path / "file" / "home"))
    with pytest.raises(GraphError, match="KERNELRAG_HOME"):
        KernelRAG().record_outcome("softmax[dim=-1]", ["online_softmax"], "cpu", "success")
