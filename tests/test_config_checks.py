"""Settings: range checks blamed on the setting, the verifier's own variables allowed,
OPENAI_* fallbacks, and credentials in URLs scrubbed from every output."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelrag.cli import main
from kernelrag.config import load_settings, redact_url
from kernelrag.errors import ConfigError, LLMError
from llm_server import CannedLLM

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "tests" / "fixtures" / "ui" / "relu_task.py"


@pytest.mark.parametrize("name, value, valid", [("verify_timeout_s", "-5", "> 0"),
                                                ("max_file_bytes", "-1", ">= 1"),
                                                ("search_k", "-3", ">= 1 and <= 100")])
def test_out_of_range_values_name_the_setting_and_the_range(monkeypatch, name, value, valid):
    monkeypatch.setenv(f"KERNELRAG_{name.upper()}", value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    text = str(info.value)
    assert f"'{name}'" in text and f"$KERNELRAG_{name.upper()}" in text and f"valid range: {valid}" in text


def test_search_k_is_blamed_on_the_setting_not_a_flag(monkeypatch, capsys):
    monkeypatch.setenv("KERNELRAG_SEARCH_K", "-3")
    assert main(["search", "bank conflicts"]) == 2
    err = capsys.readouterr().err
    assert "search_k" in err and "-k -3" not in err


def test_the_verifiers_own_variables_are_not_unknown_settings(monkeypatch, capsys):
    monkeypatch.setenv("KERNELRAG_VERIFY_KEEP", "1")
    monkeypatch.setenv("KERNELRAG_VERIFY_NO_ZYGOTE", "1")
    monkeypatch.setenv("KERNELRAG_VERIFY_ISOLATION", "auto")
    load_settings()
    assert main(["skills", "list"]) == 0
    monkeypatch.setenv("KERNELRAG_VERIFY_KEPP", "1")            # a typo is still caught
    with pytest.raises(ConfigError, match="unknown setting 'verify_kepp'.*KERNELRAG_VERIFY_KEEP"):
        load_settings()


def test_openai_variables_are_fallbacks(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai.example/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-env")
    s = load_settings()
    assert (s.llm_base_url, s.llm_api_key, s.llm_enabled) == ("http://openai.example/v1", "sk-from-openai-env", True)
    monkeypatch.setenv("KERNELRAG_LLM_BASE_URL", "http://local:8000/v1")
    monkeypatch.setenv("KERNELRAG_LLM_API_KEY", "sk-kernelrag")
    s = load_settings()
    assert (s.llm_base_url, s.llm_api_key) == ("http://local:8000/v1", "sk-kernelrag")


def test_url_credentials_are_scrubbed_from_outputs_logs_and_the_store():
    assert redact_url("http://ann:pw-123@host:8000/v1") == "http://***@host:8000/v1"
    password = "pa55-never-shown"
    with CannedLLM(["relu_affine_wrong.md"], fail_first=0) as server:
        url = server.url.replace("http://", f"http://ann:{password}@")
        settings = load_settings(llm_base_url=url, llm_model="canned-model")
        assert password not in json.dumps(settings.public_dict()) and "***@" in settings.public_dict()["llm_base_url"]
        from kernelrag.api import KernelRAG

        kr = KernelRAG(settings=settings)
        result = kr.generate(str(TASK), max_rounds=1)
    log_text = Path(result.write_back.log_path).read_text()
    assert password not in log_text and password not in json.dumps(result.to_dict(), default=str)
    if kr.store is not None and result.write_back.ingested:
        assert all(password not in d for d in kr.store.records(include=("documents",))["documents"])
    with CannedLLM([], fail_first=10) as server:
        url = server.url.replace("http://", f"http://ann:{password}@")
        from kernelrag.draft.llm import LLMClient

        with pytest.raises(LLMError) as info:
            LLMClient(load_settings(llm_base_url=url, llm_max_retries=0)).chat([{"role": "user", "content": "q"}])
    assert password not in str(info.value) and "***@127.0.0.1" in str(info.value)
