"""kernelrag: a retrieval-augmented GPU-kernel assistant with a verified skill memory.

``import kernelrag`` is cheap: the facade and everything heavy load on first use.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["KernelRAG", "load_settings", "__version__"]


def __getattr__(name: str):
    if name == "KernelRAG":
        from kernelrag.api import KernelRAG

        return KernelRAG
    if name == "load_settings":
        from kernelrag.config import load_settings

        return load_settings
    raise AttributeError(f"module 'kernelrag' has no attribute {name!r}")
