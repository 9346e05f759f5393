"""The Gradio app: chat with citations, generate with streamed rounds, skills, settings.

    from kernelrag.ui.app import build_app, launch
    launch(host="127.0.0.1", port=7860)            # what `kernelrag ui` runs

A thin layer over the facade (``kernelrag.api.KernelRAG``); the event handlers
are in ``kernelrag.ui.handlers`` and the rendering in ``kernelrag.ui.render``.
"""
from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")   # before gradio is imported

import gradio as gr  # noqa: E402

from kernelrag.api import KernelRAG  # noqa: E402
from kernelrag.config import REPO_ROOT  # noqa: E402
from kernelrag.ui import render  # noqa: E402
from kernelrag.ui.handlers import DEVICES, Handlers, Session, mode_markdown  # noqa: E402

CSS = """
#sources { max-height: 520px; overflow-y: auto; }
#mode { font-size: 0.9em; }
"""


def _task_examples() -> list[tuple[str, str]]:
    """(file name, path) of the benchmark tasks shipped with the repository."""
    tasks = REPO_ROOT / "bench" / "tasks"
    return [(p.name, str(p)) for p in sorted(tasks.glob("*.py"))] if tasks.is_dir() else []


def build_app(api: KernelRAG) -> gr.Blocks:
    """The UI over one facade; per-browser-session LLM settings live in a gr.State."""
    h = Handlers(api)
    with gr.Blocks(title="kernelrag", analytics_enabled=False) as app:
        session = gr.State(None)
        gr.Markdown("# kernelrag\nRetrieval-augmented GPU-kernel assistant with a verified skill memory.")
        mode = gr.Markdown(mode_markdown(api, None), elem_id="mode")

        with gr.Tab("Chat", id="chat"):
            with gr.Row():
                with gr.Column(scale=3):
                    chatbot = gr.Chatbot(label="Answer (citations [n] refer to the sources)", height=560,
                                         elem_id="chatbot", buttons=["copy"])
                    with gr.Row():
                        question = gr.Textbox(placeholder="e.g. how do I avoid shared-memory bank conflicts?",
                                              show_label=False, scale=5, elem_id="chat-input", submit_btn=False)
                        ask = gr.Button("Ask", variant="primary", scale=1, elem_id="chat-send")
                with gr.Column(scale=2):
                    sources = gr.Markdown("### Sources\nAsk a question to see the passages behind the answer.",
                                          elem_id="sources")
            for trigger in (ask.click, question.submit):
                trigger(h.chat, [question, chatbot, session], [chatbot, sources, question])

        with gr.Tab("Generate", id="generate"):
            with gr.Row():
                with gr.Column(scale=3):
                    task_code = gr.Code(language="python", lines=16, max_lines=30, interactive=True,
                                        label="PyTorch reference (KernelBench format: Model, get_inputs, "
                                              "get_init_inputs)", elem_id="task-code")
                    with gr.Row():
                        upload = gr.File(label="or upload a task .py", file_types=[".py"], type="filepath",
                                         height=90, elem_id="task-file")
                        example = gr.Dropdown(choices=_task_examples(), value=None, label="or pick a bench task",
                                              elem_id="task-example")
                    with gr.Row():
                        backend = gr.Radio(["triton", "cuda"], value="triton", label="backend")
                        max_rounds = gr.Slider(1, 10, value=api.settings.max_rounds, step=1, label="max rounds")
                        use_memory = gr.Checkbox(value=True, label="use memory (verified skills first)")
                    go = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                with gr.Column(scale=2):
                    suggestions = gr.Markdown("Paste or upload a task to see the reasoning graph's suggestions.",
                                              elem_id="suggestions")
            status = gr.Markdown("", elem_id="generate-status")
            table = gr.Dataframe(headers=render.VERDICT_HEADERS, value=[], datatype="str", interactive=False,
                                 label="verdict per round", elem_id="verdict-table", wrap=True)
            with gr.Row():
                draft = gr.Code(language="python", label="kernel (latest draft, or the verified one)",
                                interactive=False, lines=18, max_lines=40, elem_id="draft-code")
                with gr.Column():
                    plot = gr.Plot(label="roofline of the final kernel", elem_id="roofline", visible=False)
                    plot_note = gr.Markdown("", elem_id="roofline-note")
            with gr.Accordion("round log: verdicts and feedback", open=False):
                round_log = gr.Markdown("", elem_id="round-log")
            upload.upload(h.load_task, [upload], [task_code, status])
            example.change(h.load_task, [example], [task_code, status])
            task_code.blur(h.suggest, [task_code], [suggestions])
            go.click(h.generate, [task_code, backend, max_rounds, use_memory, session],
                     [status, table, draft, round_log, plot, plot_note, suggestions])

        with gr.Tab("Skills", id="skills"):
            with gr.Row():
                query = gr.Textbox(label="search skills (name, pattern, summary, transformations)", scale=4)
                retired = gr.Checkbox(value=False, label="include retired", scale=1)
                find = gr.Button("Search", scale=1)
            skills_df = gr.Dataframe(headers=render.SKILL_HEADERS, value=[], datatype="str", interactive=False,
                                     elem_id="skills-table", max_height=320)
            with gr.Row():
                pick = gr.Dropdown(choices=[], label="skill", scale=3, elem_id="skill-pick")
                approve = gr.Button("Approve", scale=1)
                retire = gr.Button("Retire", variant="stop", scale=1)
            skill_status = gr.Markdown("")
            with gr.Row():
                skill_md = gr.Markdown("", elem_id="skill-detail")
                kernel_code = gr.Code(language="python", label="kernel.py", interactive=False, max_lines=40)
            with gr.Accordion("reference.py", open=False):
                reference_code = gr.Code(language="python", interactive=False, max_lines=40)
            for trigger in (find.click, query.submit, retired.change):
                trigger(h.skills_table, [query, retired], [skills_df, pick, skill_status])
            pick.change(h.show_skill, [pick], [skill_md, kernel_code, reference_code])
            review_out = [skill_status, skills_df, skill_md, kernel_code, reference_code]
            approve.click(lambda n, q, r: h.review(n, "approve", q, r), [pick, query, retired], review_out)
            retire.click(lambda n, q, r: h.review(n, "retire", q, r), [pick, query, retired], review_out)

        with gr.Tab("Settings", id="settings"):
            gr.Markdown("An OpenAI-compatible endpoint for this browser session. The key stays in this "
                        "server's memory for the session only: never written to disk or logs. Leave the "
                        "base URL empty to work offline.")
            s = api.settings
            base_url = gr.Textbox(label="LLM base URL", value=s.llm_url_shown or "",
                                  placeholder="e.g. http://127.0.0.1:8000/v1")
            model = gr.Textbox(label="model", value=s.llm_model)
            key = gr.Textbox(label="API key", type="password", value="", placeholder="kept in memory only")
            device = gr.Radio(list(DEVICES), value=s.device, label="verification device")
            apply = gr.Button("Apply", variant="primary")
            settings_status = gr.Markdown("")
            apply.click(h.apply_settings, [base_url, model, key, device, session],
                        [session, settings_status, key, mode])

        app.load(h.skills_table, [query, retired], [skills_df, pick, skill_status])
    return app


def launch(host: str = "127.0.0.1", port: int = 7860, auth: tuple[str, str] | None = None,
           api: KernelRAG | None = None) -> None:
    """Serve the UI until interrupted; ``api`` (a KernelRAG) is created when not given."""
    if api is None:
        api = KernelRAG()
    app = build_app(api)
    app.queue(default_concurrency_limit=2)
    app.launch(server_name=host, server_port=port, auth=auth, share=False, inbrowser=False,
               show_error=True, quiet=True, css=CSS, footer_links=[], run_history=False,
               max_file_size="1mb", ssr_mode=False, mcp_server=False)
