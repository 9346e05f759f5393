"""The template families in use: importing a family's module registers its template.

A new family (GEMM, convolution, pooling) adds its module to the import below.
"""
from __future__ import annotations

from kernelrag.draft.lower.protocol import Template, registered
from kernelrag.draft.lower.templates import channelwise, conv_pool, elementwise, gemm, rowwise  # noqa: F401  (each registers itself)


def templates() -> list[Template]:
    """Every registered template, lowest priority number first."""
    return registered()
