"""Precision paths in the verdict, and the ncu profile: parsing, the limiter, degrading without it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrag.memory.tuning import source_configs

from kernelrag.verify import precision, profile, verify
from kernelrag.verify.verdict import Verdict

ROOT = Path(__file__).resolve().parents[1]

# ncu --csv --page raw --print-units base, as Nsight Compute 2025 prints it (program output interleaved)
NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
some program output
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active"
"","","","","","","","","","","","byte","byte","%","nsecond","%","%"
"0","4242","python3.12","127.0.0.1","transpose_kernel","1","7","(128, 1, 1)","(128, 128, 1)","0","9.0","67,108,864","67,108,864","91.3","31,200","12.5","88.1"
"1","4242","python3.12","127.0.0.1","matmul_tf32x3_kernel","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0","402,653,184","67,108,864","22.4","1,478,000","81.7","12.4"
==PROF== Disconnected from process 4242
'''


def test_parse_ncu_csv_and_the_limiter():
    kernels = profile.parse_ncu_csv(NCU_CSV)
    assert [k["kernel"] for k in kernels] == ["transpose_kernel", "matmul_tf32x3_kernel"]
    t, mm = kernels
    assert t["limiter"] == "memory" and t["dram_bytes"] == 2 * 67108864 and t["duration_ns"] == 31200
    assert mm["limiter"] == "compute" and mm["sol_compute_pct"] == 81.7 and mm["achieved_occupancy_pct"] == 12.4
    summary = profile.summarize_kernels(kernels)
    assert summary["profiled"] and summary["main"]["kernel"] == "matmul_tf32x3_kernel" and summary["kernels"] == 2
    assert profile.limiter(30.0, 40.0) == "latency" and profile.limiter(70.0, 65.0) == "memory"
    fields = profile.evidence_fields(summary)
    assert fields == {"limiter": "compute", "sol_memory_pct": 22.4, "sol_compute_pct": 81.7,
                      "achieved_occupancy_pct": 12.4, "dram_bytes": 469762048.0}


def test_profile_degrades_to_a_note():
    denied = profile.read_result(1, "", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    assert not denied["profiled"] and "ERR_NVGPUCTRPERM" in denied["note"]
    empty = profile.read_result(0, "==PROF== No kernels were profiled.\n", "")
    assert not empty["profiled"] and "no kernel metrics" in empty["note"]
    assert profile.evidence_fields(empty) == {"profile_note": empty["note"][:200]}
    assert profile.evidence_fields(None) == {}


def test_profile_candidate_without_ncu(monkeypatch):
    monkeypatch.setattr(profile, "ncu_path", lambda: None)
    out = profile.profile_candidate("task", "cand")
    assert out == {"profiled": False, "note": "ncu (Nsight Compute) is not installed here"}


def test_profile_candidate_reads_what_the_tool_prints(tmp_path):
    csv_path = tmp_path / "out.csv"
    csv_path.write_text(NCU_CSV)
    fake = tmp_path / "ncu"    # prints canned counters and checks it was asked for clocks as found
    fake.write_text(f"#!/bin/sh\ncase \"$*\" in *'--clock-control none'*) cat '{csv_path}';; *) exit 3;; esac\n")
    fake.chmod(0o755)
    out = profile.profile_candidate("task", "cand", ncu=str(fake), timeout_s=30)
    assert out["profiled"] and out["main"]["limiter"] == "compute"


def test_profile_baseline_asks_the_child_for_the_tasks_own_model(tmp_path):
    """The compiler's kernels are read the same way as a candidate's: the child gets a job
    naming the baseline and no candidate file."""
    csv_path, seen = tmp_path / "out.csv", tmp_path / "job.json"
    csv_path.write_text(NCU_CSV)
    fake = tmp_path / "ncu"    # keeps the job it was handed (its last argument) and prints canned counters
    fake.write_text(f"#!/bin/sh\nfor a; do last=$a; done\ncp \"$last\" '{seen}'\ncat '{csv_path}'\n")
    fake.chmod(0o755)
    out = profile.profile_baseline("task", "compile", ncu=str(fake), timeout_s=30)
    job = json.loads(seen.read_text())
    assert out["profiled"] and job["baseline"] == "compile" and "candidate" not in job
    with pytest.raises(ValueError, match="not one of eager, compile"):
        profile.profile_baseline("task", "inductor")


def test_verdict_feedback_carries_precision_ceiling_and_profile():
    summary = profile.summarize_kernels(profile.parse_ncu_csv(NCU_CSV))
    v = Verdict(ok=True, status="correct", reason="matches", device="cuda", timed=True,
                kernel_ms={"median_ms": 1.5, "iqr_ms": 0.01, "trials": 100}, precision="tf32x3 (3xTF32)",
                ceiling="fp32 via tf32x3: 93.0 TFLOP/s", profile=summary,
                memory_ceiling="measured read 4800 GB/s (reads only)")
    v = Verdict.from_dict(v.to_dict())
    text = v.feedback()
    assert "Precision path: tf32x3 (3xTF32)." in text
    assert "Roofline compute ceiling: fp32 via tf32x3: 93.0 TFLOP/s." in text
    assert "Roofline memory ceiling: measured read 4800 GB/s (reads only)." in text
    old = {k: x for k, x in v.to_dict().items() if k not in ("memory_ceiling", "bytes_read", "bytes_written")}
    assert Verdict.from_dict(old).memory_ceiling is None          # verdicts stored before the split
    assert "limiter compute" in text and "SOL compute 82%" in text and "compute-bound" in text
    none = Verdict(status="correct", device="cuda", profile={"profiled": False, "note": "ncu absent"})
    assert "Profiler: none (ncu absent); event timing only." in none.feedback()


def test_source_precisions_and_description():
    src = ('P = "ieee"\n'
           "def k(a, b, X):\n"
           "    c = tl.dot(a, b, input_precision=\"tf32x3\")\n"
           "    d = tl.dot(a, b, input_precision=P)\n"
           "    e = tl.dot(a, b)\n"
           "    f = tl.dot(a, b, input_precision=X)\n")
    assert precision.source_precisions(src) == ["default", "ieee", "runtime", "tf32x3"]
    assert precision.source_precisions("def broken(:") == []
    assert precision.describe([], [], "cuda") is None
    gpu = precision.describe(["tf32x3"], ["runtime"], "cuda")
    assert gpu.startswith("tf32x3 (3xTF32") and "passed to the launches" in gpu
    cpu = precision.describe(["ieee"], ["runtime"], "cpu")
    assert "interpreter" in cpu
    assert "written in the source" in precision.describe([], ["default"], "cuda")
    assert precision.describe([], ["default"], "cuda", ["torch.bfloat16", "torch.bfloat16"]) is None
    assert precision.describe(["tf32x3"], [], "cuda", ["torch.float32"]).startswith("tf32x3")


@pytest.mark.slow
def test_verdict_names_the_precision_path_of_a_skill():
    v = verify(ROOT / "skills/matmul/matmul_tf32x3/reference.py", ROOT / "skills/matmul/matmul_tf32x3/kernel.py",
               device="cpu", trials=2, profile=True)
    assert v.ok, v.summary()
    assert v.precision.startswith("ieee") and "passed to the launches" in v.precision   # the interpreter fallback
    assert v.profile == {"profiled": False, "note": "no GPU: the profiler needs one"}
    assert any(w.startswith("profile: no GPU") for w in v.warnings)
    plain = verify(ROOT / "skills/relu/relu/reference.py", ROOT / "skills/relu/relu/kernel.py", device="cpu", trials=1)
    assert plain.ok and plain.precision is None and plain.profile is None


@pytest.mark.slow
def test_fp32_gemm_bench_dry_run(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fp32_gemm.py"), "--out", str(tmp_path),
                           "--device", "cpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    import json

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert all(s["status"] == "done" for s in summary["stages"].values()), summary["stages"]
    tuning = summary["tuning"]
    configs = source_configs((ROOT / "skills/matmul/matmul_tf32x3/kernel.py").read_text())
    assert tuning[0]["winner"] and len(tuning[0]["timed"]) == len(configs) and not tuning[0]["from_cache"]
    assert len(tuning[1]["timed"]) == 4                       # the second size: top 4 by evidence
    assert tuning[-1]["from_cache"] and tuning[-1]["timed"] == [] and "re-verified" in tuning[-1]["reverified"]
    assert summary["evidence_records"] == sum(len(t["timed"]) for t in tuning)
    assert all(v["status"] == "correct" for v in summary["verify"].values()), summary["verify"]
    assert all(e["rel_err"] < 1e-6 for e in summary["goal"]["per_size"].values())


def test_the_profiled_run_holds_a_sessions_gpu_gate_alone(monkeypatch):
    """ncu replays the kernels: in a session, no other candidate's timed rounds may overlap it."""
    from kernelrag.verify import pipeline
    from kernelrag.verify.gate import GpuGate

    gate, seen = GpuGate(), []

    def fake_profile(task_src, candidate_src, **kw):
        seen.append((gate._writer, gate._readers))
        return {"profiled": True, "kernels": 1, "main": {}}

    monkeypatch.setattr(profile, "profile_candidate", fake_profile)
    v = Verdict(status="correct", ok=True, device="cuda")
    pipeline._profile(v, "task", "candidate", 60.0, gate)
    assert seen == [(True, 0)] and not gate._writer          # alone while profiled, released after
    pipeline._profile(Verdict(status="correct", ok=True, device="cuda"), "task", "candidate", 60.0)
    assert len(seen) == 2                                      # without a session: no gate to take
