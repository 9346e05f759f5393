"""kernelrag: a retrieval-augmented GPU-kernel assistant with a verified skill memory.

``import kernelrag`` is cheap: the facade and everything heavy load on first use.

The chat UI's folder, ``ui/`` at the repository root, is the package ``kernelrag.ui``:
installs map it there (pyproject ``package-dir``); in a source checkout that is not
installed, the finder below resolves the same name to the same folder.
"""
from __future__ import annotations

import sys
from pathlib import Path

__version__ = "0.1.0"
__all__ = ["KernelRAG", "load_settings", "__version__"]

_SOURCE_UI = Path(__file__).resolve().parent.parent / "ui"


class _SourceCheckoutUI:
    """Finds ``kernelrag.ui`` in ``<checkout>/ui`` when nothing installed provides it."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        if fullname != "kernelrag.ui" or not (_SOURCE_UI / "__init__.py").is_file():
            return None
        from importlib.util import spec_from_file_location

        return spec_from_file_location(fullname, _SOURCE_UI / "__init__.py",
                                       submodule_search_locations=[str(_SOURCE_UI)])


if not any(isinstance(f, type) and f.__name__ == "_SourceCheckoutUI" for f in sys.meta_path):
    sys.meta_path.append(_SourceCheckoutUI)


def __getattr__(name: str):
    if name == "KernelRAG":
        from kernelrag.api import KernelRAG

        return KernelRAG
    if name == "load_settings":
        from kernelrag.config import load_settings

        return load_settings
    raise AttributeError(f"module 'kernelrag' has no attribute {name!r}")
