"""The generate loop end to end: the real verifier (CPU, Triton interpreter), the real
skill library, graph and knowledge store, and a real local OpenAI-compatible server."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json
from pathlib import Path

import pytest

from kernelrag.api import KernelRAG
from kernelrag.export import read_log
from llm_server import FIXTURES, CannedLLM

TASK = FIXTURES / "task_relu_affine.py"
KEY = "sk-generate-test-key-do-not-echo-4242"


@pytest.fixture()
def empty_seed(tmp_path):
    """No seed skills: the LLM (or codegen) has to do the work; no memory hits from seeds."""
    path = tmp_path / "no-seed-skills"
    path.mkdir()
    return path


def make(empty_seed, server: CannedLLM | None = None, **extra) -> KernelRAG:
    llm = dict(llm_base_url=server.url, llm_api_key=KEY, llm_max_retries=0) if server else {}
    return KernelRAG(device="cpu", seed_skills_dir=empty_seed, **llm, **extra)


def everything_written(result, home: Path) -> str:
    """All text a run left behind: the result, the log, the skill folder, the graph."""
    parts = [json.dumps(result.to_dict(), default=str), Path(result.write_back.log_path).read_text()]
    for path in home.rglob("*"):
        if path.is_file() and path.suffix in (".toml", ".py", ".json", ".jsonl"):
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


@pytest.mark.slow
def test_feedback_reaches_the_next_prompt_and_the_loop_stops_on_success(empty_seed, kernelrag_home):
    script = ["relu_affine_compile_error.md", "relu_affine_wrong.md", "relu_affine_good.md", "relu_affine_good.md"]
    with CannedLLM(script) as server:
        kr = make(empty_seed, server)
        seen = []
        result = kr.generate(str(TASK), max_rounds=5, on_round=seen.append)
    statuses = [r.verdict.status if r.verdict else None for r in result.rounds]
    assert statuses == ["compile_error", "incorrect", "correct"], [r.feedback for r in result.rounds]
    assert result.ok and not result.from_memory and [r.index for r in seen] == [1, 2, 3]
    assert len(server.chat_requests) == 3                      # stopped at the first success
    # round 2's prompt carries round 1's compile error; round 3's carries round 2's mismatch
    first_feedback = result.rounds[0].feedback
    assert "invalid syntax" in first_feedback
    assert first_feedback in server.prompt_text(1)
    assert "invalid syntax" not in server.prompt_text(0)
    assert result.rounds[1].feedback in server.prompt_text(2)
    assert "out of tolerance" in server.prompt_text(2)
    # the prompt carries the task and the GPU figures
    assert "torch.relu(x) * 2.0 + 1.0" in server.prompt_text(0)
    assert "Target GPU" in server.prompt_text(0) and "no time measured" in server.prompt_text(0)
    # cost and result
    assert result.cost.llm_calls == 3 and result.cost.verify_calls == 3
    assert result.cost.prompt_tokens > 0 and result.cost.completion_tokens > 0
    assert "tl.maximum(x, 0.0) * 2.0 + 1.0" in result.source
    # write-back: learned skill (verified), graph evidence for all three rounds, log
    wb = result.write_back
    assert wb.skill and wb.skill_state == "verified" and (Path(wb.skill_path) / "kernel.py").read_text() == result.source
    assert wb.graph_records == 3
    run, rounds = read_log(Path(wb.log_path))
    assert run["outcome"] == "ok" and run["llm_calls"] == 3 and len(rounds) == 3
    assert rounds[1]["messages"][-1]["content"].count("invalid syntax") >= 1
    assert wb.ingested
    outcomes = sorted(f.outcome for f in kr.failures("relu>mul>add"))
    assert outcomes == ["compile_error", "incorrect"]
    assert KEY not in everything_written(result, kernelrag_home)

    # the same task again: answered from memory, no LLM call, one verification
    with CannedLLM([]) as idle:
        again = make(empty_seed, idle).generate(str(TASK), max_rounds=5)
    assert again.ok and again.from_memory
    assert again.cost.llm_calls == 0 and len(idle.chat_requests) == 0
    assert again.cost.verify_calls == 1 and len(again.rounds) == 1
    assert again.rounds[0].drafter == "memory" and again.rounds[0].skill == wb.skill
    # the dataset: one SFT pair (the memory hit repeats it), the 3-round transcript and the memory one
    out = kr.export()
    assert (out.sft_pairs, out.transcripts, out.runs_read) == (1, 2, 2)
    lines = [json.loads(line) for line in Path(out.path).read_text().splitlines()]
    long = max((x for x in lines if x["type"] == "transcript"), key=lambda x: len(x["messages"]))
    assert [m["role"] for m in long["messages"]] == ["system", "user"] + ["assistant", "user"] * 2 + ["assistant"]
    assert "invalid syntax" in long["messages"][3]["content"]
    assert [v["status"] for v in long["verdicts"]] == ["compile_error", "incorrect", "correct"]
    assert KEY not in Path(out.path).read_text()


@pytest.mark.slow
def test_answers_without_code_or_with_the_wrong_class_become_failed_rounds(empty_seed):
    with CannedLLM(["no_code.md", "wrong_class.md", "relu_affine_good.md"]) as server:
        result = make(empty_seed, server).generate(str(TASK), max_rounds=3)
    r1, r2, r3 = result.rounds
    assert r1.verdict is None and "no ```python code block" in r1.error and r1.draft == ""
    assert r2.verdict is None and "FusedReluAffine" in r2.error and "not class ModelNew" in r2.error
    assert r1.error in server.prompt_text(1) and r2.error in server.prompt_text(2)
    assert r3.ok and result.ok and result.cost.verify_calls == 1
    assert result.write_back.graph_records == 1          # only the verified round says anything


def test_the_prompt_starts_from_the_lowerings_composed_draft(empty_seed):
    with CannedLLM(["no_code.md", "no_code.md"]) as server:
        result = make(empty_seed, server).generate(str(TASK), max_rounds=2)
    assert result.cost.verify_calls == 0            # nothing to verify: the composed draft is only shown
    for k in (0, 1):                                # every round's prompt carries it
        prompt = server.prompt_text(k)
        assert "Starting point: the task composed from kernelrag's verified templates" in prompt
        assert "composed 1 kernel(s) from templates: elementwise: relu > mul > add" in prompt
        assert "def elementwise_0_kernel(" in prompt and "Every op of the task is placed in a kernel." in prompt


def test_endpoint_down_stops_the_run_with_the_reason(empty_seed):
    with CannedLLM([], fail_first=100) as server:
        result = make(empty_seed, server).generate(str(TASK), max_rounds=3)
    assert not result.ok and "LLM failed in round 1" in result.reason
    assert result.cost.verify_calls == 0 and result.rounds == []
    assert KEY not in json.dumps(result.to_dict(), default=str)
    run, rounds = read_log(Path(result.write_back.log_path))
    assert run["outcome"] == "failed" and rounds == []


@pytest.mark.slow
def test_a_failed_run_records_negative_evidence_and_its_log(empty_seed):
    with CannedLLM(["relu_affine_wrong.md", "relu_affine_wrong.md"]) as server:
        kr = make(empty_seed, server)
        result = kr.generate(str(TASK), max_rounds=2)
    assert not result.ok and len(result.rounds) == 2 and "incorrect" in result.reason
    assert result.write_back.skill is None and result.write_back.graph_records == 2
    # the same wrong kernel twice in one environment is one piece of evidence (keyed by its hash)
    assert [f.outcome for f in kr.failures("relu>mul>add")] == ["incorrect"]
    assert not kr.skills()
    run, rounds = read_log(Path(result.write_back.log_path))
    assert run["outcome"] == "failed" and [r["verdict"]["status"] for r in rounds] == ["incorrect", "incorrect"]
    exported = kr.export()
    assert exported.sft_pairs == 0 and exported.transcripts == 0 and exported.runs_skipped == 1
    with_failed = kr.export(include_failed=True)
    assert with_failed.sft_pairs == 0 and with_failed.transcripts == 1


@pytest.mark.slow
def test_offline_codegen_run_is_written_back_and_seen_by_the_next_retrieve(empty_seed):
    kr = make(empty_seed)
    before = kr.retrieve(str(TASK))
    assert not before.skills and not any(t.id == "elementwise_fusion" for t in before.transformations)
    result = kr.generate(str(TASK), max_rounds=2)
    assert result.ok and result.rounds[0].drafter == "offline" and result.cost.llm_calls == 0
    assert result.rounds[0].transformations == ["elementwise_fusion", "fp32_accumulation"]
    wb = result.write_back
    assert wb.skill == "learned_relu_mul_add" and wb.skill_state == "verified" and wb.ingested
    after = kr.retrieve(str(TASK))
    assert [s.name for s in after.skills][:1] == [wb.skill]
    fusion = next(t for t in after.transformations if t.id == "elementwise_fusion")
    assert fusion.score > 0 and "1/1 verified" in fusion.evidence[0]
    logs = [p for p in after.passages if p.citation.kind == "log"]
    assert logs and logs[0].citation.source.endswith(Path(wb.log_path).name)
    # the export holds the verified trajectory
    out = kr.export()
    lines = [json.loads(line) for line in Path(out.path).read_text().splitlines()]
    sft = next(x for x in lines if x["type"] == "sft")
    assert sft["completion"] == result.source and "relu(x) * 2.0 + 1.0" in sft["prompt"]
    transcript = next(x for x in lines if x["type"] == "transcript")
    assert [m["role"] for m in transcript["messages"]] == ["system", "user", "assistant"]
    assert transcript["verdicts"][0]["ok"] is True


@pytest.mark.slow
def test_exact_seed_skill_is_reverified_here_then_served_from_memory():
    from kernelrag.config import REPO_ROOT

    refs = sorted((REPO_ROOT / "skills").glob("*/relu/reference.py"))
    if not refs:
        pytest.skip("no relu seed skill")
    kr = KernelRAG(device="cpu")
    seed = kr.library.get("relu")
    result = kr.generate(str(refs[0]), max_rounds=2)
    assert result.ok and result.rounds[0].skill == "relu"
    if seed.review_state in ("verified", "approved") and not kr.library.is_stale(seed):
        assert result.write_back.skill is None       # the seed's measurement holds here: no copy
        assert any("no new skill written" in n for n in result.write_back.notes)
        return
    # measured elsewhere (or never): this verification is kept as a learned skill ...
    assert result.write_back.skill and result.write_back.skill_state == "verified"
    assert any("re-verified here" in n for n in result.write_back.notes)
    # ... so the same task is answered from memory next time: no drafting, one verification
    again = kr.generate(str(refs[0]), max_rounds=2)
    assert again.ok and again.from_memory and again.cost.llm_calls == 0 and again.cost.verify_calls == 1


def test_a_verdict_flagged_for_review_is_stored_as_needs_review(empty_seed):
    """Write-back logic alone, with a verdict as a GPU run would return it (50x: implausible)."""
    from kernelrag.generate import Parts, memory_skill, write_back
    from kernelrag.types import GenerateResult, Round
    from kernelrag.verify import Timing, Verdict

    kr = make(empty_seed)
    ctx = kr._retriever().context(str(TASK), passages=False)
    verdict = Verdict(ok=True, status="correct", reason="matches the reference", compiled=True, correct=True,
                      device="cuda", gpu="NVIDIA H200", timed=True, trials=5,
                      kernel_ms=Timing(0.002, 0.0001, 100), eager_ms=Timing(0.1, 0.001, 100),
                      speedup_vs_eager=50.0, speedup_vs_compile=45.0, frac_roofline=0.4)
    source = (FIXTURES / "relu_affine_good.md").read_text().split("```python\n")[1].split("```")[0]
    rounds = [Round(index=1, drafter="llm", draft=source, verdict=verdict, feedback=verdict.feedback(),
                    transformations=["elementwise_fusion"])]
    result = GenerateResult(task_path=str(TASK), pattern=ctx.signature, backend="triton", ok=True,
                            source=source, verdict=verdict, rounds=rounds, reason="verified in round 1")
    parts = Parts(settings=kr.settings, library=kr.library, retriever=None, graph=kr.graph)
    wb = write_back(parts, ctx, result, [{}], notes=[])
    assert wb.skill_state == "needs_review"
    assert any("needs_review" in n and "over 10x" in n for n in wb.notes)
    assert kr.skill(wb.skill).review_state == "needs_review"
    assert kr.skill(wb.skill).provenance["speedup_vs_eager"] == 50.0
    assert memory_skill(parts, ctx.pattern, "triton") is None     # never served from memory unreviewed
    assert wb.graph_records == 1 and not wb.ingested
    assert any("not ingested" in n for n in wb.notes)
    assert kr.export().sft_pairs == 0                              # not a verified trajectory yet


@pytest.mark.slow
def test_offline_generate_runs_where_only_torch_triton_and_networkx_exist(empty_seed):
    """The GPU machine has no chromadb, llama-index, openai or sentence-transformers."""
    import subprocess
    import sys

    from kernelrag.config import REPO_ROOT

    code = f"""
import json, sys
for name in ("chromadb", "llama_index", "openai", "sentence_transformers", "bm25s", "gradio", "mcp"):
    sys.modules[name] = None          # any import of these now fails
from kernelrag import KernelRAG
r = KernelRAG(device="cpu", seed_skills_dir={str(empty_seed)!r}).generate({str(TASK)!r}, max_rounds=2)
print(json.dumps({{"ok": r.ok, "skill": r.write_back.skill, "ingested": r.write_back.ingested,
                  "notes": r.write_back.notes, "graph": r.write_back.graph_records}}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["skill"] == "learned_relu_mul_add" and out["graph"] == 1
    assert not out["ingested"] and any("knowledge store is not available" in n for n in out["notes"])


def test_an_llm_drafted_candidate_is_never_run_without_os_isolation(empty_seed, monkeypatch):
    from kernelrag.errors import KernelRAGError

    monkeypatch.setenv("KERNELRAG_VERIFY_ISOLATION", "none")      # as on a machine without namespaces
    with CannedLLM(["relu_affine_good.md"]) as server:
        kr = make(empty_seed, server)
        with pytest.raises(KernelRAGError, match="OS isolation is required"):
            kr.generate(str(TASK), max_rounds=1, use_memory=False)
        assert len(server.chat_requests) == 1                    # drafted, then refused before running it


def test_a_verified_tunable_kernel_goes_through_the_configuration_search_on_a_gpu(kernelrag_home):
    """The loop's config search, with a stand-in for the GPU verifier (numbers made up here):
    the pinned winner, faster than the kernel as verified, becomes the last round."""
    from kernelrag.config import REPO_ROOT
    from kernelrag.generate import Loop, Parts
    from kernelrag.memory.tuning import source_configs
    from kernelrag.verify.verdict import Timing, Verdict

    class FakeSession:
        def __init__(self):
            self.pinned = []

        def verify_source(self, task_src, candidate, **options):
            configs = source_configs(candidate)
            ms = 5.0 if len(configs) > 1 else 1.0 + configs[0]["BLOCK_N"] / 256
            if len(configs) == 1:
                self.pinned.append(configs[0])
            return Verdict(ok=True, status="correct", reason="matches the reference", compiled=True, correct=True,
                           device="cuda", gpu="NVIDIA H200", timed=True, trials=5, torch_version="2.11.0",
                           triton_version="3.6.0", kernel_ms=Timing(ms, 0.01, 100), eager_ms=Timing(6.0, 0.01, 100))

    kr = KernelRAG(device="cpu", tune_top_k=3)
    retriever = kr._retriever()
    session = FakeSession()
    parts = Parts(settings=kr.settings, library=kr.library, retriever=retriever, graph=retriever.graph,
                  notes=[], verifier=session)
    task = REPO_ROOT / "skills" / "matmul_add_relu" / "linear_relu_tf32x3" / "reference.py"
    result = Loop(parts, task, max_rounds=1, write_back="evidence").run()
    assert result.ok and [r.drafter for r in result.rounds] == ["memory", "tune"], result.reason
    assert len(session.pinned) == 3                                   # tune_top_k verifications
    tuned = result.rounds[-1]
    assert result.source == tuned.draft and len(source_configs(tuned.draft)) == 1
    assert "autotuned_block_sizes" in tuned.transformations
    assert tuned.verdict.kernel_ms.median_ms == min(1.0 + c["BLOCK_N"] / 256 for c in session.pinned)
    stored = json.loads((kr.settings.cache_dir / "tuning.json").read_text())["entries"]
    assert len(stored) == 1 and len(next(iter(stored.values()))["results"]) == 3


def test_memory_passes_over_a_skill_whose_constructor_does_not_fit_the_task(kernelrag_home):
    from kernelrag.config import REPO_ROOT
    from kernelrag.generate import Parts, memory_skill
    from kernelrag.patterns import op_pattern
    from kernelrag.task import Task

    kr = KernelRAG(device="cpu")
    parts = Parts(settings=kr.settings, library=kr.library, retriever=None, graph=None)
    plain = Task.of(REPO_ROOT / "skills" / "cross_entropy" / "cross_entropy_online" / "reference.py")
    smoothed = Task.of(REPO_ROOT / "bench" / "tasks" / "cross_entropy_label_smoothing.py")
    assert op_pattern(smoothed).signature == op_pattern(plain).signature
    assert memory_skill(parts, op_pattern(plain), "triton", plain).name == "cross_entropy_online"
    assert memory_skill(parts, op_pattern(smoothed), "triton", smoothed) is None


def run_suite_task(name: str, session, max_rounds: int):
    """The offline generate loop on ``bench/tasks/<name>.py`` with ``session`` as its verifier."""
    from kernelrag.generate import Loop, Parts

    kr = KernelRAG(device="cpu")
    retriever = kr._retriever()
    parts = Parts(settings=kr.settings, library=kr.library, retriever=retriever, graph=retriever.graph,
                  notes=[], verifier=session)
    task = Path(__file__).parents[1] / "bench" / "tasks" / f"{name}.py"
    return Loop(parts, task, max_rounds=max_rounds, write_back="evidence", use_memory=False).run()


def test_a_kernel_slower_than_torch_compile_on_a_gpu_hands_the_next_round_to_the_next_variant(kernelrag_home):
    """A stand-in for the GPU verifier (numbers made up here): the NCHW implicit GEMM loses to
    torch.compile, so round 2 drafts the next variant the graph ranks (channels-last), which
    is faster and kept; both rounds are evidence."""
    from kernelrag.verify.verdict import Timing, Verdict

    class FakeSession:
        def __init__(self):
            self.seen = []

        def verify_source(self, task_src, candidate, **options):
            channels_last = "k_major(x.reshape" in candidate
            self.seen.append("channels_last" if channels_last else "implicit_gemm")
            ms = 2.0 if channels_last else 4.2
            return Verdict(ok=True, status="correct", reason="matches the reference", compiled=True, correct=True,
                           device="cuda", gpu="NVIDIA H200", timed=True, trials=5, torch_version="2.11.0",
                           triton_version="3.6.0", kernel_ms=Timing(ms, 0.01, 100), eager_ms=Timing(4.0, 0.01, 100),
                           compile_ms=Timing(3.5, 0.01, 100), speedup_vs_eager=4.0 / ms, speedup_vs_compile=3.5 / ms)

    session = FakeSession()
    result = run_suite_task("conv2d_bias_relu", session, max_rounds=3)
    assert session.seen == ["implicit_gemm", "channels_last"], result.reason     # stops once it beats compile
    assert result.ok and "k_major(x.reshape" in result.source and "round 2 of 2" in result.reason
    assert result.verdict.kernel_ms.median_ms == 2.0


def test_an_out_of_tolerance_candidate_hands_the_next_round_a_more_accurate_dot_path(kernelrag_home):
    """A stand-in for the GPU verifier (its verdicts made up here): the 3xTF32 GEMM misses the
    tolerance by two elements, so round 2 drafts the same kernels on the bf16x6 path, which passes."""
    from kernelrag.generate import missed_tolerance
    from kernelrag.verify.verdict import Verdict

    class FakeSession:
        def __init__(self):
            self.seen = []

        def verify_source(self, task_src, candidate, **options):
            accurate = '("bf16x6" if cuda' in candidate
            self.seen.append("bf16x6" if accurate else "tf32x3" if '("tf32x3" if cuda' in candidate else "other")
            if accurate:
                return Verdict(ok=True, status="correct", reason="matches the reference", compiled=True,
                               correct=True, device="cuda", gpu="NVIDIA H200", trials=7)
            return Verdict(ok=False, status="incorrect", reason="compare[t4 large]: 2/33554432 out of tolerance",
                           compiled=True, correct=False, device="cuda", gpu="NVIDIA H200", mismatch_count=2,
                           nonfinite_mismatch=0, max_abs_err=0.027)

    session = FakeSession()
    result = run_suite_task("qk_scale_mask_softmax", session, max_rounds=2)
    assert session.seen == ["tf32x3", "bf16x6"], result.reason
    assert result.ok and "round 2 of 2" in result.reason
    crashed = Verdict(ok=False, status="incorrect", reason="x", error="Traceback ...", mismatch_count=None)
    unwritten = Verdict(ok=False, status="incorrect", reason="x", mismatch_count=5, nonfinite_mismatch=5)
    assert not missed_tolerance(crashed) and not missed_tolerance(unwritten) and not missed_tolerance(None)


def test_a_composed_long_row_kernel_goes_through_the_configuration_search_on_a_gpu(kernelrag_home):
    """Layer norm over 32768 rows of 16384: after the seed skill, the pipelined rows, which list
    their launch configurations (stages and warps); on a GPU (a stand-in verifier, times made up
    here) the loop verifies the top ones and keeps the fastest, pinned, as its last round."""
    from kernelrag.memory.tuning import source_configs
    from kernelrag.verify.verdict import Timing, Verdict

    class FakeSession:
        def __init__(self):
            self.pinned = []

        def verify_source(self, task_src, candidate, **options):
            configs = source_configs(candidate)
            ms = 2.0 if configs else 2.5        # the seed skill and the row held in registers: slower
            if len(configs) == 1:
                self.pinned.append(configs[0])
                ms = 1.0 + configs[0]["num_warps"] / 64
            return Verdict(ok=True, status="correct", reason="matches the reference", compiled=True, correct=True,
                           device="cuda", gpu="NVIDIA H200", timed=True, trials=5, torch_version="2.11.0",
                           triton_version="3.6.0", kernel_ms=Timing(ms, 0.01, 100), eager_ms=Timing(3.0, 0.01, 100),
                           compile_ms=Timing(1.5, 0.01, 100), speedup_vs_eager=3.0 / ms, speedup_vs_compile=1.5 / ms)

    session = FakeSession()
    result = run_suite_task("layer_norm", session, max_rounds=3)
    assert result.ok and [r.drafter for r in result.rounds][-1] == "tune", result.reason
    assert len(session.pinned) == 4 and session.pinned[0] == {"STAGES": 3, "num_warps": 32}
    assert len(source_configs(result.source)) == 1
    assert result.verdict.kernel_ms.median_ms == min(1.0 + c["num_warps"] / 64 for c in session.pinned)
