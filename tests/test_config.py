import pytest

from kernelrag.config import load_settings
from kernelrag.errors import ConfigError


def test_precedence_defaults_file_env_args(tmp_path, monkeypatch, kernelrag_home):
    monkeypatch.chdir(tmp_path)
    assert load_settings().search_k == 5
    (tmp_path / "kernelrag.toml").write_text("search_k = 7\nllm_model = 'from-file'\n")
    s = load_settings()
    assert (s.search_k, s.llm_model) == (7, "from-file")
    monkeypatch.setenv("KERNELRAG_SEARCH_K", "9")
    assert load_settings().search_k == 9
    assert load_settings(search_k=11).search_k == 11
    assert load_settings(search_k=None).search_k == 9
    assert load_settings().home == kernelrag_home


def test_unknown_keys_and_bad_values_are_rejected(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernelrag.toml").write_text("serch_k = 3\n")
    with pytest.raises(ConfigError, match="unknown setting 'serch_k'.*valid settings"):
        load_settings()
    (tmp_path / "kernelrag.toml").unlink()
    monkeypatch.setenv("KERNELRAG_SEARCH_K", "many")
    with pytest.raises(ConfigError, match="'many'"):
        load_settings()


def test_api_key_is_never_shown(monkeypatch):
    monkeypatch.setenv("KERNELRAG_LLM_API_KEY", "sk-secret")
    s = load_settings()
    assert s.llm_api_key == "sk-secret"
    assert "sk-secret" not in repr(s)
    assert "sk-secret" not in str(s.public_dict())
