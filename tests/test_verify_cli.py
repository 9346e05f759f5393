"""``kernelrag verify`` and ``python -m kernelrag.verify``: exit codes, JSON, a torch-free parent."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kernelrag.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
TASK = str(FIXTURES / "tasks" / "relu.py")
GOOD = str(FIXTURES / "positive" / "relu.py")
BAD = str(FIXTURES / "hacks" / "partial_write.py")
ROOT = Path(__file__).resolve().parent.parent


def test_exit_codes_and_human_output(capsys):
    assert main(["verify", TASK, GOOD, "--device", "cpu"]) == 0
    assert capsys.readouterr().out.startswith("correct:")
    assert main(["verify", TASK, BAD, "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("incorrect:") and "Verification result: incorrect" in out
    assert main(["verify", TASK, str(FIXTURES / "missing.py"), "--device", "cpu"]) == 2


def test_json_output_is_a_verdict(capsys):
    assert main(["verify", TASK, BAD, "--device", "cpu", "--json", "--seed", "7"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "incorrect" and data["seed"] == 7 and data["device"] == "cpu"
    assert data["mismatch_count"] > 0 and data["checks"]


def test_module_entry_point_runs_without_torch_in_the_parent():
    """What the GPU machine runs (PYTHONPATH=. python3 -m kernelrag.verify ...); the parent stays torch-free."""
    script = ("import sys, runpy; sys.argv = ['kernelrag.verify', %r, %r, '--device', 'cpu', '--json']\n"
              "try:\n    runpy.run_module('kernelrag.verify', run_name='__main__')\n"
              "except SystemExit as e:\n    print('EXIT', e.code, 'torch' in sys.modules)\n") % (TASK, GOOD)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert out.strip().endswith("EXIT 0 False"), done.stderr[-2000:]
    assert json.loads(out[:out.rindex("EXIT")])["status"] == "correct"


def test_require_isolation_flag_refuses_without_a_sandbox(capsys, monkeypatch):
    monkeypatch.setenv("KERNELRAG_VERIFY_ISOLATION", "none")
    assert main(["verify", TASK, GOOD, "--device", "cpu", "--require-isolation"]) == 2
    assert "OS isolation is required" in capsys.readouterr().err
    monkeypatch.setenv("KERNELRAG_REQUIRE_ISOLATION", "true")      # the setting does the same
    assert main(["verify", TASK, GOOD, "--device", "cpu"]) == 2
    assert "OS isolation is required" in capsys.readouterr().err
