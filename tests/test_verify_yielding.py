"""A candidate's compiles hold no share of the GPU gate (kernelrag/verify/yielding.py).

The candidate's side (``Link``) and the parent's (``Desk``) run here as threads around a
real ``GpuGate``, with Triton's compiler replaced by one that blocks until told: while it
compiles, a timing elsewhere gets the GPU alone; when it is done, it waits for that timing
before it launches again.
"""
from __future__ import annotations

import json
import threading
import time

import pytest

from kernelrag.verify.gate import GpuGate, Held
from kernelrag.verify.yielding import GRANTED, REQUEST, Desk, Link


class Parent:
    """``Desk.serve`` in a loop, as ``sandbox._run`` polls."""

    def __init__(self, scratch, held):
        self.desk, self.stop = Desk(scratch, held), threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.desk.serve()
            time.sleep(0.002)

    def close(self):
        self.stop.set()
        self.thread.join(5)


def wait_for(condition, timeout_s=5.0):
    end = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def blocking_compiler(monkeypatch):
    """triton.compiler.compile replaced by one that signals and blocks until released."""
    import triton.compiler as tc

    started, finish, calls = threading.Event(), threading.Event(), []

    def compile(src, **kwargs):          # noqa: A001 - Triton's name
        calls.append(src)
        started.set()
        assert finish.wait(10)
        return f"kernel of {src}"

    monkeypatch.setattr(tc, "compile", compile)
    return tc, started, finish, calls


def test_a_timing_elsewhere_runs_while_a_candidate_compiles_and_the_candidate_waits_for_it(tmp_path,
                                                                                          blocking_compiler):
    tc, started, finish, _ = blocking_compiler
    gate = GpuGate()
    held = Held(gate)
    held.shared()                                   # the candidate's trials share the GPU
    parent = Parent(tmp_path, held)
    link = Link(tmp_path)
    assert link.around_compiles()
    link.enabled = True
    out = {}
    candidate = threading.Thread(target=lambda: out.setdefault("kernel", tc.compile("k1")))
    candidate.start()
    try:
        assert started.wait(5)
        assert wait_for(lambda: parent.desk.released == 1)   # its share let go for the compile
        timed = threading.Event()

        def timing():
            gate.exclusive()
            timed.set()

        other = threading.Thread(target=timing)
        other.start()
        assert timed.wait(5), "a timing elsewhere waited for a candidate that was only compiling"
        finish.set()                                # compiled: the candidate asks for its share back
        time.sleep(0.3)
        assert "kernel" not in out                  # ... and waits while the other is timed
        gate.release("exclusive")
        candidate.join(5)
        assert out["kernel"] == "kernel of k1"
        assert held.state == "shared" and link.compiles == 1 and link.waited_s["correctness"] >= 0.25
        assert json.loads((tmp_path / GRANTED).read_text())["n"] == 2
    finally:
        finish.set()
        parent.close()
        held.release()


def test_compiles_pass_straight_through_while_the_link_is_off(tmp_path, blocking_compiler):
    """Before the plan and during the timing the candidate keeps what the parent holds."""
    tc, _, finish, calls = blocking_compiler
    finish.set()
    link = Link(tmp_path)
    assert link.around_compiles() and link.around_compiles()   # wrapped once, not twice
    assert tc.compile("k2") == "kernel of k2" and calls == ["k2"]
    assert not (tmp_path / REQUEST).exists() and link.compiles == 0


def test_after_its_timing_a_candidate_gives_up_the_gpu_for_a_shared_hold(tmp_path):
    gate = GpuGate()
    held = Held(gate)
    held.exclusive()                                # its timing
    parent = Parent(tmp_path, held)
    try:
        Link(tmp_path).ask("shared")                # returns once granted
        assert held.state == "shared"
        other = threading.Thread(target=lambda: (gate.exclusive(), gate.release("exclusive")))
        other.start()
        time.sleep(0.2)
        assert other.is_alive()                     # the next timing waits for the re-check only
        held.release()
        other.join(5)
        assert not other.is_alive()
    finally:
        parent.close()
        held.release()


@pytest.mark.parametrize("request_text", ['{"n": 1, "want": "exclusive"}', '{"n": "1", "want": "none"}',
                                          '{"n": true, "want": "none"}', "[1, 2]", "not json", '{"want": "none"}'])
def test_the_parent_ignores_requests_it_does_not_understand(tmp_path, request_text):
    gate = GpuGate()
    held = Held(gate)
    held.shared()
    (tmp_path / REQUEST).write_text(request_text)
    desk = Desk(tmp_path, held)
    desk.serve()
    assert held.state == "shared" and desk.served == 0
    held.release()


def test_a_request_is_served_once_and_an_old_one_never_again(tmp_path):
    gate = GpuGate()
    held = Held(gate)
    held.shared()
    desk = Desk(tmp_path, held)
    (tmp_path / REQUEST).write_text('{"n": 3, "want": "none"}')
    desk.serve()
    assert held.state is None and desk.served == 3
    held.shared()
    desk.serve()                                    # the same request again: nothing
    (tmp_path / REQUEST).write_text('{"n": 2, "want": "none"}')
    desk.serve()                                    # an older one: nothing
    assert held.state == "shared" and desk.released == 1
    held.release()


def test_a_link_refuses_a_request_it_has_no_word_for(tmp_path):
    with pytest.raises(ValueError, match="exclusive"):
        Link(tmp_path).ask("exclusive")


def test_the_gate_says_how_long_the_gpu_was_held_alone_shared_and_by_no_one():
    gate = GpuGate()
    gate.exclusive()
    time.sleep(0.15)
    gate.release("exclusive")
    gate.shared()
    gate.shared()
    time.sleep(0.1)
    gate.release("shared")
    gate.release("shared")
    time.sleep(0.05)
    used = gate.usage()
    assert set(used) == {"exclusive_s", "shared_s", "idle_s", "idle_with_waiters_s"}
    assert used["exclusive_s"] >= 0.14 and used["shared_s"] >= 0.09 and used["idle_s"] >= 0.04   # each at least
    assert used["idle_with_waiters_s"] < used["exclusive_s"]    # nobody queued: what little there is, is bookkeeping


def test_a_verdicts_phases_count_the_waits_after_compiles_as_gpu_wait_not_as_work():
    from types import SimpleNamespace

    from kernelrag.verify.outcome import phases
    from kernelrag.verify.verdict import Phases

    result = {"clock": {"plan": 10.0, "trials": 20.0}, "durations": {"first_call": 3.0, "timing": 1.0},
              "gate": {"compiles_yielded": 3, "waited_s": {"correctness": 4.0, "first_call": 1.0, "after_timing": 0.5}}}
    run = SimpleNamespace(result=result, phase1=None, clock={"gpu_wait": 2.0}, ready={}, compare=None, baseline=None)
    ph = phases(run)
    assert ph.seconds == {"correctness": 6.0, "gpu_wait": 7.5, "first_call": 2.0, "timing": 1.0}
    assert ph.yielded == 3 and "3 compile(s) off the GPU gate" in ph.line()
    assert Phases.from_any({"seconds": ph.seconds, "reused": [], "yielded": 3}).yielded == 3
    # what a candidate writes there is only ever numbers taken off its own clock
    run.result = dict(result, gate={"compiles_yielded": "many", "waited_s": {"correctness": "all"}})
    assert phases(run).seconds["correctness"] == 10.0 and phases(run).yielded == 0


def test_a_verification_under_a_gate_shares_it_only_from_the_candidates_import_to_its_end():
    """The whole run on the CPU with a gate handed in, as a GPU session does: the reference
    process answers its ping, the candidate imports, and only then is the GPU shared."""
    from pathlib import Path

    from kernelrag.verify import verify
    from kernelrag.verify.sandbox import run_session

    fixtures = Path(__file__).parent / "fixtures" / "verify"
    gate, seen = GpuGate(), []

    def runner(job):
        seen.append(job)
        return run_session(job, gate=gate)

    v = verify(fixtures / "tasks" / "relu.py", fixtures / "positive" / "relu.py", device="cpu", runner=runner)
    assert v.ok, v.reason
    used = gate.usage()
    assert used["shared_s"] > 0 and used["exclusive_s"] == 0     # no timing on a CPU
    assert seen and seen[0].device == "cpu"
