"""A real local HTTP server speaking the OpenAI chat-completions API, for tests.

It replays canned answers (files in tests/fixtures/llm/) in order, one per
request, streamed as server-sent events when the request asks for it, and
records every request (path, headers, JSON body) so tests can read the prompts.

    with CannedLLM(["relu_good.md"]) as llm:
        settings = load_settings(llm_base_url=llm.url)
        ...
        llm.requests[0]["body"]["messages"]

``fail_first=n`` answers the first n requests with HTTP 503 (to exercise
retries); ``delay_s`` sleeps before each answer (to exercise timeouts).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "llm"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that gave up (the timeout test) is expected; anything else is printed."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


class CannedLLM:
    def __init__(self, answers: list[str | Path] = (), *, fixtures_dir: Path = FIXTURES,
                 fail_first: int = 0, delay_s: float = 0.0, chunk_chars: int = 16):
        self.answers = [self._load(a, fixtures_dir) for a in answers]
        self.fail_first = fail_first
        self.delay_s = delay_s
        self.chunk_chars = chunk_chars
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._next = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None

    @staticmethod
    def _load(answer: str | Path, fixtures_dir: Path) -> str:
        path = Path(answer)
        if not path.is_absolute():
            path = fixtures_dir / path
        return path.read_text()

    # --- lifecycle ------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (kept after stop, for error messages)."""
        if self._url is None:
            raise RuntimeError("the canned LLM server is not started; use it as a context manager")
        return self._url

    @property
    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def prompt_text(self, index: int) -> str:
        """All message contents of the index-th chat request, joined."""
        return "\n".join(m.get("content") or "" for m in self.chat_requests[index]["body"]["messages"])

    def start(self) -> "CannedLLM":
        self._server = _Server(("127.0.0.1", 0), self._handler())
        host, port = self._server.server_address[:2]
        self._url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "CannedLLM":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- behaviour ------------------------------------------------------------
    def _take(self) -> tuple[int, str | None]:
        """(HTTP status, answer) for the next request."""
        with self._lock:
            n = len(self.chat_requests)
            if n <= self.fail_first:
                return 503, None
            if self._next >= len(self.answers):
                return 500, None
            answer = self.answers[self._next]
            self._next += 1
            return 200, answer

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):   # keep test output clean
                pass

            def _json(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "canned", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._json(400, {"error": {"message": "body is not JSON"}})
                    return
                with server._lock:
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                status, answer = server._take()
                if server.delay_s:
                    time.sleep(server.delay_s)
                if status != 200:
                    msg = "temporarily unavailable" if status == 503 else "no canned answer left"
                    self._json(status, {"error": {"message": msg, "type": "server_error"}})
                    return
                prompt = "\n".join(m.get("content") or "" for m in body.get("messages", []))
                usage = {"prompt_tokens": _tokens(prompt), "completion_tokens": _tokens(answer),
                         "total_tokens": _tokens(prompt) + _tokens(answer)}
                model = body.get("model", "canned")
                if body.get("stream"):
                    self._stream(answer, model, usage, bool((body.get("stream_options") or {}).get("include_usage")))
                    return
                self._json(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
                    "created": int(time.time()), "model": model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer}}],
                    "usage": usage,
                })

            def _stream(self, answer: str, model: str, usage: dict, include_usage: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": model}

                def send(payload: dict | str) -> None:
                    data = payload if isinstance(payload, str) else json.dumps(payload)
                    self.wfile.write(f"data: {data}\n\n".encode())
                    self.wfile.flush()

                send({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                           "finish_reason": None}]})
                step = server.chunk_chars
                for i in range(0, len(answer), step):
                    send({**base, "choices": [{"index": 0, "delta": {"content": answer[i:i + step]},
                                               "finish_reason": None}]})
                send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                if include_usage:
                    send({**base, "choices": [], "usage": usage})
                send("[DONE]")
                self.close_connection = True

        return Handler
