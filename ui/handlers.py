"""What each UI event does: thin calls into the facade, rendered by ``kernelrag.ui.render``.

Every handler catches its own errors and shows them (an error in one request never
stops the app). Long work streams: the chat answer arrives in pieces, and a
generate run runs in a worker thread whose rounds are shown as they finish.

Per-browser-session settings (the LLM endpoint, its key, the device) live in a
``Session`` held in a ``gr.State``: in this process's memory only, never written to
disk or logged, and not shared with other users of the same server.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import gradio as gr

from kernelrag.errors import KernelRAGError
from kernelrag.ui import render

if TYPE_CHECKING:
    from kernelrag.api import KernelRAG

log = logging.getLogger("kernelrag.ui")
CHAT_K = 5
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class Session:
    """One browser session's view of the facade (its own LLM settings and device)."""

    api: "KernelRAG | None" = None   # a KernelRAG with this session's LLM settings; None = the shared one
    device: str | None = None        # None = settings.device
    llm_label: str = ""


def error_text(exc: BaseException) -> str:
    if isinstance(exc, KernelRAGError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def mode_markdown(api: "KernelRAG", session: Session | None) -> str:
    s = (session.api if session and session.api else api).settings
    device = (session.device if session and session.device else None) or s.device
    if s.llm_enabled:
        llm = f"LLM: `{s.llm_model}` at `{s.llm_url_shown}`"
    else:
        llm = ("**offline**: no LLM configured; answers show the retrieved passages (labelled as such) "
               "and kernels are drafted from the skill library")
    return f"{llm} · verification device: `{device}` · state: `{s.home}`"


def task_input(api: Any, code: str) -> Any:
    """The task box's content: source text as typed, or a file path only under the input
    folders (``kernelrag.config.read_input``): the box never reads other files."""
    from kernelrag.config import read_input

    source, path = read_input(code, api.settings, "task")
    return path if path is not None else source


class Handlers:
    """The UI's event handlers over one shared facade."""

    def __init__(self, api: "KernelRAG"):
        self.api = api

    def _api(self, session: Session | None) -> "KernelRAG":
        return session.api if session is not None and session.api is not None else self.api

    def _device(self, session: Session | None) -> str | None:
        return session.device if session is not None else None

    # --- chat -------------------------------------------------------------------------
    def chat(self, message: str, history: list[dict] | None, session: Session | None) -> Iterator[tuple]:
        """Stream an answer; the sources panel lists the numbered passages it cites."""
        history = list(history or [])
        question = (message or "").strip()
        if not question:
            yield history, gr.skip(), ""
            return
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": "_searching..._"}]
        yield history, "### Sources\n_searching the knowledge store..._", ""
        api = self._api(session)
        text, offline = "", not api.settings.llm_enabled
        try:
            try:
                sources = render.sources_markdown(api.search(question, k=CHAT_K))
            except Exception as exc:            # no store here, or nothing ingested: answer anyway
                sources = render.sources_markdown([], note=f"Knowledge store not searched: {error_text(exc)}")
            yield history, sources, ""
            for piece in api.ask_stream(question, k=CHAT_K):
                text += piece
                history[-1] = {"role": "assistant", "content": render.answer_markdown(text, offline)}
                yield history, sources, ""
            if not text.strip():
                history[-1] = {"role": "assistant", "content": "_(empty answer)_"}
                yield history, sources, ""
        except Exception as exc:
            log.warning("chat failed: %s", error_text(exc))
            shown = render.answer_markdown(text, offline) + "\n\n" if text.strip() else ""
            history[-1] = {"role": "assistant", "content": f"{shown}**Error:** {error_text(exc)}"}
            yield history, gr.skip(), ""

    # --- generate ---------------------------------------------------------------------
    def load_task(self, path: str | None) -> tuple:
        if not path:
            return gr.skip(), gr.skip()
        try:
            return Path(path).read_text(), f"Loaded `{Path(path).name}`."
        except (OSError, UnicodeDecodeError) as exc:
            return gr.skip(), f"**Error:** could not read the uploaded file: {exc}"

    def suggest(self, code: str) -> str:
        if not (code or "").strip():
            return "Paste or upload a task to see the reasoning graph's suggestions."
        try:
            pattern = self.api.pattern(task_input(self.api, code))
            if not pattern.known:
                return f"### Suggestions\nOp pattern unknown ({render.md_escape(pattern.reason)}): no graph evidence."
            skills = self.api.find_skills(pattern, k=3)
            return render.suggestions_markdown(pattern.signature, self.api.suggest(pattern), skills)
        except Exception as exc:
            return f"**Error:** {error_text(exc)}"

    def generate(self, code: str, backend: str, max_rounds: float, use_memory: bool,
                 session: Session | None) -> Iterator[tuple]:
        """Rounds stream in: table row, draft and verdict per round; then the roofline plot."""
        # outputs: status, table, draft, round log, plot, plot note, suggestions
        if not (code or "").strip():
            yield ("**Error:** paste a PyTorch reference (class Model, get_inputs, get_init_inputs) or upload "
                   "one first.", gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip())
            return
        api, device = self._api(session), self._device(session)
        rounds = int(max_rounds) if max_rounds else None
        total = rounds or api.settings.max_rounds
        yield ("Reading the task and asking the reasoning graph...", [], "", "", gr.update(value=None, visible=False),
               "", gr.skip())
        yield (gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), self.suggest(code))
        events: queue.Queue = queue.Queue()

        def work() -> None:
            try:
                events.put(("done", api.generate(task_input(api, code), backend=backend, max_rounds=rounds,
                                                 device=device,
                                                 on_round=lambda r: events.put(("round", r)),
                                                 use_memory=use_memory)))
            except BaseException as exc:        # shown to the person; the app keeps serving
                events.put(("error", exc))

        threading.Thread(target=work, name="kernelrag-generate", daemon=True).start()
        start, table, log_parts, done = time.monotonic(), [], [], 0
        while True:
            try:
                kind, item = events.get(timeout=1.0)
            except queue.Empty:
                elapsed = time.monotonic() - start
                yield (f"Working ({elapsed:.0f} s): {done} of at most {total} round(s) finished; "
                       "drafting, verifying or writing back...",
                       gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip())
                continue
            if kind == "round":
                done += 1
                table.append(render.round_row(item))
                log_parts.append(render.round_markdown(item))
                yield (f"Round {item.index} done: {getattr(item.verdict, 'status', None) or item.error}",
                       table, item.draft or gr.skip(), "\n\n---\n\n".join(log_parts), gr.skip(), gr.skip(),
                       gr.skip())
            elif kind == "error":
                log.warning("generate failed: %s", error_text(item))
                yield (f"**Error:** {error_text(item)}", gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(),
                       gr.skip())
                return
            else:
                result = item
                fig = render.roofline_figure(result.verdict)
                if fig is not None:
                    note = ""
                elif result.verdict is not None and result.verdict.device == "cpu":
                    note = (f"Roofline: {render.NO_TIME} (CPU: the Triton interpreter checks correctness; "
                            "times come from a GPU).")
                else:
                    note = f"Roofline: {render.NO_TIME}."
                yield (render.result_markdown(result), table, result.source or gr.skip(), gr.skip(),
                       gr.update(value=fig, visible=fig is not None), note, gr.skip())
                return

    # --- skills -----------------------------------------------------------------------
    def skills_table(self, query: str, include_retired: bool) -> tuple:
        try:
            refs = self.api.skills(include_retired=bool(include_retired))
            rows = render.skill_rows(refs, query or "")
            names = [r[0] for r in rows]
            return rows, gr.update(choices=names, value=names[0] if names else None), f"{len(rows)} skill(s)"
        except Exception as exc:
            return [], gr.update(choices=[], value=None), f"**Error:** {error_text(exc)}"

    def show_skill(self, name: str | None) -> tuple:
        if not name:
            return "", "", ""
        try:
            s = self.api.skill(name)
            return render.skill_markdown(s, self.api.skill_status(s)), s.kernel_source(), s.reference_source()
        except Exception as exc:
            return f"**Error:** {error_text(exc)}", "", ""

    def review(self, name: str | None, action: str, query: str, include_retired: bool) -> tuple:
        """Approve or retire a skill, then refresh the table and the detail view."""
        if not name:
            return ("**Error:** pick a skill first.",) + (gr.skip(),) * 4
        try:
            if action not in ("approve", "retire"):
                raise ValueError(f"action {action!r} is not one of approve, retire")
            skill = getattr(self.api, action)(name)
            message = f"`{name}` is now **{skill.review_state}**."
        except Exception as exc:
            message = f"**Error:** {error_text(exc)}"
        rows, _, _ = self.skills_table(query, include_retired)
        return (message, rows) + self.show_skill(name)

    # --- settings ---------------------------------------------------------------------
    def apply_settings(self, base_url: str, model: str, key: str, device: str,
                       session: Session | None) -> tuple:
        """A session-only facade with this LLM endpoint; the key field is cleared after use."""
        session = session or Session()
        try:
            if device not in DEVICES:
                raise ValueError(f"device {device!r} is not one of {', '.join(DEVICES)}")
            base_url, model = (base_url or "").strip(), (model or "").strip()
            if base_url and not base_url.startswith(("http://", "https://")):
                raise ValueError(f"LLM base URL {base_url!r} must start with http:// or https://")
            base = self.api.settings
            if base_url and base_url == base.llm_url_shown:
                base_url = base.llm_base_url        # the field shows the URL without its credentials
            if base_url:
                # the server's own key goes only to the server's own endpoint, never to one typed here
                fallback = base.llm_api_key if base_url == base.llm_base_url else None
                api = self.api.with_settings(llm_base_url=base_url, llm_model=model or base.llm_model,
                                             llm_api_key=(key or "").strip() or fallback)
                settings = api.settings
                session = Session(api=api, device=device)
                message = (f"LLM set for this browser session: `{settings.llm_model}` "
                           f"at `{settings.llm_url_shown}` "
                           f"(key {'given, kept in memory only' if settings.llm_api_key else 'not given'}).")
            elif base.llm_enabled:
                session = Session(api=self.api.with_settings(llm_base_url=None), device=device)
                message = "LLM turned off for this browser session: working offline."
            else:
                session = Session(api=None, device=device)
                message = "No LLM: working offline."
        except Exception as exc:
            return session, f"**Error:** {error_text(exc)}", "", mode_markdown(self.api, session)
        return session, message, "", mode_markdown(self.api, session)
