"""The UI's event handlers over the real facade (no browser): streaming, errors, session settings."""
from __future__ import annotations

import logging
from pathlib import Path

from kernelrag.api import KernelRAG
from kernelrag.types import OFFLINE_LABEL
from llm_server import FIXTURES as LLM_FIXTURES
from llm_server import CannedLLM
from kernelrag.ui.handlers import Handlers, Session, mode_markdown

TASK = Path(__file__).parent / "fixtures" / "ui" / "relu_task.py"
KEY = "sk-ui-session-key-0123456789-never-on-disk"


def test_offline_chat_is_labelled_and_lists_no_sources_on_an_empty_store():
    h = Handlers(KernelRAG())
    steps = list(h.chat("how do I avoid shared-memory bank conflicts?", [], None))
    history, sources, cleared = steps[-1]
    assert history[0] == {"role": "user", "content": "how do I avoid shared-memory bank conflicts?"}
    assert OFFLINE_LABEL in history[-1]["content"] and "No passages found" in history[-1]["content"]
    assert sources.startswith("### Sources") and "ingest" in sources
    assert cleared == ""
    assert list(h.chat("   ", [], None))[-1][0] == []          # a blank question asks nothing


def test_llm_chat_streams_with_a_session_key_that_stays_in_memory(kernelrag_home, caplog):
    h = Handlers(KernelRAG())
    with CannedLLM(["ask_answer.md"], chunk_chars=9) as llm:
        session, message, key_field, mode = h.apply_settings(llm.url, "canned-model", KEY, "cpu", None)
        with caplog.at_level(logging.DEBUG):
            steps = list(h.chat("bank conflicts?", [], session))
        headers = {k.lower(): v for k, v in llm.chat_requests[0]["headers"].items()}
    answer = (LLM_FIXTURES / "ask_answer.md").read_text()
    assert steps[-1][0][-1]["content"].strip() == answer.strip()
    assert len([s for s in steps if s[0][-1]["content"] != "_searching..._"]) > 3   # arrived in pieces
    assert headers["authorization"] == f"Bearer {KEY}"
    assert key_field == "" and KEY not in message and KEY not in mode and "canned-model" in mode
    assert KEY not in caplog.text
    for path in kernelrag_home.rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path
    assert h._api(None).settings.llm_base_url is None          # other sessions stay offline
    assert "offline" in mode_markdown(h.api, None)


def test_a_failing_llm_is_an_error_message_not_a_crash():
    h = Handlers(KernelRAG())
    with CannedLLM([]) as llm:                                  # answers every request with HTTP 500
        session, *_ = h.apply_settings(llm.url, "canned-model", "", "auto", None)
        history = list(h.chat("bank conflicts?", [], session))[-1][0]
    assert history[-1]["content"].startswith("**Error:**") and llm.url in history[-1]["content"]


def test_bad_settings_are_refused_and_the_session_keeps_working():
    h = Handlers(KernelRAG())
    session, message, _, _ = h.apply_settings("ftp://example.org", "m", KEY, "cpu", None)
    assert message.startswith("**Error:**") and "http://" in message and KEY not in message
    assert session.api is None
    session, message, _, _ = h.apply_settings("", "", "", "tpu", session)
    assert message.startswith("**Error:**") and "tpu" in message
    session, message, _, mode = h.apply_settings("", "", "", "cpu", Session())
    assert "offline" in message.lower() and session.device == "cpu" and "`cpu`" in mode


def test_generate_reports_bad_input_as_errors():
    h = Handlers(KernelRAG())
    first = next(h.generate("", "triton", 2, True, None))
    assert first[0].startswith("**Error:**") and "Model" in first[0]
    steps = list(h.generate(TASK.read_text(), "tpu", 2, True, None))
    assert steps[-1][0].startswith("**Error:**") and "tpu" in steps[-1][0]


def test_suggestions_for_a_task_and_for_nonsense():
    h = Handlers(KernelRAG())
    assert "### Suggestions for `relu`" in h.suggest(TASK.read_text())
    broken = h.suggest("class Model(:\n    pass\n")
    assert broken.startswith("**Error:**") and "not valid Python" in broken
    assert "Paste or upload" in h.suggest("")


def test_load_task_reads_an_upload_and_reports_a_bad_one(tmp_path):
    h = Handlers(KernelRAG())
    code, status = h.load_task(str(TASK))
    assert "class Model" in code and "relu_task.py" in status
    _, status = h.load_task(str(tmp_path / "gone.py"))
    assert status.startswith("**Error:**")


def test_skills_tab_lists_shows_and_reviews(kernelrag_home):
    h = Handlers(KernelRAG())
    rows, pick, status = h.skills_table("relu", False)
    names = [r[0] for r in rows]
    assert "relu" in names and pick["choices"] and status == f"{len(rows)} skill(s)"
    detail, kernel, reference = h.show_skill("relu")
    assert "### relu" in detail and "@triton.jit" in kernel and "class Model" in reference

    state = h.api.skill("relu").review_state
    message, *_ = h.review("relu", "approve", "relu", False)
    if state in ("verified", "needs_review", "approved"):
        assert "**approved**" in message
    else:
        assert message.startswith("**Error:**") and "only a verified skill can be approved" in message

    message, rows, detail, _, _ = h.review("relu", "retire", "relu", False)
    assert "**retired**" in message and "relu" not in [r[0] for r in rows] and "**retired · " in detail
    assert (kernelrag_home / "skill_overrides.json").is_file()
    rows, _, _ = h.skills_table("relu", True)
    assert ["relu", "retired"] in [[r[0], r[4]] for r in rows]

    detail, kernel, _ = h.show_skill("no_such_skill")
    assert detail.startswith("**Error:**") and "no skill named" in detail and kernel == ""
    assert h.review(None, "retire", "", False)[0].startswith("**Error:**")
