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
