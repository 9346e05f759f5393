"""One vocabulary of skill states, staleness judged against what the evidence depends
on, and learned-skill writes that are atomic and locked across processes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernelrag.cli import main as cli
from kernelrag.config import load_settings
from kernelrag.memory.skill_status import skill_status, stale_reason
from kernelrag.memory.skills import SkillLibrary

ROOT = Path(__file__).resolve().parents[1]
H200 = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0", "date": "2026-11-29",
        "timed": True, "kernel_ms": 0.05}
CPU_RUN = {"gpu": None, "device": "cpu", "torch": "2.13.0+cpu", "triton": "3.9.0", "date": "2026-12-01",
           "timed": False, "kernel_ms": None}
CPU_HERE = {"torch": "2.13.0+cpu", "triton": "3.9.0", "gpu": None}
GPU_HERE = {"torch": "2.11.0+cu130", "triton": "3.6.0", "gpu": "NVIDIA H200"}


def test_gpu_timing_is_not_stale_on_a_machine_without_a_gpu():
    assert stale_reason(H200, CPU_HERE) is None
    status = skill_status("verified", H200, CPU_HERE)
    assert status.label() == "verified · timed on NVIDIA H200 · not re-checkable (no GPU here)"
    assert skill_status("verified", H200, GPU_HERE).label() == "verified · timed on NVIDIA H200 · current"
    moved = dict(GPU_HERE, gpu="NVIDIA A100")
    assert "measured on NVIDIA H200" in stale_reason(H200, moved)


def test_a_cpu_check_is_correctness_only_and_judged_by_its_toolchain():
    status = skill_status("verified", CPU_RUN, CPU_HERE)
    assert status.evidence == "correctness" and "timed" not in status.label()
    assert status.label() == "verified · correctness only (cpu) · current"
    assert "torch 2.13.0+cpu" in stale_reason(CPU_RUN, GPU_HERE)     # another torch: stale, GPU or not
    assert skill_status("draft", {}, CPU_HERE).label() == "draft · never measured"


def test_skills_list_shows_the_status_label(tmp_path, monkeypatch, capsys):
    lib = SkillLibrary(load_settings())
    src = lib.get("relu")
    lib.write_learned("learned_relu", "relu", src.kernel_source(), src.reference_source(),
                      {"transformations": list(src.transformations), "review_state": "verified",
                       "provenance": CPU_RUN})
    monkeypatch.setattr("kernelrag.memory.skills.current_environment", lambda: CPU_HERE)
    assert cli(["skills", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:-1]}
    assert lines["learned_relu"].endswith("verified · correctness only (cpu) · current")
    if lib.get("relu").provenance.get("timed"):
        assert "stale" not in lines["relu"] and "not re-checkable" in lines["relu"]


WRITER = """
import sys
from kernelrag.config import load_settings
from kernelrag.memory.skills import SkillLibrary
lib = SkillLibrary(load_settings())
src = lib.get("relu")
for i in range(int(sys.argv[1])):
    lib.write_learned("learned_relu", "relu", src.kernel_source() + f"# {sys.argv[2]} {i}\\n",
                      src.reference_source(), {"transformations": ["vectorized_loads"]}, overwrite=True)
print("done")
"""


def test_two_processes_writing_the_same_learned_skill(kernelrag_home):
    env = {"PYTHONPATH": str(ROOT), "KERNELRAG_HOME": str(kernelrag_home), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, "15", tag], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for tag in "ab"]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    folder = kernelrag_home / "skills" / "relu"
    assert sorted(p.name for p in folder.iterdir()) == ["learned_relu"]          # no orphans
    assert (folder / "learned_relu" / "kernel.py").read_text().rstrip().endswith(("a 14", "b 14"))
    lib = SkillLibrary(load_settings())
    assert lib.get("learned_relu").source == "learned" and not lib.problems
