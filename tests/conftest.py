"""Shared test setup: every test gets its own KERNELRAG_HOME and runs offline."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


@pytest.fixture(autouse=True)
def kernelrag_home(tmp_path, monkeypatch):
    """Point all kernelrag state at a temp dir, and drop any user LLM settings."""
    home = tmp_path / "kernelrag-home"
    monkeypatch.setenv("KERNELRAG_HOME", str(home))
    for var in list(os.environ):
        if var.startswith("KERNELRAG_") and var not in {"KERNELRAG_HOME", "KERNELRAG_CHROMA_URL"}:
            monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return home


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def ui_docs_home(tmp_path_factory):
    """A KERNELRAG_HOME holding tests/fixtures/ui/docs, ingested once per run through the CLI
    (``python -m kernelrag ingest``: a fresh process loading the embedding model, ~12 s on two
    cores). The MCP and browser tests each copy it into their own home (``copy_ui_docs_home``)
    rather than each paying the same ingest; the store under it holds no path of its home."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    home = tmp_path_factory.mktemp("ui-docs") / "kernelrag-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELRAG_")}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    env.update(KERNELRAG_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               ANONYMIZED_TELEMETRY="False", GRADIO_ANALYTICS_ENABLED="False", PYTHONPATH=str(repo))
    ingest = subprocess.run([sys.executable, "-m", "kernelrag", "ingest", str(repo / "tests" / "fixtures" / "ui" / "docs")],
                            env=env, cwd=repo, capture_output=True, text=True, timeout=600)
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    return home


def copy_ui_docs_home(ingested, home) -> None:
    import shutil

    shutil.copytree(ingested, home, dirs_exist_ok=True)
