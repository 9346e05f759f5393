"""The chat UI in a real browser (Playwright + the system Chromium), served by `kernelrag ui`.

Ask a question and see cited sources; submit a task and see a verdict table; save
screenshots to tests/artifacts/. The README's picture, bench/results/ui-screenshot.png (tracked),
is replaced only when asked: KERNELRAG_UPDATE_SCREENSHOT=1.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import copy_ui_docs_home

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "ui"
ARTIFACTS = REPO / "tests" / "artifacts"
SCREENSHOT = REPO / "bench" / "results" / "ui-screenshot.png"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]
WAIT_MS = 300_000             # limits on waiting for a slow machine, not assertions about speed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium); "
                                                "the browser test needs the system Chromium"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_served(url: str, proc: subprocess.Popen, log: Path, limit_s: float = 300.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"`kernelrag ui` exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"`kernelrag ui` did not answer at {url}:\n{log.read_text()[-3000:]}")


@pytest.fixture
def ui_url(kernelrag_home, tmp_path, ui_docs_home):
    env = {**os.environ, "KERNELRAG_HOME": str(kernelrag_home), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    copy_ui_docs_home(ui_docs_home, kernelrag_home)          # FIXTURES/docs, ingested by `kernelrag ingest`
    port = free_port()
    log = tmp_path / "ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kernelrag", "ui", "--host", "127.0.0.1",
                                 "--port", str(port), "--device", "cpu"],
                                env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_served(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def combine(top: Path, bottom: Path, out: Path) -> None:
    """One image: the chat above, the generate tab below."""
    from PIL import Image

    a, b = Image.open(top), Image.open(bottom)
    canvas = Image.new("RGB", (max(a.width, b.width), a.height + b.height), "white")
    canvas.paste(a, (0, 0))
    canvas.paste(b, (0, a.height))
    out.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(out)


def test_chat_cites_sources_and_generate_shows_a_verdict_table(ui_url):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(ui_url)
            expect(page.locator("#mode")).to_contain_text("offline")

            # chat: a streamed answer with numbered citations, and the sources panel
            page.locator("#chat-input textarea").fill("how do I avoid shared memory bank conflicts?")
            page.locator("#chat-send").click()
            sources = page.locator("#sources")
            expect(sources).to_contain_text("[1]", timeout=WAIT_MS)
            expect(sources).to_contain_text("bank-conflicts.md")
            expect(sources).to_contain_text("Padding")
            chat = page.locator("#chatbot")
            expect(chat).to_contain_text("retrieved, not written by an LLM", timeout=WAIT_MS)
            expect(chat).to_contain_text("[1] ")
            expect(chat).to_contain_text("Swizzling", timeout=WAIT_MS)
            page.screenshot(path=str(ARTIFACTS / "ui-chat.png"))

            # generate: an empty task is an error message, and the app keeps working
            page.get_by_role("tab", name="Generate").click()
            page.locator("#generate-btn").click()
            expect(page.locator("#generate-status")).to_contain_text("Error", timeout=WAIT_MS)
            page.locator("#task-file input[type=file]").set_input_files(str(FIXTURES / "relu_task.py"))
            expect(page.locator("#task-code")).to_contain_text("torch.relu", timeout=WAIT_MS)
            page.locator("#generate-btn").click()
            status = page.locator("#generate-status")
            expect(status).to_contain_text("OK", timeout=WAIT_MS)
            table = page.locator("#verdict-table")
            expect(table).to_contain_text("correct")
            expect(table).to_contain_text("no time measured")
            expect(page.locator("#roofline-note")).to_contain_text("no time measured")
            expect(page.locator("#draft-code")).to_contain_text("triton.jit")
            expect(page.locator("#suggestions")).to_contain_text("Suggestions for relu")
            page.screenshot(path=str(ARTIFACTS / "ui-generate.png"), full_page=True)
        finally:
            browser.close()
    combine(ARTIFACTS / "ui-chat.png", ARTIFACTS / "ui-generate.png", ARTIFACTS / "ui-screenshot.png")
    if os.environ.get("KERNELRAG_UPDATE_SCREENSHOT") == "1":     # a test run leaves tracked files alone
        shutil.copyfile(ARTIFACTS / "ui-screenshot.png", SCREENSHOT)
