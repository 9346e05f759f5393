"""The skill library, the TOML writer, the measurement script and the skills/graph CLI."""
from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelrag.cli import main as cli
from kernelrag.config import load_settings
from kernelrag.errors import SkillError
from kernelrag.memory.skills import SkillLibrary, alternative_transformations
from kernelrag.memory.tomlwrite import dumps, update_table

FIXTURES = Path(__file__).parent / "fixtures" / "skills"
HERE = {"torch": "2.11.0+cu128", "triton": "3.6.0", "gpu": "NVIDIA H200"}


@pytest.fixture
def seed(tmp_path, monkeypatch):
    """A writable copy of the fixture seed skills, used as settings.seed_skills_dir."""
    root = tmp_path / "seed"
    shutil.copytree(FIXTURES, root)
    monkeypatch.setenv("KERNELRAG_SEED_SKILLS_DIR", str(root))
    return root


@pytest.fixture
def lib(seed):
    return SkillLibrary(load_settings())


# --------------------------------------------------------------------------- TOML
def test_toml_round_trip():
    data = {"name": "x", "pattern": "matmul>add>relu", "n": 3, "ratio": 1.25, "big": 1e-07, "flag": True,
            "tricky": 'quote " backslash \\ newline \n tab \t bell \x07 unicode é',
            "list": ["a", "b"], "nested_list": [[1, 2], [3]], "inline": [{"a": 1, "b": "c"}],
            "shapes": {"M": 4096, "weird key": 1}, "review": {"state": "draft"},
            "provenance": {"gpu": "NVIDIA H200", "kernel_ms": 0.0123, "sub": {"deep": 1}}}
    text = dumps(data)
    assert tomllib.loads(text) == data
    assert "none" not in dumps({"a": None, "b": 1})


def test_update_table_keeps_the_rest_of_the_file():
    text = ('# header comment\nname = "s"\n\n[review]\nstate = "draft"  # by hand\nreviewer = "ann"\n\n'
            '[provenance]\ngpu = "old"\nstale_key = 1\n\n[shapes]\nN = 4  # rows\n')
    out = update_table(text, "provenance", {"gpu": "NVIDIA H200", "kernel_ms": 0.5}, replace=True)
    out = update_table(out, "review", {"state": "verified"})
    data = tomllib.loads(out)
    assert data["provenance"] == {"gpu": "NVIDIA H200", "kernel_ms": 0.5}
    assert data["review"] == {"state": "verified", "reviewer": "ann"}
    assert "# header comment" in out and "N = 4  # rows" in out
    added = update_table('name = "s"\n', "provenance", {"gpu": "g"}, replace=True)
    assert tomllib.loads(added) == {"name": "s", "provenance": {"gpu": "g"}}


# --------------------------------------------------------------------------- library
def test_list_get_and_problems(lib, seed):
    assert [s.name for s in lib.list()] == ["relu_fx", "softmax_fx"]
    relu = lib.get("relu_fx")
    assert (relu.pattern, relu.source, relu.review_state, relu.cpu_checkable) == ("relu", "seed", "verified", True)
    assert "tl.where" in relu.kernel_source() and "torch.relu" in relu.reference_source()
    assert alternative_transformations(lib.get("softmax_fx").alternatives()[0]) == ["online_softmax",
                                                                                    "one_row_per_program"]
    with pytest.raises(SkillError, match="did you mean relu_fx"):
        lib.get("relu_f")
    broken = seed / "relu" / "broken"
    broken.mkdir()
    (broken / "skill.toml").write_text('name = "broken"\npattern = "relu"\nbackend = "triton"\ncategory = "nonsense"\n')
    lib.refresh()
    assert any("reference.py is missing" in p for p in lib.problems)
    for name in ("reference.py", "kernel.py"):
        shutil.copy(seed / "relu" / "relu_fx" / name, broken / name)
    lib.refresh()
    assert [s.name for s in lib.list()] == ["relu_fx", "softmax_fx"]
    assert any("category = 'nonsense'" in p for p in lib.problems)


def test_find_ranks_by_pattern_similarity(lib):
    hits = lib.find(pattern="softmax[dim=-1]")
    assert hits[0].skill.name == "softmax_fx" and hits[0].score == 1.0
    assert all(h.skill.name != "relu_fx" for h in hits)      # no similarity at all
    assert lib.find(text="row softmax registers")[0].skill.name == "softmax_fx"
    assert [h.skill.name for h in lib.find(category="elementwise")] == ["relu_fx"]


def test_staleness(lib):
    relu, softmax = lib.get("relu_fx"), lib.get("softmax_fx")
    assert lib.is_stale(softmax, env=HERE) == "never measured"
    assert lib.is_stale(relu, env=HERE) is None
    assert lib.is_stale(relu, env=dict(HERE, torch="2.11.3")) is None          # same major.minor
    assert "torch 2.11.0+cu128" in lib.is_stale(relu, env=dict(HERE, torch="2.13.0"))
    assert "NVIDIA A100" in lib.is_stale(relu, env=dict(HERE, gpu="NVIDIA A100"))
    assert lib.is_stale(relu, env=dict(HERE, gpu=None)) is None               # no GPU here: not compared


def test_write_learned_and_review(lib, kernelrag_home):
    src = lib.get("softmax_fx")
    with pytest.raises(SkillError, match="is a seed skill"):
        lib.write_learned("softmax_fx", "softmax[dim=-1]", "k", "r")
    with pytest.raises(SkillError, match="unknown transformation"):
        lib.write_learned("mine", "softmax[dim=-1]", "k", "r", {"transformations": ["magic"]})
    skill = lib.write_learned("mine", "softmax[dim=-1]", src.kernel_source(), src.reference_source(),
                              {"transformations": ["online_softmax"], "summary": "learned softmax",
                               "shapes": {"ROWS": 32}})
    assert skill.source == "learned" and skill.review_state == "draft" and skill.category == "softmax"
    assert skill.path == kernelrag_home / "skills" / "softmax" / "mine"
    with pytest.raises(SkillError, match="exists"):
        lib.write_learned("mine", "softmax[dim=-1]", "k", "r")
    with pytest.raises(SkillError, match="only a verified skill can be approved"):
        lib.approve("mine")
    with pytest.raises(SkillError, match="only verified or approved"):
        lib.promote("mine")
    lib.record_measurement("mine", {"gpu": "NVIDIA H200", "date": "2025-01-02", "kernel_ms": 0.1}, "verified")
    assert lib.approve("mine").review_state == "approved"
    assert tomllib.loads(skill.toml_path.read_text())["review"]["state"] == "approved"
    dest = lib.promote("mine", dest=lib.seed_dir)
    assert dest == lib.seed_dir / "softmax" / "mine" and (dest / "kernel.py").is_file()
    assert lib.get("mine").source == "seed" and not skill.path.exists()


def test_seed_review_is_an_override_under_home(lib, seed, kernelrag_home):
    toml_before = (seed / "relu" / "relu_fx" / "skill.toml").read_text()
    assert lib.approve("relu_fx").review_state == "approved"
    assert (seed / "relu" / "relu_fx" / "skill.toml").read_text() == toml_before     # seed untouched
    assert json.loads((kernelrag_home / "skill_overrides.json").read_text())["relu_fx"]["state"] == "approved"
    assert SkillLibrary(load_settings()).get("relu_fx").review_state == "approved"
    assert lib.retire("relu_fx").review_state == "retired"
    assert "relu_fx" not in [s.name for s in lib.list(include_retired=False)]
    # a new measurement changes the file's state: the old override no longer applies
    lib.record_measurement("relu_fx", None, "needs_review")
    assert lib.get("relu_fx").review_state == "needs_review"


# --------------------------------------------------------------------------- measurement
def _verdict(ok=True, status="correct", kernel_ms=0.02, eager_ms=0.03, compile_ms=0.025, timed=True):
    t = lambda ms: SimpleNamespace(median_ms=ms, iqr_ms=ms / 20, trials=50) if ms else None  # noqa: E731
    return SimpleNamespace(
        ok=ok, status=status, reason="" if ok else "3 elements out of tolerance", timed=timed,
        kernel_ms=t(kernel_ms) if timed else None, eager_ms=t(eager_ms) if timed else None,
        compile_ms=t(compile_ms) if timed else None,
        speedup_vs_eager=eager_ms / kernel_ms if timed and ok else None,
        speedup_vs_compile=compile_ms / kernel_ms if timed and ok else None,
        gpu="NVIDIA H200", driver="570.1", torch_version="2.11.0", triton_version="3.6.0", device="cuda",
        trials=5, frac_roofline=0.7, achieved_gbps=3000.0, achieved_tflops=None)


def test_measure_records_provenance_and_evidence(lib, seed):
    from kernelrag.memory.graph import ReasoningGraph
    from kernelrag.bench.measure_skills import apply, measure

    calls = []

    def fake_verify(task, cand, **kw):        # stands in for the GPU verifier: numbers are made up here
        calls.append((Path(cand).name, kw["measure_time"]))
        return _verdict(kernel_ms=0.05) if "alternatives" in cand else _verdict()

    skill = lib.get("softmax_fx")
    result = measure(skill, fake_verify, device="cuda", timeout_s=60, trials=5, date="2025-02-03T04:05:06Z")
    assert calls == [("kernel.py", True), ("online_softmax.py", True)]
    assert result["state"] == "verified" and result["provenance"]["speedup_vs_eager"] == pytest.approx(1.5)
    main, alt = result["records"]
    assert (main["outcome"], main["variant"], main["skill"]) == ("success", "kernel", "softmax_fx")
    assert main["log_id"] == "seed-2025-02-03-softmax_fx" and main["regime"]["input_shapes"] == [[32, 200]]
    assert (alt["outcome"], alt["transformations"]) == ("slower", ["online_softmax", "one_row_per_program"])
    evidence = seed / "evidence.jsonl"
    apply(lib, result, evidence)
    apply(lib, result, evidence)                        # re-run the same day: replaced, not duplicated
    assert len(evidence.read_text().splitlines()) == 2
    measured = lib.get("softmax_fx")
    assert measured.review_state == "verified" and measured.provenance["gpu"] == "NVIDIA H200"
    assert measured.provenance["kernel_ms"] == 0.02 and measured.provenance["date"] == "2025-02-03T04:05:06Z"
    g = ReasoningGraph(load_settings())                 # the graph seeds from the evidence file
    assert g.suggest("softmax[dim=-1]")[0].log_ids == ["seed-2025-02-03-softmax_fx"]
    assert g.failures("softmax[dim=-1]")[0].outcome == "slower"

    failing = measure(skill, lambda *a, **k: _verdict(ok=False, status="incorrect"), device="cuda",
                      timeout_s=60, trials=5)
    assert failing["state"] == "needs_review" and failing["records"][0]["outcome"] == "incorrect"
    cpu = measure(skill, lambda *a, **k: _verdict(timed=False), device="cpu", timeout_s=60, trials=5)
    assert cpu["records"] == [] and cpu["state"] is None and cpu["provenance"] is None


class _FakeSession:
    """Stands in for kernelrag.verify.VerifySession: records the options and the calls."""

    def __init__(self, **options):
        self.options, self.calls = options, []

    def verify(self, task, cand, **kw):
        self.calls.append(Path(cand).parent.name)
        return _verdict()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def test_measure_cli_results_then_apply(lib, seed, tmp_path, monkeypatch):
    import kernelrag.bench.measure_skills as ms

    sessions = []
    monkeypatch.setattr(ms, "_session", lambda **kw: sessions.append(_FakeSession(**kw)) or sessions[-1])
    results = tmp_path / "results.jsonl"
    assert ms.main(["--device", "cuda", "--only", "relu_fx", "--results", str(results)]) == 0
    assert len(sessions) == 1 and sessions[0].options["device"] == "cuda"      # one session for the run
    assert sessions[0].options["compile_baseline"] == "cached"
    assert not (seed / "evidence.jsonl").exists()          # without --write nothing in skills/
    assert ms.main(["--apply", str(results)]) == 0
    assert json.loads((seed / "evidence.jsonl").read_text())["skill"] == "relu_fx"


def test_measure_cli_untimed_measures_only_skills_never_timed(lib, seed, monkeypatch, capsys):
    import kernelrag.bench.measure_skills as ms

    timed = {s.name for s in lib.list() if not ms.never_timed(s)}
    assert timed and timed != {s.name for s in lib.list()}       # the fixture has both kinds
    sessions = []
    monkeypatch.setattr(ms, "_session", lambda **kw: sessions.append(_FakeSession(**kw)) or sessions[-1])
    assert ms.main(["--device", "cuda", "--untimed", "--no-alternatives"]) == 0
    assert sessions[0].calls and not set(sessions[0].calls) & timed
    assert "never timed" in capsys.readouterr().out


@pytest.mark.slow
def test_measure_on_cpu_with_the_real_verifier(lib):
    verify = pytest.importorskip("kernelrag.verify").verify
    from kernelrag.bench.measure_skills import measure

    result = measure(lib.get("relu_fx"), verify, device="cpu", timeout_s=300, trials=2)
    assert result["ok"], result["summary"]
    assert result["records"] == [] and result["provenance"] is None


# --------------------------------------------------------------------------- CLI
def test_cli_skills(seed, capsys):
    assert cli(["skills", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["skills"]}
    assert rows["relu_fx"]["speedup_vs_eager"] == 1.2 and rows["softmax_fx"]["stale"] == "never measured"
    assert cli(["skills", "list"]) == 0
    out = capsys.readouterr().out
    assert "relu_fx" in out and "never" in out and "1.20x" in out
    assert cli(["skills", "show", "softmax_fx"]) == 0
    assert "one_row_per_program" in capsys.readouterr().out
    assert cli(["skills", "approve", "softmax_fx"]) == 2         # a draft cannot be approved
    assert "only a verified skill" in capsys.readouterr().err
    assert cli(["skills", "retire", "softmax_fx", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "retired"
    assert cli(["skills"]) == 2


def test_cli_graph(seed, tmp_path, capsys):
    from kernelrag.memory.graph import ReasoningGraph

    g = ReasoningGraph(load_settings())
    for i in range(3):
        g.record_outcome("softmax[dim=-1]", ["online_softmax"], "NVIDIA H200", "success",
                         speedup_vs_eager=2.0, log_id=f"run-{i}")
    task = Path(__file__).parent / "fixtures" / "tasks" / "softmax.py"
    assert cli(["graph", "suggest", str(task), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pattern"] == "softmax[dim=-1]" and data["suggestions"][0]["transformation"] == "online_softmax"
    assert data["skills"] == ["softmax_fx"]
    assert cli(["graph", "why", "softmax[dim=-1]", "online_softmax"]) == 0
    assert "run-0, run-1, run-2" in capsys.readouterr().out
    assert cli(["graph", "show"]) == 0
    assert "softmax[dim=-1]" in capsys.readouterr().out
    assert cli(["graph", "export", str(tmp_path / "g.dot")]) == 0
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    untraceable = Path(__file__).parent / "fixtures" / "tasks" / "untraceable.py"
    assert cli(["graph", "suggest", str(untraceable)]) == 1
    assert cli(["graph", "why", "softmax[dim=-1]", "nope"]) == 2


def test_measurement_near_the_roofline_goes_to_review():
    from kernelrag.memory.writeback import review_state

    at_limit = {"speedup_vs_eager": 1.0, "speedup_vs_compile": 1.3, "frac_roofline": 0.97}
    ordinary = {"speedup_vs_eager": 1.5, "speedup_vs_compile": 1.2, "frac_roofline": 0.6}
    flagged = review_state("draft", at_limit)
    assert flagged["state"] == "needs_review" and "roofline" in flagged["flags"][0]
    assert review_state("draft", ordinary) == {"state": "verified", "flags": []}
    assert review_state("approved", at_limit)["state"] == "approved"     # a person's approval stands
    assert review_state("draft", {**ordinary, "speedup_vs_eager": 12.0})["state"] == "needs_review"


def test_reverifying_a_learned_skill_applies_the_review_flags(lib):
    """``kernelrag skills verify`` records through memory.writeback: a flagged run goes to review."""
    from kernelrag.memory.writeback import record_verification

    src = lib.get("softmax_fx")
    lib.write_learned("mine", "softmax[dim=-1]", src.kernel_source(), src.reference_source(),
                      {"transformations": ["online_softmax"], "review_state": "verified"})
    note = record_verification(lib, lib.get("mine"), _verdict(kernel_ms=0.002, eager_ms=0.03))   # 15x
    mine = lib.get("mine")
    assert mine.review_state == "needs_review" and "needs_review" in note and "over 10x" in note
    assert tomllib.loads(mine.toml_path.read_text())["review"]["reasons"][0].startswith("speedup 15.0x")
    assert mine.provenance["speedup_vs_eager"] == pytest.approx(15.0)
    record_verification(lib, mine, _verdict())                                        # 1.5x: ordinary
    assert lib.get("mine").review_state == "verified"
    record_verification(lib, lib.get("mine"), _verdict(ok=False, status="incorrect"))
    assert lib.get("mine").review_state == "needs_review"


def test_measure_cli_measures_as_many_skills_at_once_as_the_session_has_workers(lib, seed, monkeypatch):
    """Every reference's baseline is prefetched, and the session's workers each take a skill."""
    import threading
    import time

    import kernelrag.bench.measure_skills as ms

    class Workers(_FakeSession):
        workers = 2

        def __init__(self, **options):
            super().__init__(**options)
            self.prefetched, self.running, self.most = [], 0, 0
            self.lock = threading.Lock()

        def prefetch(self, source):
            self.prefetched.append(source)

        def verify(self, task, cand, **kw):
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            time.sleep(0.2)
            with self.lock:
                self.running -= 1
            return super().verify(task, cand, **kw)

    sessions = []
    monkeypatch.setattr(ms, "_session", lambda **kw: sessions.append(Workers(**kw)) or sessions[-1])
    assert ms.main(["--device", "cuda", "--no-alternatives"]) == 0
    session = sessions[0]
    assert len(session.prefetched) == len(session.calls) == len(lib.list()) >= 2
    assert session.most == 2
