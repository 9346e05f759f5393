"""Drafting kernels: offline from verified skills and generated code (``offline``,
``codegen``), or with an OpenAI-compatible LLM (``llm``, ``prompts``)."""
