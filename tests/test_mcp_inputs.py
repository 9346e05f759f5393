"""MCP inputs are untrusted: size caps, unknown arguments refused, paths only under the
input folders, and nothing of a file outside them echoed back."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from test_mcp import CALL_TIMEOUT_S, KERNEL, REPO, TASK, server_env, text_of

SECRET = "top-secret-line-42"


def _session(home: Path, work, roots: Path):
    env = {**server_env(home), "KERNELRAG_INPUT_ROOTS": str(roots)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "kernelrag", "mcp"], env=env, cwd=str(REPO))

    async def main():
        with open(home.parent / "mcp-server.stderr", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session:
                    await session.initialize()
                    return await work(session)

    return anyio.run(main)


def test_hostile_arguments_are_refused_with_a_clear_error(kernelrag_home, tmp_path):
    roots = tmp_path / "allowed"
    roots.mkdir()
    (roots / "task.py").write_text(TASK.read_text())
    outside = tmp_path / "private.py"
    outside.write_text(f"# {SECRET}\nnot python (\n")
    (roots / "link.py").symlink_to(outside)            # a link inside that points outside
    huge = "x" * 1_100_000

    async def work(session):
        call = session.call_tool
        return {
            "outside": await call("verify_kernel", {"task": str(outside), "candidate": KERNEL.read_text()}),
            "link": await call("verify_kernel", {"task": str(roots / "link.py"), "candidate": KERNEL.read_text()}),
            "cand_outside": await call("verify_kernel", {"task": str(roots / "task.py"), "candidate": str(outside)}),
            "gen_outside": await call("generate_kernel", {"task": str(outside), "device": "cpu"}),
            "big_source": await call("verify_kernel", {"task": TASK.read_text(), "candidate": huge}),
            "unknown_arg": await call("get_skill", {"name": "relu", "verbose": True}),
            "long_name": await call("get_skill", {"name": "n" * 300}),
            "big_gpu": await call("record_outcome", {"pattern": "relu", "transformations": ["tiling"],
                                                     "gpu": huge, "outcome": "success"}),
            "big_id": await call("record_outcome", {"pattern": "relu", "transformations": [huge],
                                                    "gpu": "cpu", "outcome": "success"}),
            "big_dtype": await call("record_outcome", {"pattern": "relu", "transformations": ["tiling"],
                                                       "gpu": "cpu", "outcome": "success", "dtype": huge}),
            "missing_py": await call("suggest_transformations", {"task_or_pattern": "/no/such/task.py"}),
            "missing_dir": await call("suggest_transformations", {"task_or_pattern": "no/such/task"}),
            "inside": await call("suggest_transformations", {"task_or_pattern": str(roots / "task.py")}),
        }

    out = _session(kernelrag_home, work, roots)
    inside = out.pop("inside")
    assert not inside.is_error and inside.structured_content["pattern"] == "relu"
    for name, result in out.items():
        assert result.is_error, name
        assert SECRET not in text_of(result), name
    for name in ("outside", "link", "cand_outside", "gen_outside"):
        assert "outside the folders" in text_of(out[name]), (name, text_of(out[name]))
    assert "1048576" in text_of(out["big_source"])
    assert "does not take argument(s) 'verbose'" in text_of(out["unknown_arg"])
    assert "name" in text_of(out["long_name"]) and "200" in text_of(out["long_name"])
    for name in ("big_gpu", "big_id", "big_dtype"):
        assert "at most" in text_of(out[name]), text_of(out[name])
    for name in ("missing_py", "missing_dir"):
        assert "does not exist" in text_of(out[name]), text_of(out[name])
    graph = kernelrag_home / "graph.json"
    assert not graph.exists() or huge not in graph.read_text()
    assert not graph.exists() or len(json.dumps(json.loads(graph.read_text()))) < 5_000_000
