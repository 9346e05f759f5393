"""The LLM client (layer L3): any OpenAI-compatible chat-completions endpoint.

``openai`` is imported here only, on first use. Retries are ours (the client's
own are switched off) so a failure names the endpoint, the attempts and the fix.
The API key is passed to the client and nowhere else: it is never logged,
stored, put in a result or echoed in an error (error text is scrubbed of it);
the same holds for credentials inside the base URL (``http://user:pass@host/v1``).
"""
from __future__ import annotations

import ast
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

from kernelrag.config import Settings
from kernelrag.errors import LLMError

log = logging.getLogger("kernelrag.draft.llm")

# Local endpoints (vLLM, llama.cpp, Ollama) ignore the key, but the client insists on one.
_NO_KEY = "no-key-configured"
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)
_CLASS = re.compile(r"^class\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    model: str


class LLMClient:
    """A chat client for ``settings.llm_base_url``; raises LLMError when it cannot answer."""

    def __init__(self, settings: Settings):
        if not settings.llm_base_url:
            raise LLMError("no LLM endpoint configured; set KERNELRAG_LLM_BASE_URL (any "
                           "OpenAI-compatible /v1 URL) or llm_base_url in kernelrag.toml")
        self.settings = settings
        self.base_url = settings.llm_url_shown      # printed in errors: no credentials
        self.model = settings.llm_model
        self._client = None
        self.calls = 0

    # --- plumbing -------------------------------------------------------------
    def _openai(self):
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                api_key=self.settings.llm_api_key or _NO_KEY,
                base_url=self.settings.llm_base_url,
                timeout=self.settings.llm_timeout_s,
                max_retries=0,
            )
        return self._client

    def _scrub(self, text: str) -> str:
        return self.settings.scrub(text)

    def _with_retries(self, what: str, call):
        import openai

        retryable = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)
        attempts = 1 + max(0, self.settings.llm_max_retries)
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except retryable as exc:
                detail = self._scrub(f"{type(exc).__name__}: {exc}")
                if attempt == attempts:
                    raise LLMError(
                        f"LLM endpoint {self.base_url} failed {attempts} time(s) on {what}: {detail}; "
                        "check that the server is up and llm_base_url ends in /v1, or raise "
                        "llm_timeout_s / llm_max_retries") from None
                wait_s = min(8.0, 0.25 * 2 ** (attempt - 1))
                log.warning("LLM %s attempt %d/%d failed (%s); retrying in %.2f s",
                            what, attempt, attempts, type(exc).__name__, wait_s)
                time.sleep(wait_s)
            except openai.APIStatusError as exc:
                detail = self._scrub(f"HTTP {exc.status_code}: {exc.message}")
                hint = ("check llm_api_key (KERNELRAG_LLM_API_KEY or OPENAI_API_KEY)"
                        if exc.status_code in (401, 403) else
                        f"check llm_model={self.model!r} and that the endpoint speaks chat completions")
                raise LLMError(f"LLM endpoint {self.base_url} refused {what}: {detail}; {hint}") from None
            except openai.OpenAIError as exc:
                raise LLMError(f"LLM client error on {what}: {self._scrub(str(exc))}") from None

    # --- public ---------------------------------------------------------------
    def chat(self, messages: list[dict[str, str]], *, temperature: float | None = None,
             max_tokens: int | None = None) -> Completion:
        """One chat completion; the whole answer at once."""
        temp = self.settings.llm_temperature if temperature is None else temperature
        start = time.perf_counter()
        kwargs = {"model": self.model, "messages": messages, "temperature": temp}
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        resp = self._with_retries("chat completion",
                                  lambda: self._openai().chat.completions.create(**kwargs))
        self.calls += 1
        choices = getattr(resp, "choices", None) or []
        if not choices or choices[0].message is None:
            raise LLMError(f"LLM endpoint {self.base_url} answered with no choices; "
                           f"check that llm_model={self.model!r} exists there")
        text = choices[0].message.content or ""
        usage = getattr(resp, "usage", None)
        seconds = time.perf_counter() - start
        log.info("LLM chat: model=%s messages=%d answer_chars=%d in %.2f s",
                 self.model, len(messages), len(text), seconds)
        return Completion(text=text,
                          prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                          completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                          seconds=seconds, model=self.model)

    def stream(self, messages: list[dict[str, str]], *,
               temperature: float | None = None) -> Iterator[str]:
        """Yield the answer in pieces as the server sends them. Usage, when the server
        reports it, is in ``self.last_usage`` (prompt, completion tokens) afterwards."""
        temp = self.settings.llm_temperature if temperature is None else temperature
        self.last_usage = (0, 0)
        stream = self._with_retries("streamed chat completion", lambda: self._openai().chat.completions.create(
            model=self.model, messages=messages, temperature=temp, stream=True,
            stream_options={"include_usage": True}))
        self.calls += 1
        import openai

        try:
            for chunk in stream:
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    self.last_usage = (int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0))
                for choice in getattr(chunk, "choices", None) or []:
                    piece = getattr(choice.delta, "content", None)
                    if piece:
                        yield piece
        except openai.OpenAIError as exc:
            raise LLMError(f"LLM stream from {self.base_url} broke off: {self._scrub(str(exc))}; "
                           "try again or use the non-streamed answer") from None


def _defined_classes(code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return _CLASS.findall(code)
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef)]


def extract_code(answer: str, class_name: str = "ModelNew") -> str:
    """The code block of an LLM answer that defines ``class <class_name>``.

    Takes fenced blocks (```python, ```py or bare ```; an unterminated last fence
    counts, answers get cut off); of those defining the class, the last one wins
    (answers often revise). An answer that is bare code defining the class is taken
    whole. A block with a syntax error is still returned: the verifier reports it.
    Raises LLMError saying what was found instead.
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(answer or "")]
    code_blocks = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    defining = [b for b in code_blocks if class_name in _defined_classes(b)]
    if defining:
        return defining[-1].strip("\n") + "\n"
    if not blocks and class_name in _defined_classes(answer or ""):
        return answer.strip("\n") + "\n"
    if not code_blocks:
        other = sorted({lang for lang, _ in blocks if lang})
        seen = f" (only {', '.join(other)} blocks)" if other else ""
        raise LLMError(f"the answer has no ```python code block{seen}; answer with one "
                       f"```python block holding the complete module that defines class {class_name}")
    found = sorted({c for b in code_blocks for c in _defined_classes(b)})
    which = ", ".join(found) if found else "no class"
    raise LLMError(f"the answer's code defines {which} but not class {class_name}; the module "
                   f"must define class {class_name}(nn.Module) with the same constructor as Model")
