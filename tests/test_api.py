"""The facade and its CLI commands (ask, generate, export) against the real parts."""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json
import subprocess
import sys
import textwrap

import pytest

from kernelrag.api import KernelRAG, _question_ops
from kernelrag.cli import main
from kernelrag.config import REPO_ROOT
from kernelrag.types import OFFLINE_LABEL
from llm_server import FIXTURES, CannedLLM

TASK = FIXTURES / "task_relu_affine.py"
KEY = "sk-api-test-key-never-shown-777"

DOCS = {
    "bank-conflicts.md": """\
        ---
        title: Shared-memory bank conflicts
        kind: guide
        tags: [shared-memory]
        ---
        # Shared-memory bank conflicts

        Shared memory is divided into 32 banks of 4 bytes. When two threads of a warp access
        different addresses in the same bank the accesses are serialised: a bank conflict.

        ## Padding and swizzling

        Pad each row of a shared-memory tile by one element, or XOR-swizzle the column index,
        so the threads of a warp reading a column hit 32 different banks.
        """,
    "coalescing.md": """\
        ---
        title: Coalesced global memory access
        kind: guide
        tags: [global-memory]
        ---
        # Coalesced global memory access

        A warp's loads coalesce into few transactions when consecutive threads read consecutive
        addresses. Strided access wastes DRAM bandwidth.
        """,
}


@pytest.fixture()
def docs(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


@pytest.fixture()
def kr(docs):
    k = KernelRAG(device="cpu")
    report = k.store.ingest([docs], progress=False)
    assert report.ok and report.files_ingested == 2
    return k


def test_ask_offline_returns_the_best_passages_clearly_labelled(kr):
    result = kr.ask("how do I avoid shared memory bank conflicts?", k=2)
    assert result.mode == "retrieved" and result.cost.llm_calls == 0
    assert result.answer.startswith(f"[{OFFLINE_LABEL}]")
    assert [c.number for c in result.citations] == [1, 2]
    assert result.citations[0].source.endswith("bank-conflicts.md")
    assert "[1] " in result.answer and "32 banks" in result.answer


def test_ask_with_an_llm_cites_the_retrieved_passages(kr, monkeypatch):
    with CannedLLM(["ask_answer.md"]) as server:
        k = KernelRAG(kr.settings, llm_base_url=server.url, llm_api_key=KEY)
        result = k.ask("how do I avoid shared memory bank conflicts?", k=2)
    assert result.mode == "llm" and result.answer == (FIXTURES / "ask_answer.md").read_text()
    assert result.cost.llm_calls == 1 and result.cost.completion_tokens > 0
    assert len(result.citations) == 2 and not result.notes      # [1] and [2] both exist
    prompt = server.prompt_text(0)
    assert result.citations[0].label() in prompt and "32 banks" in prompt
    assert "cite them inline as [n]" in prompt
    assert KEY not in json.dumps(result.to_dict())


def test_ask_notes_citations_that_point_nowhere(kr):
    with CannedLLM(["ask_answer.md"]) as server:
        result = KernelRAG(kr.settings, llm_base_url=server.url).ask("bank conflicts", k=1)
    assert any("[2]" in n for n in result.notes)


def test_ask_stream_offline_and_with_an_llm(kr):
    offline = "".join(kr.ask_stream("bank conflicts", k=2))
    assert offline.startswith(f"[{OFFLINE_LABEL}]") and "Padding" in offline
    with CannedLLM(["ask_answer.md"]) as server:
        chunks = list(KernelRAG(kr.settings, llm_base_url=server.url).ask_stream("bank conflicts", k=2))
    assert len(chunks) > 3 and server.chat_requests[0]["body"]["stream"] is True
    assert "".join(chunks) == (FIXTURES / "ask_answer.md").read_text()
    # the [n] of the stream are the passages search() returns for the same question
    labels = [p.citation.label() for p in kr.search("bank conflicts", k=2)]
    assert all(label in server.prompt_text(0) for label in labels)


def test_ask_brings_graph_evidence_and_skills_for_ops_in_the_question():
    kr = KernelRAG(device="cpu")
    kr.record_outcome("softmax[dim=-1]", ["online_softmax"], "NVIDIA H200", "success",
                      speedup_vs_eager=2.0, speedup_vs_compile=1.2, log_id="test-log")
    result = kr.ask("how should I write a fast softmax kernel?")
    assert "online_softmax" in [t.id for t in result.transformations]
    assert "online_softmax" in result.answer
    if any(s.pattern.startswith("softmax") for s in kr.skills()):
        assert any(s.pattern.startswith("softmax") for s in result.skills)


def test_question_ops_skips_everyday_words():
    assert _question_ops("fuse softmax after the matmul, then add a relu for all rows") == \
        ["softmax", "matmul", "relu"]
    assert _question_ops("what is a bank conflict") == []


def test_search_returns_numbered_passages(kr):
    hits = kr.search("coalesced loads of consecutive addresses", k=2)
    assert [p.number for p in hits] == [1, 2]
    assert hits[0].citation.source.endswith("coalescing.md") and hits[0].citation.kind == "guide"


def test_retrieve_a_seed_skill_task_finds_its_skill():
    refs = sorted((REPO_ROOT / "skills").glob("*/softmax_online/reference.py"))
    if not refs:
        pytest.skip("no softmax_online seed skill")
    ctx = KernelRAG(device="cpu").retrieve(str(refs[0]))
    assert ctx.pattern.known and ctx.signature.startswith("softmax")
    exact = {s.name for s in ctx.skills if s.similarity == 1.0}
    assert "softmax_online" in exact and all(s.pattern == ctx.signature for s in ctx.skills if s.name in exact)
    assert ctx.task_path == str(refs[0]) and "class Model" in ctx.task_source
    json.dumps(ctx.to_dict())          # plain data all the way down


def test_suggest_takes_a_signature_a_task_or_a_pattern():
    kr = KernelRAG(device="cpu")
    kr.record_outcome("relu>mul>add", ["elementwise_fusion"], "NVIDIA H200", "success", speedup_vs_eager=1.5)
    by_sig = kr.suggest("relu>mul>add")
    by_task = kr.suggest(str(TASK))
    by_pattern = kr.suggest(kr.pattern(str(TASK)))
    assert by_sig and by_sig == by_task == by_pattern and by_sig[0].id == "elementwise_fusion"
    assert "1/1 verified" in by_sig[0].evidence[0]


def test_skills_and_skill():
    kr = KernelRAG(device="cpu")
    refs = kr.skills()
    names = {s.name for s in refs}
    if not names:
        pytest.skip("no seed skills")
    name = sorted(names)[0]
    assert kr.skill(name).name == name and kr.skill(name).kernel_path.is_file()


@pytest.mark.slow
def test_verify_takes_paths_or_sources():
    good = (FIXTURES / "relu_affine_good.md").read_text().split("```python\n")[1].split("```")[0]
    kr = KernelRAG(device="cpu")
    assert kr.verify(str(TASK), good).ok
    wrong = good.replace("* 2.0 + 1.0", "* 2.0")
    verdict = kr.verify(TASK.read_text(), wrong)
    assert not verdict.ok and verdict.status == "incorrect"


@pytest.mark.slow
def test_verify_many_gives_one_verdict_per_candidate_in_order():
    good = (FIXTURES / "relu_affine_good.md").read_text().split("```python\n")[1].split("```")[0]
    wrong = good.replace("* 2.0 + 1.0", "* 2.0")
    verdicts = KernelRAG(device="cpu").verify_many(str(TASK), [good, wrong, good])
    assert [v.status for v in verdicts] == ["correct", "incorrect", "correct"]
    assert verdicts[0].seed == verdicts[1].seed == verdicts[2].seed


# --- CLI ------------------------------------------------------------------------------------
def test_cli_ask_json(kr, capsys, monkeypatch):
    code = main(["ask", "bank conflicts", "-k", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["mode"] == "retrieved" and out["citations"][0]["number"] == 1


def test_cli_generate_usage_errors(capsys):
    assert main(["generate", "no/such/task.py"]) == 2
    assert main(["generate", str(TASK), "--rounds", "0"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_generate_and_export(tmp_path, capsys):
    out_kernel = tmp_path / "kernel.py"
    code = main(["generate", str(TASK), "--device", "cpu", "--rounds", "2", "--out", str(out_kernel), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["ok"] and out_kernel.read_text() == result["source"]
    assert result["rounds"][-1]["verdict"]["ok"] is True
    dataset = tmp_path / "d.jsonl"
    assert main(["export", "--format", "jsonl", "--out", str(dataset)]) == 0
    assert "1 SFT pairs" in capsys.readouterr().out
    kinds = [json.loads(line)["type"] for line in dataset.read_text().splitlines()]
    assert sorted(kinds) == ["sft", "transcript"]


def test_import_kernelrag_and_the_facade_stay_light():
    code = ("import sys, kernelrag, kernelrag.api, kernelrag.types, kernelrag.generate, kernelrag.retrieve\n"
            "heavy = [m for m in ('torch', 'chromadb', 'openai', 'llama_index', 'triton') if m in sys.modules]\n"
            "print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
