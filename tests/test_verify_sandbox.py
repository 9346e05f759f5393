"""The OS sandbox around the verifier's workers (kernelrag/verify/isolation.py, jail.py).

Each escape fixture (tests/fixtures/verify/hacks/escape_*.py) runs with the static rules
that would stop it switched off, so that only the sandbox stands between it and the
machine. Everything it aims at is the test's own: temporary folders, a loopback listener
the test starts, a ``sleep`` of a unique length that the test looks for and kills by PID.
Needs namespaces (CI: root on Debian; a laptop: user namespaces); skipped where the
verifier reports that none are available.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from kernelrag.errors import KernelRAGError
from kernelrag.verify import StaticPolicy, verify, verify_source
from kernelrag.verify import isolation

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
RELU_TASK = FIXTURES / "tasks" / "relu.py"
STATIC_OFF = StaticPolicy(disabled=frozenset({"module-reach", "file-io", "forbidden-import", "introspection",
                                              "native-code"}))
isolated = pytest.mark.skipif(not isolation.probe("auto").active,
                              reason=f"no OS isolation here: {isolation.probe('auto').describe()}")


def escape(tmp_path: Path, name: str, **values: str) -> Path:
    source = (FIXTURES / "hacks" / f"{name}.py").read_text()
    for key, value in values.items():
        source = source.replace(f"__{key}__", value)
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def test_environment_is_an_allow_list(monkeypatch):
    for name in ("MY_API_KEY", "GITHUB_TOKEN", "OPENAI_BASE_URL", "KERNELRAG_LLM_API_KEY", "DB_SECRET",
                 "TORCH_HUB_TOKEN"):
        monkeypatch.setenv(name, "sk-very-secret")
    monkeypatch.setenv("TRITON_DEBUG", "0")
    env = isolation.base_env("cpu", "/tmp")
    assert "sk-very-secret" not in json.dumps(env)
    assert env["TRITON_DEBUG"] == "0" and env["TRITON_INTERPRET"] == "1" and env["HOME"] == "/tmp"
    assert "KERNELRAG_HOME" not in env


def test_isolation_can_be_switched_off_and_says_so(monkeypatch):
    monkeypatch.setenv("KERNELRAG_VERIFY_ISOLATION", "none")
    verdict = verify(RELU_TASK, FIXTURES / "positive" / "relu.py", device="cpu")
    assert verdict.ok and verdict.isolation.startswith("none")
    assert "WITHOUT OS isolation" in verdict.summary()
    with pytest.raises(KernelRAGError, match="OS isolation is required"):
        verify(RELU_TASK, FIXTURES / "positive" / "relu.py", device="cpu", require_isolation=True)


def test_bad_isolation_mode_is_refused(monkeypatch):
    monkeypatch.setenv("KERNELRAG_VERIFY_ISOLATION", "chroot")
    with pytest.raises(ValueError, match="auto, unshare, direct, none"):
        isolation.requested_mode()


def test_candidate_path_must_be_a_python_source(tmp_path):
    secret = tmp_path / "notes.txt"
    secret.write_text("root:x:0:0:do not echo me\n")
    for path in (secret, Path("/etc/passwd")):
        with pytest.raises(KernelRAGError, match="not a Python source") as err:
            verify(RELU_TASK, path, device="cpu")
        assert "do not echo" not in str(err.value) and "root:x" not in str(err.value)
    big = tmp_path / "big.py"
    big.write_text("#" * (2 << 20))
    with pytest.raises(KernelRAGError, match="bytes"):
        verify(RELU_TASK, big, device="cpu")


@isolated
def test_honest_kernel_verifies_inside_the_sandbox():
    verdict = verify(RELU_TASK, FIXTURES / "positive" / "relu.py", device="cpu", require_isolation=True)
    assert verdict.ok, verdict.feedback()
    assert verdict.isolation.startswith("unshare") and "namespaces" in verdict.isolation
    assert "WITHOUT" not in verdict.summary()


@isolated
def test_no_write_to_home_or_kernelrag_home(tmp_path, monkeypatch, kernelrag_home):
    home = tmp_path / "home"
    home.mkdir()
    kernelrag_home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    stray = Path("/tmp/kernelrag-escape-marker")
    stray.unlink(missing_ok=True)
    path = escape(tmp_path, "escape_warnings_os", HOME=str(home), KERNELRAG_HOME=str(kernelrag_home))
    verdict = verify(RELU_TASK, path, device="cpu", policy=STATIC_OFF)
    assert not verdict.ok and verdict.status == "compile_error", verdict.feedback()
    assert "No such file or directory" in (verdict.error or "")     # the folders are not even visible
    assert list(home.iterdir()) == [] and not (kernelrag_home / "kernelrag-escape-marker").exists()
    assert not stray.exists()                                      # its /tmp is a private tmpfs
    static = verify(RELU_TASK, path, device="cpu")
    assert static.status == "rejected" and "module-reach" in {f.rule for f in static.blocking_findings}
    assert any(f.rule == "module-reach" and f.line == 12 for f in static.findings)


@isolated
def test_no_secret_reaches_the_verdict(tmp_path, monkeypatch):
    key = "sk-" + secrets.token_hex(12)
    monkeypatch.setenv("SERVICE_API_KEY", key)
    monkeypatch.setenv("KERNELRAG_LLM_API_KEY", key)
    verdict = verify(RELU_TASK, escape(tmp_path, "escape_secret_env"), device="cpu", policy=STATIC_OFF)
    assert not verdict.ok
    assert "leaked" in verdict.feedback()                          # it ran, and found nothing to leak
    assert key not in json.dumps(verdict.to_dict()) and key not in verdict.feedback()


def _processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@isolated
def test_no_detached_process_outlives_the_verification(tmp_path):
    assert_no_detached_process(tmp_path)


def test_direct_namespace_calls_where_util_linux_is_missing(tmp_path, monkeypatch):
    if not isolation.probe("direct").active:
        pytest.skip(f"no namespaces by direct calls here: {isolation.probe('direct').describe()}")
    monkeypatch.setenv("KERNELRAG_VERIFY_ISOLATION", "direct")
    verdict = verify(RELU_TASK, FIXTURES / "positive" / "relu.py", device="cpu", require_isolation=True)
    assert verdict.ok and verdict.isolation.startswith("direct: ")
    assert_no_detached_process(tmp_path)


def assert_no_detached_process(tmp_path: Path) -> None:
    seconds = str(7_000_000 + secrets.randbelow(1_000_000))
    verdict = verify(RELU_TASK, escape(tmp_path, "escape_detached", SECONDS=seconds), device="cpu",
                     policy=STATIC_OFF)
    left = _processes_with(f"sleep {seconds}")
    for _ in range(50):                       # the namespace's last processes may still be exiting
        if not left:
            break
        time.sleep(0.1)
        left = _processes_with(f"sleep {seconds}")
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"a detached process survived the verification ({verdict.status})"


@isolated
def test_no_network_connection_is_made(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    accepted: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        port = str(server.getsockname()[1])
        verdict = verify(RELU_TASK, escape(tmp_path, "escape_network", PORT=port), device="cpu", policy=STATIC_OFF)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert not verdict.ok and verdict.status == "compile_error"
    assert "Network is unreachable" in (verdict.error or "") or "refused" in (verdict.error or "")
    assert accepted == []


def test_cpu_mode_never_compiles_cpp(tmp_path):
    marker = tmp_path / "cpp-ran"
    path = escape(tmp_path, "escape_cpp_system", MARKER=str(marker))
    verdict = verify(RELU_TASK, path, device="cpu", policy=STATIC_OFF)
    assert verdict.status == "not_checkable" and "no C++ is compiled" in verdict.reason
    assert not marker.exists()
    static = verify(RELU_TASK, path, device="cpu")
    rules = {(f.rule, f.line) for f in static.blocking_findings}
    assert static.status == "rejected" and ("native-code", 12) in rules


def test_static_rejection_needs_no_isolation(monkeypatch):
    monkeypatch.setenv("KERNELRAG_VERIFY_ISOLATION", "none")
    src = (FIXTURES / "hacks" / "escape_warnings_os.py").read_text()
    verdict = verify_source(RELU_TASK.read_text(), src, device="cpu", require_isolation=True)
    assert verdict.status == "rejected" and verdict.isolation.startswith("not needed")


def _writer(fifo: Path, megabytes: int) -> "subprocess.Popen":
    import subprocess
    import sys

    code = (f"import sys\nf = open({str(fifo)!r}, 'wb')\nline = b'x' * (1 << 20)\n"
            f"for _ in range({megabytes}):\n    f.write(line)\nf.close()\n"
            f"f = open({str(fifo)!r}, 'ab')\nf.write(b'reopened\\n')\nf.close()\n")
    return subprocess.Popen([sys.executable, "-c", code])


def test_output_past_the_cap_is_cut_off_within_one_pipe_buffer(tmp_path):
    from kernelrag.verify.capture import CHUNK_BYTES, OutputCapture

    scratch, keep = tmp_path / "scratch", tmp_path / "keep"
    scratch.mkdir(), keep.mkdir()
    capture = OutputCapture(scratch, keep, cap_bytes=1 << 20)
    writer = _writer(scratch / "stdout.txt", megabytes=400)
    capture.on_cap = writer.kill
    assert writer.wait(60) != 0                     # killed at the cap, never wrote its 400 MiB
    capture.stop()
    assert capture.broken and "stdout/stderr" in capture.broken
    assert capture.total_bytes <= (1 << 20) + 2 * CHUNK_BYTES
    assert (keep / "stdout.txt").stat().st_size <= 1 << 20


def test_output_under_the_cap_is_kept_whole_even_across_reopening(tmp_path):
    from kernelrag.verify.capture import OutputCapture

    scratch, keep = tmp_path / "scratch", tmp_path / "keep"
    scratch.mkdir(), keep.mkdir()
    capture = OutputCapture(scratch, keep, cap_bytes=8 << 20)
    assert _writer(scratch / "stderr.txt", megabytes=2).wait(60) == 0
    assert capture.tail("stderr.txt", 9) == "reopened\n"
    capture.stop()
    assert capture.broken is None and (keep / "stderr.txt").stat().st_size == (2 << 20) + 9


def resident_hoard(tmp_path: Path) -> Path:
    """The positive ReLU control, holding 2.5 GiB of resident host memory (written, kept
    across calls) from its first forward on."""
    source = (FIXTURES / "positive" / "relu.py").read_text()
    old = "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
    assert old in source
    source = source.replace(old, old + "        if not hasattr(self, 'hoard'):\n"
                                       "            self.hoard = torch.ones(640 * 1024**2, dtype=torch.float32)\n")
    path = tmp_path / "resident_hoard.py"
    path.write_text(source)
    return path


def test_resident_host_memory_over_the_cap_is_killed_and_reported(monkeypatch, tmp_path):
    """The cap RLIMIT_AS cannot give on a GPU: resident memory of the candidate's process
    group, watched from outside it (by its zygote, or by the parent for a new interpreter).
    The cap is lowered to 1.5 GiB here; the kernel holds 2.5 GiB."""
    from kernelrag.verify import processes

    monkeypatch.setattr(isolation, "host_rss_bytes", lambda device: 1536 << 20)
    hoard = resident_hoard(tmp_path)
    for zygotes in (True, False):
        monkeypatch.setattr(processes, "zygotes_enabled", lambda device=None, on=zygotes: on)
        v = verify(RELU_TASK, hoard, device="cpu", trials=3)
        assert v.status == "rejected" and "resident host memory" in v.reason, (zygotes, v.reason)


def test_the_resident_memory_of_a_process_group_is_counted(tmp_path):
    import subprocess
    import sys

    from kernelrag.verify.jail import group_rss_bytes

    code = "import time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == b"ok"
        assert group_rss_bytes(proc.pid) > 300 * 2**20
    finally:
        proc.kill()
        proc.wait()
    assert group_rss_bytes(proc.pid) == 0
