"""The MCP server, driven by a real MCP client over stdio (`python -m kernelrag mcp`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from conftest import copy_ui_docs_home
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "ui"
TASK = FIXTURES / "relu_task.py"
KERNEL = FIXTURES / "relu_kernel.py"
TOOLS = {"search_docs", "suggest_transformations", "find_skills", "get_skill", "verify_kernel",
         "generate_kernel", "record_outcome"}
CALL_TIMEOUT_S = 600          # a limit on waiting, not an assertion about speed


def server_env(home: Path) -> dict[str, str]:
    return {"KERNELRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "ANONYMIZED_TELEMETRY": "False", "PYTHONPATH": str(REPO)}


def with_session(home: Path, work) -> object:
    """Start the server as a subprocess, open a client session, run ``work(session)``."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "kernelrag", "mcp"],
                                   env=server_env(home), cwd=str(REPO))

    async def main():
        with open(home.parent / "mcp-server.stderr", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session:
                    await session.initialize()
                    return await work(session)

    return anyio.run(main)


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def test_lists_the_tools_with_typed_inputs_and_outputs(kernelrag_home):
    async def work(session):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in with_session(kernelrag_home, work)}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description, tool.name
        assert tool.output_schema and tool.output_schema.get("type") == "object", tool.name
    assert tools["verify_kernel"].input_schema["required"] == ["task", "candidate"]
    assert "ok" in tools["verify_kernel"].output_schema["properties"]
    outcome = tools["record_outcome"].input_schema["properties"]["outcome"]
    assert "success" in outcome["enum"]


def test_failures_come_back_as_tool_errors_and_the_server_keeps_serving(kernelrag_home):
    async def work(session):
        unknown_skill = await session.call_tool("get_skill", {"name": "no_such_skill"})
        missing_task = await session.call_tool("verify_kernel", {"task": "/nonexistent/task.py",
                                                                 "candidate": KERNEL.read_text()})
        bad_outcome = await session.call_tool("record_outcome", {"pattern": "relu", "gpu": "cpu",
                                                                 "transformations": ["tiling"],
                                                                 "outcome": "great"})
        bad_id = await session.call_tool("record_outcome", {"pattern": "relu", "gpu": "cpu",
                                                            "transformations": ["warp_magic"],
                                                            "outcome": "success"})
        still_alive = await session.call_tool("get_skill", {"name": "relu"})
        return unknown_skill, missing_task, bad_outcome, bad_id, still_alive

    unknown_skill, missing_task, bad_outcome, bad_id, still_alive = with_session(kernelrag_home, work)
    assert unknown_skill.is_error and "no skill named 'no_such_skill'" in text_of(unknown_skill)
    assert missing_task.is_error and "/nonexistent/task.py" in text_of(missing_task)
    assert "does not exist" in text_of(missing_task)
    assert bad_outcome.is_error and "outcome" in text_of(bad_outcome)
    assert bad_id.is_error and "warp_magic" in text_of(bad_id) and "valid ids" in text_of(bad_id)
    assert not still_alive.is_error
    assert still_alive.structured_content["name"] == "relu"
    assert "@triton.jit" in still_alive.structured_content["kernel_source"]


@pytest.mark.slow
def test_every_tool_over_stdio(kernelrag_home, ui_docs_home):
    copy_ui_docs_home(ui_docs_home, kernelrag_home)          # FIXTURES/docs, ingested by `kernelrag ingest`
    wrong_kernel = KERNEL.read_text().replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0) + 1.0")
    progress: list[tuple] = []

    async def on_progress(done, total, message):
        progress.append((done, total, message))

    async def work(session):
        out = {}
        call = session.call_tool
        out["search"] = await call("search_docs", {"query": "padding a shared memory tile bank conflicts", "k": 3})
        out["find"] = await call("find_skills", {"task_or_pattern": "relu", "k": 3})
        out["skill"] = await call("get_skill", {"name": "relu"})
        out["verify_ok"] = await call("verify_kernel", {"task": str(TASK), "candidate": KERNEL.read_text(),
                                                        "device": "cpu"})
        out["verify_bad"] = await call("verify_kernel", {"task": TASK.read_text(), "candidate": wrong_kernel,
                                                         "device": "cpu"})
        out["generate"] = await call("generate_kernel", {"task": TASK.read_text(), "device": "cpu",
                                                         "max_rounds": 2}, progress_callback=on_progress)
        out["record"] = await call("record_outcome", {"pattern": "relu", "transformations": ["tiling"],
                                                      "gpu": "NVIDIA H200", "outcome": "success",
                                                      "speedup_vs_eager": 1.4, "detail": "recorded by a test"})
        out["suggest"] = await call("suggest_transformations", {"task_or_pattern": str(TASK),
                                                                "gpu": "NVIDIA H200"})
        return out

    out = with_session(kernelrag_home, work)
    for name, result in out.items():
        assert not result.is_error, f"{name}: {text_of(result)}"
    data = {name: result.structured_content for name, result in out.items()}

    passages = data["search"]["passages"]
    assert passages and passages[0]["citation"]["number"] == 1
    assert passages[0]["citation"]["source"].endswith("bank-conflicts.md")
    assert any(p["citation"]["section"].endswith("Padding") for p in passages)
    assert passages[0]["citation"]["label"].startswith("[1] ")

    assert data["find"]["skills"][0]["name"] == "relu"
    assert data["skill"]["pattern"] == "relu" and "@triton.jit" in data["skill"]["kernel_source"]

    ok, bad = data["verify_ok"], data["verify_bad"]
    assert ok["ok"] and ok["status"] == "correct" and ok["device"] == "cpu"
    assert not ok["timed"] and ok["kernel_ms"] is None and "no time measured" in ok["summary"]
    assert all(c["passed"] for c in ok["checks"]) and ok["checks"]
    assert not bad["ok"] and bad["status"] == "incorrect" and bad["mismatch_count"] > 0
    assert "Mismatch" in bad["feedback"]

    gen = data["generate"]
    assert gen["ok"] and gen["pattern"] == "relu" and "class ModelNew" in gen["source"]
    assert gen["rounds"][-1]["verdict"]["status"] == "correct"
    assert gen["write_back"]["log_path"]
    assert progress and progress[-1][0] == len(gen["rounds"]) and "correct" in progress[-1][2]

    assert data["record"]["rid"] and data["record"]["outcome"] == "success"
    suggest = data["suggest"]            # the outcome just recorded is now evidence
    assert suggest["pattern"] == "relu"
    tiling = [t for t in suggest["transformations"] if t["id"] == "tiling"]
    assert tiling and any("NVIDIA H200" in line and "1.40x eager" in line for line in tiling[0]["evidence"])


def test_streamable_http_transport_serves_the_same_tools(kernelrag_home, tmp_path):
    import socket
    import time

    from mcp.client.streamable_http import streamable_http_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **server_env(kernelrag_home)}
    with open(tmp_path / "mcp-http.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kernelrag", "mcp", "--transport", "http",
                                 "--port", str(port)], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    async def main():
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                names = {t.name for t in (await session.list_tools()).tools}
                return names, await session.call_tool("get_skill", {"name": "softmax_online"})

    try:
        deadline = time.monotonic() + 120          # a limit on waiting for the server to listen
        while True:
            assert proc.poll() is None, (tmp_path / "mcp-http.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server never listened"
                time.sleep(0.3)
        names, skill = anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert names == TOOLS
    assert not skill.is_error and skill.structured_content["pattern"] == "softmax[dim=-1]"
