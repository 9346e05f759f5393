"""Exit codes, the same in every command: 2 bad usage (before any work), 1 a job that ran and failed."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import cuda_available
from kernelrag.cli import EXIT_FAILED, EXIT_USAGE, main

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "tests" / "fixtures" / "ui" / "relu_task.py"


def test_a_store_that_cannot_be_reached_is_a_failed_job(monkeypatch, capsys):
    monkeypatch.setenv("KERNELRAG_CHROMA_URL", "http://127.0.0.1:9")        # discard port: nothing listens
    assert main(["search", "bank conflicts", "--mode", "bm25"]) == EXIT_FAILED
    assert "cannot reach the Chroma server" in capsys.readouterr().err
    assert main(["ask", "bank conflicts"]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "No passages found" not in out and "could not be searched" in out


def test_an_unwritable_home_makes_ask_fail_without_claiming_no_passages(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("KERNELRAG_HOME", str(tmp_path / "file" / "home"))
    assert main(["ask", "bank conflicts"]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert "No passages found" not in captured.out and "KERNELRAG_HOME" in captured.out + captured.err


def test_a_verified_kernel_survives_an_unwritable_home(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("KERNELRAG_HOME", str(tmp_path / "file" / "home"))
    assert main(["generate", str(TASK), "--device", "cpu", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "write-back failed" in out and "class ModelNew" in out and "optimization log not written" in out


@pytest.mark.skipif(cuda_available(), reason="a GPU is here")
@pytest.mark.parametrize("command", [["generate", str(TASK)], ["verify", str(TASK), str(TASK)],
                                     ["skills", "verify", "relu"], ["bench", str(TASK)]])
def test_device_cuda_without_a_gpu_is_bad_usage_before_any_work(command, kernelrag_home, capsys):
    assert main([*command, "--device", "cuda"]) == EXIT_USAGE
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not (kernelrag_home / "logs").exists()


def test_bench_stopped_by_its_budget_exits_1_not_3(tmp_path, capsys):
    results = tmp_path / "r.json"
    assert main(["bench", str(TASK), "--device", "cpu", "--budget-s", "1", "--results", str(results)]) == 1
    assert "run again to resume" in capsys.readouterr().out


def test_bench_with_a_missing_task_is_bad_usage(tmp_path, capsys):
    assert main(["bench", str(tmp_path / "none"), "--device", "cpu", "--results", str(tmp_path / "r.json")]) == 2
    assert "no such task file" in capsys.readouterr().err
