"""VerifySession (kernelrag/verify/session.py), the per-phase times of a verdict and batch mode.

On CPU, under Triton's interpreter: the reuse that applies there (fixed trial seeds,
references kept in the warm reference process) must not weaken any check, so every hack
fixture of one task goes through one session and must still be caught.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kernelrag.errors import KernelRAGError
from kernelrag.verify import Phases, Verdict, VerifySession, verify
from kernelrag.verify.cli import main as cli_main
from kernelrag.verify.outcome import _cached_compile
from kernelrag.verify.sandbox import Job
from kernelrag.verify.baselines import Baselines, baseline_key
from kernelrag.verify.session import GpuGate
from kernelrag.verify.verdict import Timing

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
TASK = FIXTURES / "tasks" / "relu.py"
GOOD = FIXTURES / "positive" / "relu.py"
HACKS = [r for r in json.loads((FIXTURES / "expectations.json").read_text())["hacks"]
         if r["task"] == "relu" and not r.get("disabled") and not r.get("timeout_s")]


def test_a_verdict_carries_its_phases_and_they_survive_json():
    v = verify(TASK, GOOD, device="cpu")
    assert v.ok, v.feedback()
    for name in ("static", "reference_build", "correctness", "comparison"):
        assert name in v.phases.seconds, v.phases
    assert "phases: " in v.summary()
    back = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert back.phases == v.phases


def test_phases_reject_an_unknown_name():
    with pytest.raises(ValueError, match="unknown phase"):
        Phases().add("lunch", 1.0)


def test_a_session_reuses_the_references_of_a_task_and_only_of_that_task():
    sum_task, sum_good = FIXTURES / "tasks" / "sum_dim.py", FIXTURES / "positive" / "sum_dim.py"
    with VerifySession(device="cpu") as session:
        first, second = session.verify(TASK, GOOD), session.verify(TASK, GOOD)
        other = session.verify(sum_task, sum_good)
    assert first.ok and second.ok and other.ok
    assert first.seed == second.seed == session.seed
    assert "reference" not in first.phases.reused
    assert "reference" in second.phases.reused
    assert "reference" not in other.phases.reused
    assert [c.name for c in first.checks] == [c.name for c in second.checks]


def test_every_hack_of_a_task_is_still_caught_in_one_session():
    candidates = [GOOD] + [FIXTURES / f"{r['candidate']}.py" for r in HACKS]
    with VerifySession(device="cpu") as session:
        verdicts = session.verify_many(TASK, candidates)
    assert verdicts[0].ok, verdicts[0].feedback()
    for row, v in zip(HACKS, verdicts[1:]):
        assert v.status == row.get("cpu_status", row["status"]), (row["candidate"], v.feedback())
        assert not v.ok


def test_verify_pairs_returns_misuse_errors_when_asked():
    with VerifySession(device="cpu") as session:
        with pytest.raises(KernelRAGError, match="does not exist"):
            session.verify_pairs([(TASK, FIXTURES / "missing.py")])
        results = session.verify_pairs([(TASK, FIXTURES / "missing.py"), (TASK, GOOD)], errors="return")
    assert isinstance(results[0], KernelRAGError)
    assert results[1].ok


def test_a_closed_session_refuses_work():
    session = VerifySession(device="cpu")
    session.close()
    with pytest.raises(KernelRAGError, match="closed"):
        session.verify(TASK, GOOD)


def test_batch_cli_prints_one_verdict_each_and_fails_if_any_fails(capsys):
    bad = FIXTURES / "hacks" / "noop_empty.py"
    assert cli_main([str(TASK), str(GOOD), str(GOOD), "--device", "cpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["candidate"] for r in rows] == [str(GOOD), str(GOOD)]
    assert all(r["ok"] and r["phases"]["seconds"] for r in rows)
    assert cli_main([str(TASK), str(GOOD), str(bad), "--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 candidates ok" in out and str(bad) in out


def test_the_gate_keeps_untimed_work_off_the_gpu_while_one_candidate_times():
    gate = GpuGate()
    gate.exclusive()
    entered = threading.Event()

    def untimed():
        gate.shared()
        entered.set()
        gate.release("shared")

    worker = threading.Thread(target=untimed)
    worker.start()
    assert not entered.wait(0.3)         # cannot start while the other candidate is timed
    gate.release("exclusive")
    assert entered.wait(10)
    worker.join(10)


def test_the_gate_serves_requests_in_arrival_order():
    """A shared request waits for the exclusive ones that came before it only, and an
    exclusive one for everything before it: neither kind starves behind a stream of the other."""
    gate, order = GpuGate(), []
    gate.shared()                                    # a candidate's trials on the GPU

    def ask(kind, name):
        def run():
            getattr(gate, kind)()
            order.append(name)
            time.sleep(0.05)
            gate.release(kind)
        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(0.1)                              # queued in this order
        return thread

    threads = [ask("exclusive", "timing 1"), ask("shared", "first call"), ask("exclusive", "timing 2"),
               ask("shared", "trials")]
    assert order == []                               # the first timing waits for the trials under way
    gate.release("shared")
    for thread in threads:
        thread.join(10)
    assert order == ["timing 1", "first call", "timing 2", "trials"]


class FakeReference:
    """Answers the baseline commands as a reference process would, and records them."""

    def __init__(self, log, gate_state=None):
        self.log, self.gate_state, self.gate_states = log, gate_state, []
        self.replies = []

    def send(self, data):
        self.log.append(data["cmd"])
        self.gate_states.append(self.gate_state() if self.gate_state else None)
        if data["cmd"] == "baseline_compile":
            self.replies = [{"phase": "built"}, {"phase": "need_gpu"}]
            self.compiled = {"ok": True, "compiled": True, "seconds": {"compile": 0.1}, **self.compile_extra(data)}
        elif data["cmd"] == "gpu":
            self.replies = [self.compiled]
        else:
            self.replies = [{"ok": True, "compile": {"median_ms": 2.0, "iqr_ms": 0.1, "trials": 100},
                             "eager": {"median_ms": 4.0, "iqr_ms": 0.1, "trials": 100}}]

    def compile_extra(self, data):
        """More fields of the compile reply (a subclass's cache files)."""
        return {}

    def recv(self, deadline):
        return self.replies.pop(0)

    def describe(self):
        return "fake"


def test_a_tasks_baseline_is_compiled_sharing_the_gpu_and_timed_alone_once():
    log, returned = [], []
    gate = GpuGate()
    baselines = Baselines(gate, lambda: FakeReference(log), lambda ref, ok: returned.append(ok))
    gate.exclusive()                       # a candidate is timing: the baseline must wait to compile
    key = baselines.start("task", seed=1)
    assert baselines.start("task", seed=1) == key          # started once
    assert not baselines.wait(key, 0.3).get("compile") and log == []
    gate.release("exclusive")
    first = baselines.wait(key, 10)
    again = baselines.wait(key, 10)
    assert log == ["baseline_compile", "gpu", "baseline_time"] and returned == [True]
    assert first["stages_s"]["gpu_wait"] >= 0.25           # waited for the candidate's timing
    assert first["compile"]["median_ms"] == 2.0 and first["seconds"]["compile"] == 0.1
    assert again["waited_s"] < 0.1
    assert baseline_key("another task") != key
    unknown = baselines.wait(baseline_key("nothing"), 0.1)
    assert unknown["compile"] is None and "no torch.compile baseline was started" in unknown["error"]


def test_a_baseline_has_the_gpu_alone_from_its_first_call_through_its_timing():
    """Inductor may benchmark its own configurations at the first call: other GPU work then
    would skew the compile figure. Building the model shares the GPU; compiling holds nothing."""
    gate, log, refs = GpuGate(), [], []

    def state():
        return "exclusive" if gate._writer else ("shared" if gate._readers else "free")

    def take():
        refs.append(FakeReference(log, state))
        return refs[0]

    baselines = Baselines(gate, take, lambda ref, ok: None)
    key = baselines.start("task", seed=1)
    assert baselines.wait(key, 10)["compile"]["median_ms"] == 2.0
    assert refs[0].gate_states == ["shared", "exclusive", "exclusive"]   # compile sent, gpu, baseline_time
    assert state() == "free"


def test_a_cached_compile_figure_is_scaled_by_eagers_drift():
    v = Verdict(kernel_ms=Timing(1.0, 0.0, 100), eager_ms=Timing(4.4, 0.0, 100))
    _cached_compile(v, {"compile": {"median_ms": 2.0, "iqr_ms": 0.2, "trials": 100},
                        "eager": {"median_ms": 4.0, "iqr_ms": 0.1, "trials": 100}})
    assert v.compile_ms.median_ms == pytest.approx(2.2)
    assert v.compile_source.startswith("cached") and "x1.100" in v.compile_source
    failed = Verdict(kernel_ms=Timing(1.0, 0.0, 100), eager_ms=Timing(4.0, 0.0, 100))
    _cached_compile(failed, {"compile": None, "error": "RuntimeError: boom"})
    assert failed.compile_ms is None and any("boom" in w for w in failed.warnings)


def _wait_for_slots(session: VerifySession, timeout_s: float = 120.0) -> None:
    assert session.wait_warm(timeout_s), "the session's processes started ahead did not get ready"


def test_candidates_from_processes_started_ahead_are_checked_alike():
    """The GPU path (a candidate process per worker started before its job), run on a CPU."""
    bad = FIXTURES / "hacks" / "input_mutation.py"
    with VerifySession(device="cpu", prestart=True) as session:
        good, = session.verify_many(TASK, [GOOD])
        _wait_for_slots(session)                  # refilled in the background
        hack, = session.verify_many(TASK, [bad])
        _wait_for_slots(session)
        assert len(session._slots) == session.workers        # the next candidates' processes wait
        waiting = [slot.child for slot in session._slots]
    assert good.ok, good.feedback()
    assert "imports" in good.phases.seconds
    assert "warm-process" in hack.phases.reused      # started while the first candidate ran
    assert hack.status == "incorrect" and "inputs-unchanged" in {c.name.split("[")[0] for c in hack.failed_checks}
    assert all(child.poll() is not None for child in waiting)   # stopped when the session closed


GPU_FIXTURES = Path(__file__).parent / "fixtures" / "verify_gpu"


@pytest.mark.gpu
def test_on_a_gpu_the_compile_baseline_is_timed_once_and_hacks_are_still_rejected():
    task = GPU_FIXTURES / "task_gated_sigmoid.py"
    honest, stale = GPU_FIXTURES / "honest.py", GPU_FIXTURES / "ptr_cache.py"
    with VerifySession(device="cuda") as session:
        first, second, hack = session.verify_many(task, [honest, honest, stale])
    assert first.ok and second.ok, first.feedback() + second.feedback()
    assert first.timed and second.timed and first.eager_ms and second.eager_ms
    assert "baseline" in first.phases.seconds or "compile-baseline" in first.phases.reused
    assert "compile-baseline" in second.phases.reused and second.compile_source.startswith("cached")
    assert {"warm-process", "zygote-fork"} & set(second.phases.reused + hack.phases.reused)
    for name in ("warmup", "timing", "launch_proof"):
        assert name in second.phases.seconds
    assert not hack.ok


def test_warm_processes_outlive_one_batch_of_a_parallel_session():
    """Processes started from the session's threads must not die with a batch (PR_SET_PDEATHSIG
    follows the thread that started them)."""
    with VerifySession(device="cpu", prestart=True, workers=2) as session:
        first = session.verify_many(TASK, [GOOD, GOOD])
        _wait_for_slots(session)
        later = session.verify_many(TASK, [GOOD])
    assert all(v.ok for v in first + later)
    assert "warm-process" in later[0].phases.reused
    assert "reference" in later[0].phases.reused


def test_phases_ignore_what_a_candidate_writes_into_its_clock():
    from kernelrag.verify.outcome import phases
    from kernelrag.verify.sandbox import Session

    s = Session(clock={"spawn": 10.0}, ready={"seconds": {"reference_build": 0.5}},
                result={"clock": {"main": 11.0, "ready": "soon", "plan": 12.0, "trials": float("nan")},
                        "durations": {"timing": 2.0, "evil": 1.0, "warmup": [1]}})
    ph = phases(s)
    assert ph.seconds == {"process_start": 1.0, "reference_build": 0.5, "timing": 2.0}


@pytest.mark.slow
def test_the_baselines_inductor_backend_compiles_holding_nothing_and_asks_before_it_runs(monkeypatch):
    """torch.compile with the reference process's gated backend (here inductor's CPU code):
    compiled first, then one "need_gpu" before the compiled code's first call, none after."""
    import io

    import torch

    from kernelrag.verify import compiled as K

    sent = []
    monkeypatch.setattr(K, "_send", [sent.append])
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"cmd": "gpu"}) + "\n"))
    K._GPU_GRANTED.clear()
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())
    fast = torch.compile(model, backend=K._gated_inductor)
    x = torch.randn(4, 32)
    torch.testing.assert_close(fast(x), model(x))
    torch.testing.assert_close(fast(x), model(x))
    assert sent == [{"phase": "need_gpu"}]
    K._GPU_GRANTED.clear()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"cmd": "stop"}) + "\n"))
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="did not grant the GPU"):
        torch.compile(model, backend=K._gated_inductor)(x)


def test_a_zygote_whose_children_cannot_use_the_gpu_is_passed_over(monkeypatch):
    """Candidates then start as new interpreters: an infrastructure failure is never blamed
    on a candidate."""
    from kernelrag.verify import processes as P
    from kernelrag.verify import zygote

    from conftest import cuda_available

    if not cuda_available():             # the zygote's own check, for real: here no child gets CUDA
        assert zygote._children_get_cuda() is False
    monkeypatch.setattr(P.Server, "__init__", lambda self, *args, **kwargs: None)
    monkeypatch.setattr(P.Server, "recv", lambda self, deadline: {"ready": True, "fork_cuda": False})
    monkeypatch.setattr(P, "_FORK_FAILS", set())
    assert P.zygotes_enabled("cuda")
    assert not P.Zygote("cuda").ready
    assert not P.zygotes_enabled("cuda") and P.zygotes_enabled("cpu")


def test_a_cached_compile_figure_says_where_the_baselines_time_went():
    v = Verdict(kernel_ms=Timing(1.0, 0.0, 100), eager_ms=Timing(4.0, 0.1, 100))
    _cached_compile(v, {"compile": {"median_ms": 2.0, "iqr_ms": 0.2, "trials": 100},
                        "eager": {"median_ms": 4.0, "iqr_ms": 0.1, "trials": 100}, "measured_s": 61.0,
                        "stages_s": {"queued": 30.5, "compile_step": 25.0, "timing": 1.5}})
    assert "the baseline took 61.0 s (queued 30.5 s, compile step 25.0 s, timing 1.5 s)" in v.compile_source


def test_a_reference_process_says_it_is_up_before_the_gpu_is_taken_for_it():
    """``sandbox._run`` pings the reference process and takes its share of the GPU only on
    the answer: a process still importing torch holds nothing (20-28 s a worker at a GPU
    session's start, 2026-12-04)."""
    import time as _time

    from kernelrag.verify.processes import reference_server

    server = reference_server("cpu")
    try:
        server.send({"cmd": "ping"})
        assert server.recv(_time.monotonic() + 120) == {"ok": True, "pong": True}
    finally:
        server.proc.kill()


# --- a GPU whose memory other processes hold (the bench's tasks and a search's candidates share it) ---
class _FakeCuda:
    """torch.cuda as far as ``faults.gpu_memory_short`` asks it."""

    class OutOfMemoryError(RuntimeError):
        pass

    def __init__(self, free_gib: float, mine_gib: float, total_gib: float = 140.0):
        self.free_b, self.mine_b, self.total_b = (int(x * (1 << 30)) for x in (free_gib, mine_gib, total_gib))

    def mem_get_info(self):
        return self.free_b, self.total_b

    def memory_reserved(self):
        return self.mine_b


class _FakeTorch:
    def __init__(self, **kw):
        self.cuda = _FakeCuda(**kw)


def test_an_out_of_memory_error_is_the_candidates_only_when_it_held_the_memory():
    from kernelrag.verify.faults import gpu_memory_short

    others = _FakeTorch(free_gib=0.1, mine_gib=2.7)
    oom = others.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
    why = gpu_memory_short(oom, others)
    assert why and "2.7 GiB of 140 GiB" in why and "other processes" in why
    greedy = _FakeTorch(free_gib=0.1, mine_gib=120.0)
    assert gpu_memory_short(greedy.cuda.OutOfMemoryError("CUDA out of memory"), greedy) is None
    assert gpu_memory_short(ValueError("shapes differ"), others) is None


def test_the_cuda_runtimes_out_of_memory_error_is_gpu_memory_not_a_crash():
    """torch raises the runtime's cudaErrorMemoryAllocation as an AcceleratorError whose text
    starts "CUDA error", the mark of a crash; with other processes holding the memory it is
    gpu_memory (verified again alone), and the candidate's own when it held the memory."""
    from kernelrag.verify.faults import classify

    class AcceleratorError(RuntimeError):
        pass

    text = ("CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in "
            "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.")
    assert classify(AcceleratorError(text), _FakeTorch(free_gib=0.1, mine_gib=0.4)) == "gpu_memory"
    assert classify(AcceleratorError(text), _FakeTorch(free_gib=0.1, mine_gib=120.0)) == "crashed"
    assert classify(AcceleratorError("CUDA error: an illegal memory access was encountered"),
                    _FakeTorch(free_gib=0.1, mine_gib=0.4)) == "crashed"


def test_gpu_holders_names_each_process_and_what_it_runs(tmp_path):
    from kernelrag.verify.faults import gpu_holders

    for pid, args in ((101, ["python3", "-P", "-m", "kernelrag.verify.reference"]), (202, ["/usr/bin/python3", "x.py"])):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes("\0".join(args).encode() + b"\0")
    text = gpu_holders(lambda: "101, 20480\n202, 1024\n303, 512\n[N/A], [N/A]\n", proc_root=str(tmp_path))
    assert text == ("20.0 GiB pid 101 (kernelrag.verify.reference), 1.0 GiB pid 202 (python3), "
                    "0.5 GiB pid 303 (not visible here)")
    assert gpu_holders(lambda: "", proc_root=str(tmp_path)) is None

    def missing():
        raise FileNotFoundError("nvidia-smi")
    assert gpu_holders(missing) is None


def test_a_session_verifies_once_more_a_candidate_left_untimed_by_other_processes_memory():
    from kernelrag.verify.session import _timed_once_more

    verdicts = [Verdict(status="correct", ok=True, correct=True, device="cuda", untimed_cause="gpu_memory"),
                Verdict(status="correct", ok=True, correct=True, device="cuda", timed=True,
                        kernel_ms=Timing(1.0, 0.01, 100))]
    calls = []

    def call():
        calls.append(1)
        return verdicts[len(calls) - 1]

    v = _timed_once_more(call)
    assert len(calls) == 2 and v.timed and any("verified twice" in w for w in v.warnings)
    calls.clear()
    assert _timed_once_more(lambda: verdicts[1]) is verdicts[1]      # a timed verdict: once
    assert Verdict.from_dict(verdicts[0].to_dict()).untimed_cause == "gpu_memory"


def test_a_baseline_that_ran_out_of_gpu_memory_is_measured_again_and_the_candidate_too():
    """H200, 2026-12-05: relu's and instance_norm_relu's torch.compile baselines ran out of
    memory beside other tasks and the whole session went without their compile figure."""
    from kernelrag.verify.baselines import _Entry

    baselines = Baselines(GpuGate(), take_ref=lambda: None, give_ref=lambda server, healthy: None)
    key = baseline_key("task source")
    entry = baselines._entries[key] = _Entry()        # as _measure leaves a finished baseline
    entry.result = {"compile": None, "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."}
    entry.done.set()
    assert "out of memory" in baselines.wait(key, 1.0)["error"]
    assert key not in baselines._entries                 # the next start measures it again
    v = Verdict(status="correct", ok=True, correct=True, device="cuda", timed=True,
                eager_ms=Timing(1.0, 0.01, 100), kernel_ms=Timing(1.0, 0.01, 100))
    _cached_compile(v, entry.result)
    assert v.compile_ms is None and v.untimed_cause == "gpu_memory"


def test_classify_names_other_processes_memory_and_only_then():
    from kernelrag.verify.faults import classify

    others, greedy = _FakeTorch(free_gib=0.1, mine_gib=2.7), _FakeTorch(free_gib=0.1, mine_gib=120.0)
    oom = others.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert classify(oom, others) == "gpu_memory"
    assert classify(oom, greedy) == "runtime"            # the candidate held the memory: its failure
    assert classify(oom) == "runtime"                     # nobody to ask: its failure
    assert classify(RuntimeError("CUDA error: an illegal memory access was encountered"), others) == "crashed"


def _late_run(torch, result=None):
    from types import SimpleNamespace

    return SimpleNamespace(result=result or {"warnings": []}, torch=torch, job={"candidate_path": "/x/candidate.py"})


def test_a_failure_at_the_timed_size_from_other_processes_memory_leaves_the_candidate_untimed():
    """H100, 2026-12-05: 26 tasks of a suite run went "incorrect" with five tasks in flight,
    through the worker's own handlers of the first call at the timed size."""
    from kernelrag.verify.measure import late_failure

    emptied = []
    others = _FakeTorch(free_gib=0.1, mine_gib=2.7)
    others.cuda.empty_cache = lambda: emptied.append(1)
    run = _late_run(others)
    late_failure(run, others.cuda.OutOfMemoryError("CUDA out of memory"), "the first call at the timed size")
    assert "timing_error" not in run.result and run.result["untimed_cause"] == "gpu_memory" and emptied
    assert "the first call at the timed size could not run" in run.result["warnings"][0]
    run = _late_run(others)
    late_failure(run, ValueError("shape mismatch"), "the timed run")
    assert run.result["timing_error"]["kind"] == "runtime" and "untimed_cause" not in run.result


def test_correctness_trials_cut_short_by_other_processes_memory_are_not_checked_not_incorrect():
    from types import SimpleNamespace

    from kernelrag.verify.outcome import assemble

    result = {"phase": "trials", "error": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB",
              "error_kind": "gpu_memory", "untimed_cause": "gpu_memory", "trials": {}, "findings": [], "checks": []}
    s = SimpleNamespace(ready={}, result=result, phase1=result, limit=None, ref_error=None, not_checkable=None,
                        timed_out=None, crashed=None, stderr="", isolation="", compare=None, baseline=None,
                        clock={})
    v = assemble(Verdict(device="cuda"), s, SimpleNamespace(uses_cuda_extension=False))
    assert v.status == "not_checkable" and not v.checkable and not v.ok and v.untimed_cause == "gpu_memory"
    assert "other processes held the GPU's memory" in v.reason
    s.result = s.phase1 = dict(result, error_kind="runtime", untimed_cause=None)
    assert assemble(Verdict(device="cuda"), s, SimpleNamespace(uses_cuda_extension=False)).status == "incorrect"


def test_a_verification_run_again_for_memory_has_the_session_to_itself():
    """The retry waits for the verifications in flight to end; new ones wait for the retry."""
    from kernelrag.verify.gate import MemoryRoom

    room, log = MemoryRoom(), []
    first_in, let_first_go = threading.Event(), threading.Event()

    def first():
        with room.shared():
            first_in.set()
            log.append("first in")
            let_first_go.wait(5)
            log.append("first out")

    def retry():
        with room.alone():
            log.append("retry alone")
            time.sleep(0.05)
            log.append("retry done")

    def later():
        with room.shared():
            log.append("later in")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    first_in.wait(5)
    threads.append(threading.Thread(target=retry))
    threads[1].start()
    time.sleep(0.05)
    threads.append(threading.Thread(target=later))     # arrives while the retry waits: goes after it
    threads[2].start()
    time.sleep(0.05)
    assert log == ["first in"]
    let_first_go.set()
    for t in threads:
        t.join(5)
    assert log == ["first in", "first out", "retry alone", "retry done", "later in"]


def test_outputs_the_reference_process_never_compared_are_not_checked_not_incorrect():
    """H100, 2026-12-05: linear_swiglu_bf16 came out "incorrect" because the reference
    process, out of GPU memory beside four other tasks, never answered the comparison."""
    from types import SimpleNamespace

    from kernelrag.verify.outcome import assemble

    trials = {"t0": {"output": "/tmp/t0.pt", "launches": 1}}
    result = {"phase": "trials done", "trials": trials, "findings": [], "checks": []}
    s = SimpleNamespace(ready={"trials": [{"id": "t0", "dist": "task"}]}, result=result, phase1=result, limit=None,
                        ref_error=None, not_checkable=None, timed_out=None, crashed=None, stderr="", isolation="",
                        compare=None, baseline=None, clock={},
                        ref_lost="exit 1; stderr: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    v = assemble(Verdict(device="cuda"), s, SimpleNamespace(uses_cuda_extension=False))
    assert v.status == "not_checkable" and not v.ok and v.untimed_cause == "gpu_memory"
    assert "reference process gave no comparison" in v.reason
    s.result = s.phase1 = dict(result, trials={"t0": dict(trials["t0"], problems=["shape (2,) != (4,)"])})
    assert assemble(Verdict(device="cuda"), s, SimpleNamespace(uses_cuda_extension=False)).status == "incorrect"
