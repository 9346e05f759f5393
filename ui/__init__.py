"""The Gradio chat UI of kernelrag: ``kernelrag ui``, or ``ui.app.launch()``.

Importing ``ui`` is cheap; ``ui.app`` imports gradio.
"""
