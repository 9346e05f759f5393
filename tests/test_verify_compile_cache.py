"""The compiled torch.compile baselines kept across sessions (``verify/compile_cache``): the
round trip between a reference process and the parent, and what the parent refuses."""
from __future__ import annotations

import base64
from pathlib import Path

from kernelrag.verify import compile_cache as cc
from kernelrag.verify.baselines import Baselines
from kernelrag.verify.session import GpuGate
from test_verify_session import FakeReference

TASK = "class Model: ...\n"
NAME = cc.tag("2.11.0+cu130", "3.6.0", "NVIDIA H200")


def cache_dirs(base: Path) -> dict[str, Path]:
    return {"inductor": base / "inductor", "triton": base / "triton"}


def compile_into(dirs: dict[str, Path]) -> set[str]:
    """What a compile leaves: generated code, a cubin, a lock file that must not travel."""
    before = cc.snapshot(dirs)
    (dirs["inductor"] / "ab").mkdir(parents=True)
    (dirs["inductor"] / "ab" / "cabc.py").write_text("def call(args): ...\n")
    (dirs["triton"] / "H1").mkdir(parents=True)
    (dirs["triton"] / "H1" / "k.cubin").write_bytes(bytes(range(256)))
    (dirs["triton"] / "H1" / "k.lock").write_text("")
    return before


def test_a_compile_travels_to_the_next_sessions_reference_process(tmp_path):
    first = cache_dirs(tmp_path / "ref1")
    (first["inductor"] / "old").mkdir(parents=True)
    (first["inductor"] / "old" / "other_task.py").write_text("# another task's compile, in this process before\n")
    before = compile_into(first)
    rels = cc.added(first, before)
    assert rels == ["inductor/ab/cabc.py", "triton/H1/k.cubin"]          # neither locks nor older files
    root = tmp_path / "home" / "baselines"
    assert cc.store(root, TASK, cc.pack(first, rels, NAME)) == 2
    assert cc.offer(root, "class Other: ...\n", tmp_path) is None         # keyed by the task's source
    offered = cc.offer(root, TASK, tmp_path)
    second = cache_dirs(tmp_path / "ref2")
    assert not cc.restore(str(offered), cc.tag("2.12.0", "3.6.0", "NVIDIA H200"), second)   # other versions
    assert cc.restore(str(offered), NAME, second)
    assert (second["triton"] / "H1" / "k.cubin").read_bytes() == bytes(range(256))
    assert (second["inductor"] / "ab" / "cabc.py").read_text() == "def call(args): ...\n"


def test_the_parent_refuses_what_could_leave_the_tasks_own_entry(tmp_path):
    root = tmp_path / "baselines"
    good = base64.b64encode(b"x").decode()
    for files in ({"../../etc/x": good}, {"/etc/passwd": good}, {"inductor/../../x": good},
                  {"graph.json": good}, {"secrets/k": good}, {"inductor/a.py": "not base64!"},
                  {"inductor/a.py": 7}, {}):
        assert cc.store(root, TASK, {"tag": NAME, "files": files}) == 0
    assert cc.store(root, TASK, {"tag": "..", "files": {"inductor/a.py": good}}) == 0
    big = base64.b64encode(b"\0" * (cc.MAX_BYTES + 1)).decode()
    assert cc.store(root, TASK, {"tag": NAME, "files": {"inductor/big": big}}) == 0
    assert not root.exists() or not any(p.is_file() for p in root.rglob("*"))
    assert cc.store(root, TASK, {"tag": "../../escape", "files": {"inductor/a.py": good}}) == 1
    assert [p.relative_to(root).parts[1] for p in root.rglob("a.py")] == [".._.._escape"]   # made safe


class CachingReference(FakeReference):
    """A reference process whose compile writes cache files, or finds them offered."""

    def __init__(self, log):
        super().__init__(log)
        self.offered = []

    def compile_extra(self, data):
        self.offered.append(data.get("cache"))
        hit = bool(data.get("cache")) and Path(data["cache"], NAME, "triton", "k.cubin").is_file()
        return {"cache": {"hit": True} if hit else {"hit": False, "tag": NAME, "files": {
            "triton/k.cubin": base64.b64encode(b"cubin").decode()}}}


def test_a_session_stores_its_baselines_compile_and_the_next_one_reuses_it(tmp_path):
    root, refs = tmp_path / "cache" / "baselines", []

    def session_baseline():
        refs.append(CachingReference([]))
        baselines = Baselines(GpuGate(), lambda: refs[-1], lambda ref, ok: None, cache_root=root)
        return baselines.wait(baselines.start(TASK, seed=1), 10)

    first = session_baseline()
    assert refs[0].offered == [None] and first["compile_cache"] == {"hit": False, "stored": 1}
    assert (cc.entry_of(root, TASK) / NAME / "triton" / "k.cubin").read_bytes() == b"cubin"
    second = session_baseline()
    assert refs[1].offered[0] and second["compile_cache"] == {"hit": True, "stored": 0}
    assert second["compile"]["median_ms"] == 2.0                          # still timed in this session
    assert not Path(refs[1].offered[0]).exists()                          # the offered copy is gone
    assert "files" not in str(second)                                     # no file contents in a verdict
