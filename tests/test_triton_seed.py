"""The trusted copy of Triton's driver helper that sandboxed candidates get (verify.triton_seed)."""
from __future__ import annotations

import os

from kernelrag.verify import triton_seed


def test_capture_then_plant_gives_a_private_copy(tmp_path):
    trusted = tmp_path / "zygote" / "triton"
    (trusted / "abc123").mkdir(parents=True)
    (trusted / "abc123" / "cuda_utils.so").write_bytes(b"\x7fELF helper")
    (trusted / "abc123" / "__grp__cuda_utils.json").write_text("{}")
    os.symlink("/etc/passwd", trusted / "abc123" / "link")          # never followed into the seed
    seed = triton_seed.capture(trusted)
    assert sorted(seed) == ["abc123/__grp__cuda_utils.json", "abc123/cuda_utils.so"]

    (trusted / "abc123" / "cuda_utils.so").write_bytes(b"changed after capture")
    private = tmp_path / "child" / "triton"
    assert triton_seed.plant(seed, private) == 2
    assert (private / "abc123" / "cuda_utils.so").read_bytes() == b"\x7fELF helper"


def test_plant_never_writes_outside_its_folder(tmp_path):
    private = tmp_path / "child" / "triton"
    written = triton_seed.plant({"../escaped": b"x", "/abs/escaped": b"x", "ok/file": b"x"}, private)
    assert written == 1 and (private / "ok" / "file").exists()
    assert not (tmp_path / "child" / "escaped").exists() and not os.path.exists("/abs/escaped")


def test_nothing_to_capture_or_too_much_gives_an_empty_seed(tmp_path, monkeypatch):
    assert triton_seed.capture(None) == {} and triton_seed.capture(tmp_path / "missing") == {}
    (tmp_path / "big").write_bytes(b"x" * 1024)
    monkeypatch.setattr(triton_seed, "MAX_BYTES", 512)
    assert triton_seed.capture(tmp_path) == {}
    assert triton_seed.plant({}, tmp_path / "child") == 0


# ---- native builds shared by content (Triton 3.6 builds a launcher per kernel signature) ----

import inspect
import json
import shutil

import pytest

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")


def _triton_build(name: str, folder, text: str) -> str:
    """Call Triton's own native build, as its driver does for a launcher."""
    from triton.runtime import build as triton_build

    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.c"
    src.write_text(text)
    params = inspect.signature(triton_build._build).parameters
    extra = {"ccflags": []} if "ccflags" in params else {}
    return triton_build._build(name, str(src), str(folder), [], [], [], **extra)


@pytest.fixture
def hook_off():
    from triton import knobs

    yield
    knobs.build.impl = None


@needs_cc
def test_a_build_made_in_one_sandbox_is_rebuilt_by_the_builder_and_served_to_the_next(tmp_path, hook_off):
    source = "int kernelrag_answer(void) { return 42; }\n"
    wishes_1 = tmp_path / "child1" / triton_seed.WISHES
    wishes_1.parent.mkdir()
    assert triton_seed.install_build_hook(tmp_path / "cache1", wishes_1)
    built = _triton_build("answer", tmp_path / "build1", source)
    assert os.path.getsize(built) > 0
    wishes = triton_seed.wanted(wishes_1, known=set())
    assert [w["name"] for w in wishes] == ["answer"] and wishes[0]["src"] == source

    out = tmp_path / "builder"
    out.mkdir()
    assert triton_seed.build_wanted(wishes, out) == 1
    (out / ("0" * 64 + ".so")).write_bytes(b"planted by a hostile builder")   # a key nobody asked for
    (out / "answer.so").write_bytes(b"not a key")
    seed = triton_seed.harvest(out, wishes)
    assert list(seed) == [f"{triton_seed.BUILDS}/{wishes[0]['key']}.so"]

    assert triton_seed.plant(seed, tmp_path / "cache2") == 1
    wishes_2 = tmp_path / "child2" / triton_seed.WISHES
    wishes_2.parent.mkdir()
    assert triton_seed.install_build_hook(tmp_path / "cache2", wishes_2)
    served = _triton_build("answer", tmp_path / "build2", source)
    assert open(served, "rb").read() == next(iter(seed.values()))
    assert not wishes_2.exists()                      # served, not built
    changed = _triton_build("answer", tmp_path / "build3", source + "int other(void) { return 1; }\n")
    assert open(changed, "rb").read() != next(iter(seed.values())) and wishes_2.exists()

    # a child forked before the build finished gets it in its exchange folder
    wishes_3 = tmp_path / "child3" / triton_seed.WISHES
    wishes_3.parent.mkdir()
    assert triton_seed.install_build_hook(tmp_path / "cache3", wishes_3)
    assert triton_seed.plant(seed, wishes_3.parent) == 1
    served_before = triton_seed.COUNTS["served"]
    late = _triton_build("answer", tmp_path / "build4", source)
    assert open(late, "rb").read() == next(iter(seed.values())) and triton_seed.COUNTS["served"] == served_before + 1


def test_wishes_are_checked_field_by_field(tmp_path):
    good = {"name": "__triton_launcher", "src": "int x;", "library_dirs": ["/usr/lib"], "include_dirs": [],
            "libraries": ["cuda"]}
    path = tmp_path / triton_seed.WISHES
    bad = [{**good, "name": "../x"}, {**good, "src": 3}, {**good, "libraries": "cuda"},
           {**good, "suffix": ".sh"}, {**good, "suffix": ".cpp"}, "not a dict", {**good, "include_dirs": [1]}]
    path.write_text(json.dumps(bad + [good, good]))
    wishes = triton_seed.wanted(path, known=set())
    assert len(wishes) == 1 and wishes[0]["key"] == triton_seed.build_key(good)
    assert triton_seed.wanted(path, known={wishes[0]["key"]}) == []
    path.write_text("{not json")
    assert triton_seed.wanted(path, known=set()) == []
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert triton_seed.wanted(link, known=set()) == []


@needs_cc
def test_the_zygote_builds_a_sandboxed_childs_wishes_and_keeps_only_what_it_asked_for(tmp_path, monkeypatch):
    from kernelrag.verify import zygote

    monkeypatch.setattr(zygote, "_isolate", lambda request: None)    # the namespaces are tested elsewhere
    monkeypatch.setattr(zygote, "_SEED", {})
    child = tmp_path / "child"
    child.mkdir()
    wish = {"name": "answer", "src": "int kernelrag_answer(void) { return 42; }\n", "library_dirs": [],
            "include_dirs": [], "libraries": []}
    (child / triton_seed.WISHES).write_text(json.dumps([wish]))
    zygote._build_wishes({"cwd": str(child), "base": str(tmp_path), "switch_uid": False, "tmp_bytes": 1 << 20})
    (pid, (folder, wishes, _)), = zygote._BUILDERS.items()
    os.waitpid(pid, 0)
    zygote._harvest(pid)
    assert list(zygote._SEED) == [f"{triton_seed.BUILDS}/{triton_seed.build_key(wish)}.so"]
    assert not os.path.exists(folder)
    zygote._build_wishes({"cwd": str(child), "base": str(tmp_path), "switch_uid": False, "tmp_bytes": 1 << 20})
    assert not zygote._BUILDERS                       # already held: no second build
