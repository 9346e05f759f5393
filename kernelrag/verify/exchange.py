"""The files a verification's parent and its candidate process exchange in the candidate's
scratch folder (job, plan, go, phase1, result, the gate's requests): each written whole, so
a reader polling for it never sees half a file. Standard library only: both sides import it."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

IMPORTED_FILE = "imported"      # touched by the candidate once its module is imported


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object at ``path``, or {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
