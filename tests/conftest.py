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
