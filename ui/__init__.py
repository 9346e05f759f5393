"""The Gradio chat UI of kernelrag: ``kernelrag ui``, or ``kernelrag.ui.app.launch()``.

Importing ``kernelrag.ui`` is cheap; ``kernelrag.ui.app`` imports gradio. The folder is
``ui/`` at the repository root, installed as the package ``kernelrag.ui`` (pyproject
``package-dir``), never as a top-level ``ui``.
"""
