"""The command line: help with examples, clear errors with non-zero exits, a cheap --help."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernelrag.cli import COMMANDS, EXIT_USAGE, main

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "tests" / "fixtures" / "ui" / "relu_task.py"
HEAVY = ("torch", "triton", "chromadb", "gradio", "llama_index", "sentence_transformers", "mcp", "openai")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:               # argparse exits for --help and usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_help_with_an_example(capsys, command):
    code, out, _ = run_cli(capsys, command, "--help")
    assert code == 0
    assert f"kernelrag {command}" in out
    assert "example" in out.lower(), f"`kernelrag {command} --help` shows no example"


def test_top_level_help_lists_every_command_and_an_example(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for command in COMMANDS:
        assert command in out
    assert "example" in out.lower()


def test_no_command_prints_help_and_exits_with_usage_error(capsys):
    code, out, _ = run_cli(capsys)
    assert code == EXIT_USAGE and "COMMAND" in out


def test_unknown_command_names_the_valid_ones(capsys):
    code, _, err = run_cli(capsys, "frobnicate")
    assert code == EXIT_USAGE
    assert "unknown command 'frobnicate'" in err and "ingest" in err and "verify" in err


def test_verify_with_a_missing_file_names_it(capsys, tmp_path):
    missing = tmp_path / "no_such_task.py"
    code, _, err = run_cli(capsys, "verify", str(missing), str(TASK), "--device", "cpu")
    assert code != 0
    assert str(missing) in err


def test_unknown_skill_name_says_so(capsys):
    code, _, err = run_cli(capsys, "skills", "show", "no_such_skill")
    assert code != 0
    assert "no skill named 'no_such_skill'" in err


@pytest.mark.parametrize("command", ["generate", "verify"])
def test_bad_device_value_is_a_usage_error(capsys, command):
    args = [str(TASK)] + ([str(TASK)] if command == "verify" else [])
    code, _, err = run_cli(capsys, command, *args, "--device", "tpu")
    assert code == EXIT_USAGE
    assert "tpu" in err and "cpu" in err and "cuda" in err


@pytest.mark.parametrize("argv, message", [
    (["ui", "--port", "70000"], "out of range"),
    (["ui", "--port", "http"], "not a number"),
    (["ui", "--auth", "alice"], "USER:PASSWORD"),
    (["mcp", "--transport", "sse"], "invalid choice"),
])
def test_interface_commands_reject_bad_arguments(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code == EXIT_USAGE and message in err


def test_bad_setting_in_the_environment_is_reported_before_serving(capsys, monkeypatch):
    monkeypatch.setenv("KERNELRAG_DEVICE", "tpu")
    code, _, err = run_cli(capsys, "mcp")
    assert code == EXIT_USAGE and "tpu" in err


def _modules_after(argv: list[str]) -> list[str]:
    script = ("import sys, kernelrag.cli\n"
              "try:\n    kernelrag.cli.main(%r)\nexcept SystemExit:\n    pass\n"
              "print('imported:', *sorted(m for m in %r if m in sys.modules))" % (argv, HEAVY))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1].split()[1:]


def test_top_level_help_imports_nothing_heavy():
    assert _modules_after(["--help"]) == []


@pytest.mark.parametrize("command", list(COMMANDS))
def test_command_help_imports_nothing_heavy(command):
    assert _modules_after([command, "--help"]) == []
