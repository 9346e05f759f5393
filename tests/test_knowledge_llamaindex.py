"""kernelrag through llama-index's own interfaces: a BaseRetriever whose nodes carry
kernelrag's citations, and FunctionTools an agent calls. No LLM involved."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.tools import FunctionTool

from kernelrag.api import KernelRAG
from kernelrag.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "tests" / "fixtures" / "knowledge" / "docs"
TASK = REPO / "tests" / "fixtures" / "ui" / "relu_task.py"
KERNEL = REPO / "tests" / "fixtures" / "ui" / "relu_kernel.py"


@pytest.fixture(scope="module")
def kr(tmp_path_factory):
    from kernelrag.config import load_settings

    kr = KernelRAG(settings=load_settings(home=tmp_path_factory.mktemp("home"), chroma_url="",
                                          input_roots=str(REPO)))
    assert kr.store.ingest([DOCS], progress=False).ok
    return kr


def test_the_retriever_is_a_llama_index_retriever_with_citations(kr):
    retriever = kr.as_retriever(k=3)
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve("padding a shared memory tile to avoid bank conflicts")
    assert nodes and len(nodes) <= 3 and all(isinstance(n, NodeWithScore) for n in nodes)
    first = nodes[0]
    assert first.node.metadata["citation"].startswith("[1] ") and first.node.metadata["number"] == 1
    assert first.node.metadata["source"].endswith(".md") and first.score > 0
    hits = kr.store.search("padding a shared memory tile to avoid bank conflicts", k=3)
    assert [n.node.node_id for n in nodes] == [h.chunk_id for h in hits]
    assert first.node.get_content() == hits[0].text and first.node.metadata["citation"] == f"[1] {hits[0].citation()}"
    assert retriever.retrieve(QueryBundle("bank conflicts"))          # the QueryBundle form too
    with pytest.raises(ConfigError):
        kr.as_retriever(mode="fuzzy")


def test_tools_are_function_tools_an_agent_can_call(kr):
    tools = {t.metadata.name: t for t in kr.as_tools()}
    assert set(tools) == {"search_docs", "suggest_transformations", "find_skills", "verify_kernel",
                          "generate_kernel"}
    assert all(isinstance(t, FunctionTool) and t.metadata.description for t in tools.values())
    assert "query" in tools["search_docs"].metadata.fn_schema.model_json_schema()["properties"]

    passages = json.loads(tools["search_docs"].call(query="bank conflicts padding", k=2).content)
    assert len(passages) == 2 and passages[0]["citation"].startswith("[1] ")
    kr.record_outcome("softmax[dim=-1]", ["online_softmax"], "cpu", "success")
    suggested = json.loads(tools["suggest_transformations"].call(task_or_pattern="softmax[dim=-1]").content)
    assert suggested["pattern"] == "softmax[dim=-1]" and suggested["transformations"]
    skills = json.loads(tools["find_skills"].call(task_or_pattern=str(TASK)).content)
    assert skills[0]["name"] == "relu"
    verdict = json.loads(tools["verify_kernel"].call(task=str(TASK), candidate=KERNEL.read_text(),
                                                     device="cpu").content)
    assert verdict["ok"] and verdict["status"] == "correct" and "no time measured" in verdict["summary"]
    with pytest.raises(ConfigError, match="outside the folders"):
        tools["verify_kernel"].call(task="/etc/hostname", candidate=KERNEL.read_text())


@pytest.mark.slow
def test_the_generate_tool_returns_a_verified_kernel(kr):
    tool = {t.metadata.name: t for t in kr.as_tools()}["generate_kernel"]
    out = json.loads(tool.call(task=TASK.read_text(), max_rounds=2, device="cpu").content)
    assert out["ok"] and "class ModelNew" in out["source"]
