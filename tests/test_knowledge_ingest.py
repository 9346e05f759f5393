"""Ingest under hostile input: bad entries are named one line each and the rest is
ingested; a busy store lock times out with its name; a prune with a missing path
deletes nothing; a home that cannot be written gives one line, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrag.config import load_settings
from kernelrag.errors import StoreError
from kernelrag.knowledge.ingest import collect
from kernelrag.knowledge.store import KnowledgeStore

ROOT = Path(__file__).resolve().parents[1]
NOTE = "# Swizzling\n\nXOR swizzling spreads a tile's columns over the 32 shared-memory banks.\n"


def _cli(args: list[str], home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERNELRAG_HOME": str(home), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "kernelrag", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def test_loops_pipes_and_dangling_links_are_named_and_the_rest_ingested(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text(NOTE)
    (root / "loop.md").symlink_to("loop.md")
    (root / "dangling.md").symlink_to("nowhere.md")
    os.mkfifo(root / "pipe.md")                    # opening it would block until a writer came
    (root / "sub").mkdir()
    (root / "sub" / "up").symlink_to("..")         # a folder loop: not descended into
    done = _cli(["ingest", str(root), "--no-progress"], tmp_path / "home")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3, done.stdout
    assert any("loop.md: symlink loop" in e for e in errors)
    assert any("dangling.md: broken symlink" in e for e in errors)
    assert any("pipe.md: a named pipe" in e for e in errors)
    assert "1 ingested" in done.stdout


def test_an_unreadable_folder_is_one_error_line(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    (root / "locked").mkdir(parents=True)
    (root / "locked" / "inside.md").write_text(NOTE)
    (root / "open.md").write_text(NOTE)
    if os.geteuid() == 0:             # root reads any folder: make the walk see what a user would
        real = os.scandir

        def scandir(path="."):
            if Path(path) == root / "locked":
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)
    else:
        (root / "locked").chmod(0)
    try:
        files, missing, bad = collect([root])
    finally:
        (root / "locked").chmod(0o755)
    assert [p.name for p, _ in files] == ["open.md"] and not missing
    assert len(bad) == 1 and bad[0][0].endswith("locked") and "cannot read folder" in bad[0][1]


def test_a_busy_store_lock_times_out_with_the_lock_named(tmp_path):
    settings = load_settings(home=tmp_path / "home", chroma_url="", lock_timeout_s=0.2)
    store = KnowledgeStore(settings)
    lock_file = tmp_path / "home" / "locks" / f"{store.store_key}.lock"
    lock_file.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from filelock import FileLock\n"
        f"lock = FileLock({str(lock_file)!r}); lock.acquire(); print('held', flush=True); time.sleep(120)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (tmp_path / "a.md").write_text(NOTE)
        with pytest.raises(StoreError, match="busy.*" + str(lock_file).replace(".", r"\.")):
            store.ingest([tmp_path / "a.md"], progress=False)
    finally:
        holder.kill()
        holder.wait()


def test_prune_with_a_missing_path_deletes_nothing(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.md").write_text(NOTE)
    (docs / "gone.md").write_text(NOTE.replace("Swizzling", "Padding"))
    store = KnowledgeStore(load_settings(home=tmp_path / "home", chroma_url=""))
    assert store.ingest([docs], progress=False).files_ingested == 2
    before = store.count()
    (docs / "gone.md").unlink()
    report = store.ingest([docs, tmp_path / "typo"], prune=True, progress=False)
    assert not report.ok and report.files_removed == 0 and store.count() == before
    assert [e.path for e in report.errors] == [str(tmp_path / "typo")]
    assert "nothing was pruned" in report.errors[0].reason
    report = store.ingest([docs], prune=True, progress=False)        # the same prune, spelled right
    assert report.ok and report.files_removed == 1 and store.count() < before


def test_a_home_that_cannot_be_written_gives_one_line(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "a.md").write_text(NOTE)
    done = _cli(["ingest", str(tmp_path / "a.md"), "--no-progress"], tmp_path / "file" / "home", timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "KERNELRAG_HOME" in done.stderr
