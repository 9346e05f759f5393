"""What an install puts in site-packages: every kernelrag package, the UI as kernelrag.ui,
no generic top-level module, and version floors that are exact lower bounds."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_is_installed_and_the_ui_is_kernelrag_ui():
    tool = PROJECT["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kernelrag").rglob("__init__.py")}
    assert set(tool["packages"]) == found | {"kernelrag.ui", "kernelrag.memory.data"}     # data: the vocabulary
    assert tool["package-data"]["kernelrag.memory.data"] == ["*.toml"]
    assert tool["package-dir"] == {"kernelrag.ui": "ui"}
    assert all(p == "kernelrag" or p.startswith("kernelrag.") for p in tool["packages"])


def test_kernelrag_ui_imports_from_a_source_checkout():
    import kernelrag.ui.render

    assert Path(kernelrag.ui.render.__file__).resolve() == ROOT / "ui" / "render.py"


def test_floors_name_the_apis_used():
    deps = {re.split(r"[<>=\[]", d)[0]: d for d in PROJECT["project"]["dependencies"]}
    assert deps["mcp"] == "mcp>=2.0.0" and deps["gradio"] == "gradio>=6.0.0"
    assert int(PROJECT["build-system"]["requires"][0].split(">=")[1]) >= 77     # SPDX license string
    run = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/floors install" in run and "bash .ci/floors test" in run     # CI checks the floors
    assert "PYTHON=$(PYTHON) bash .ci/floors" in (ROOT / "Makefile").read_text()   # and so does make floors
