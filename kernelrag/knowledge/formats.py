"""Which files the store reads, and how each format becomes lines of text.

A file is either read (Markdown, reStructuredText, text, HTML, PDF, source
code, optimization-log JSONL, skill folders; any of them gzip-compressed),
skipped with a counted reason (images, CSS, JS, fonts, search indexes), or
refused with a one-line reason (binary, not UTF-8, empty, too large, corrupt).
HTML and PDF extraction live in ``htmlpdf``.
"""
from __future__ import annotations

import ast
import gzip
import io
import json
import tomllib
import zlib
from pathlib import Path

from kernelrag.knowledge.models import KINDS, Extracted, IngestFailure, SkipFile

MARKDOWN = {".md", ".markdown"}
RST = {".rst"}
TEXT = {".txt", ".text"}
HTML = {".html", ".htm"}
PYTHON = {".py"}
C_LIKE = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".ptx"}
READ_EXTS = MARKDOWN | RST | TEXT | HTML | PYTHON | C_LIKE | {".pdf", ".jsonl"}

SKIP_EXTS = {
    **dict.fromkeys([".png", ".jpg", ".jpeg", ".gif", ".svg", ".ico", ".webp", ".bmp", ".tif", ".tiff"], "image"),
    **dict.fromkeys([".css", ".scss", ".less"], "stylesheet"),
    **dict.fromkeys([".js", ".mjs", ".map"], "script"),
    **dict.fromkeys([".woff", ".woff2", ".ttf", ".otf", ".eot"], "font"),
    **dict.fromkeys([".inv", ".json", ".fjson", ".pickle", ".doctree", ".buildinfo"], "search index or build data"),
}
SKIP_NAMES = {"searchindex.js": "search index or build data", "objects.inv": "search index or build data"}
IGNORED_DIRS = {"__pycache__", "node_modules", ".git", ".venv", "venv", ".pytest_cache", ".mypy_cache"}


def inner_name(path: Path) -> str:
    """The name that decides the format: ``notes.md.gz`` -> ``notes.md``."""
    name = path.name.lower()
    return name[:-3] if name.endswith(".gz") else name


def skill_root(path: Path) -> Path | None:
    """The skill folder holding ``path`` (a folder with skill.toml), if any."""
    for parent in (path.parent, path.parent.parent):
        if (parent / "skill.toml").is_file():
            return parent
    return None


def classify(path: Path) -> tuple[str, str]:
    """``("read", fmt)``, ``("skip", reason)`` or ``("unknown", ext)`` for one file."""
    name = inner_name(path)
    ext = Path(name).suffix
    if name in SKIP_NAMES:
        return "skip", SKIP_NAMES[name]
    if ext in SKIP_EXTS:
        return "skip", SKIP_EXTS[ext]
    if name == "skill.toml" or (ext == ".py" and skill_root(path) is not None):
        return "read", "skill"
    if ext in READ_EXTS:
        return "read", ext.lstrip(".")
    return "unknown", ext or "(no extension)"


def decode(path: Path, data: bytes, max_bytes: int) -> bytes:
    """Check size, decompress ``.gz``; raise IngestFailure with the reason."""
    if len(data) > max_bytes:
        raise IngestFailure(f"too large ({len(data)} bytes > max_file_bytes {max_bytes}); "
                            "split it or raise KERNELRAG_MAX_FILE_BYTES")
    if not data.strip():
        raise IngestFailure("empty file")
    if path.name.lower().endswith(".gz"):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
                data = fh.read(max_bytes + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise IngestFailure(f"corrupt gzip ({exc}); re-compress it or remove it") from None
        if len(data) > max_bytes:
            raise IngestFailure(f"too large once decompressed (> max_file_bytes {max_bytes} bytes)")
        if not data.strip():
            raise IngestFailure("empty file (once decompressed)")
    return data


def to_text(data: bytes) -> str:
    """UTF-8 text (BOM allowed) or IngestFailure naming the offending byte."""
    if b"\x00" in data[:8192]:
        raise IngestFailure("binary file (contains NUL bytes), not text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad = data[exc.start]
        raise IngestFailure(f"not UTF-8 text (byte 0x{bad:02x} at offset {exc.start}); "
                            "re-encode it as UTF-8") from None
    if not text.strip():
        raise IngestFailure("empty file (only whitespace)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def front_matter(lines: list[str]) -> tuple[dict, int]:
    """Parse a ``---`` block of ``key: value`` lines; return (fields, body start index)."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    fields: dict = {}
    for i in range(1, min(len(lines), 60)):
        line = lines[i]
        if line.strip() == "---":
            return fields, i + 1
        key, sep, value = line.partition(":")
        if not sep or key.startswith(" "):
            continue
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            fields[key.strip()] = [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]
        else:
            fields[key.strip()] = value.split(" #")[0].strip().strip("'\"")
    return {}, 0


def kind_from_path(path: Path, fmt: str) -> str:
    """Heuristic doc kind when the file does not say."""
    parts = {p.lower() for p in path.parts}
    if fmt == "ptx" or parts & {"isa", "ptx", "sass"} or "ptx-isa" in str(path).lower():
        return "isa"
    if fmt in {"md", "markdown", "rst", "html", "htm", "pdf"}:
        return "guide"
    return "note"


def check_kind(kind: str, where: str) -> str:
    if kind not in KINDS:
        raise IngestFailure(f"{where} kind {kind!r} is not one of {', '.join(KINDS)}; fix it")
    return kind


def extract(path: Path, data: bytes, fmt: str) -> Extracted:
    """Turn decoded bytes of a readable file into an ``Extracted``."""
    if fmt == "pdf":
        from kernelrag.knowledge.htmlpdf import extract_pdf

        return extract_pdf(data, path)
    text = to_text(data)
    if fmt in {"html", "htm"}:
        from kernelrag.knowledge.htmlpdf import extract_html

        return extract_html(text, path)
    if fmt == "skill":
        return _extract_skill(path, text)
    if fmt == "jsonl":
        return _extract_log(text)
    lines = text.split("\n")
    if fmt in {"md", "markdown"}:
        meta, start = front_matter(lines)
        out = Extracted(lines[start:], "markdown", fmt, line_nos=list(range(start + 1, len(lines) + 1)))
        out.title = str(meta.get("title", "")) or _first_heading(out.lines)
        out.kind = check_kind(str(meta["kind"]), "front matter") if "kind" in meta else ""
        tags = meta.get("tags", [])
        out.tags = tags if isinstance(tags, list) else [str(tags)]
        return out
    syntax = {"rst": "rst", "py": "python"}.get(fmt, "c" if f".{fmt}" in C_LIKE else "text")
    title = ""
    if syntax == "rst":
        from kernelrag.knowledge.blocks import rst_blocks

        title = next((b.name for b in rst_blocks(lines) if b.kind == "heading"), "")
    return Extracted(lines, syntax, fmt, title=title)


def _first_heading(lines: list[str]) -> str:
    in_fence = False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


# --- optimization logs ---------------------------------------------------------

def _scalar(value) -> str | None:
    if isinstance(value, dict) and "median_ms" in value:
        return f"{value['median_ms']} ms"
    if isinstance(value, (str, int, float, bool)) and str(value).strip():
        return str(value)
    return None


def _extract_log(text: str) -> Extracted:
    """An optimization log: one section for the run, one per round (line spans = JSONL lines)."""
    records = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            records.append((n, json.loads(line)))
        except json.JSONDecodeError as exc:
            if not records:
                raise SkipFile("JSONL that is not an optimization log") from None
            raise IngestFailure(f"line {n} is not JSON ({exc.msg}); fix or remove that line") from None
        if len(records) == 1 and (not isinstance(records[0][1], dict) or records[0][1].get("type") != "run"):
            raise SkipFile("JSONL that is not an optimization log")
    lines: list[str] = []
    nos: list[int] = []

    def emit(n: int, *new: str) -> None:
        for item in new:
            for part in item.split("\n"):
                lines.append(part)
                nos.append(n)

    run_no, run = records[0]
    title = f"Optimization log {run.get('log_id', '')}: {run.get('task', '')}".strip()
    emit(run_no, f"# {title}", "")
    emit(run_no, *(f"{k}: {v}" for k, v in run.items() if k != "type" and _scalar(v) is not None), "")
    for n, rec in records[1:]:
        if not isinstance(rec, dict):
            continue
        emit(n, f"## Round {rec.get('round', '?')}", "")
        verdict = rec.get("verdict") or {}
        if isinstance(verdict, dict):
            facts = [f"{k}: {_scalar(v)}" for k, v in verdict.items()
                     if k not in {"checks", "findings", "error", "warnings"} and _scalar(v) is not None]
            emit(n, "verdict: " + "; ".join(facts), "")
        for key in ("transformations", "skill", "error"):
            if rec.get(key):
                emit(n, f"{key}: {rec[key]}", "")
        if rec.get("feedback"):
            emit(n, f"feedback: {rec['feedback']}", "")
        if rec.get("draft"):
            emit(n, "```python", rec["draft"].rstrip("\n"), "```", "")
    return Extracted(lines, "markdown", "jsonl", line_nos=nos, title=title, kind="log")


# --- skill folders ---------------------------------------------------------------

def _skill_name(root: Path) -> str:
    try:
        return str(tomllib.loads((root / "skill.toml").read_text()).get("name", root.name))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return root.name


def _extract_skill(path: Path, text: str) -> Extracted:
    """skill.toml -> a summary section; kernel.py/alternatives -> docstrings; other .py -> code."""
    root = skill_root(path) or path.parent
    name = _skill_name(root)
    title = f"skill {name}"
    if path.name == "skill.toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise IngestFailure(f"skill.toml is not valid TOML ({exc}); fix it") from None
        out = [f"# Skill {data.get('name', name)}", "", str(data.get("summary", "")), ""]
        for key, value in data.items():
            if key == "summary":
                continue
            if isinstance(value, dict):
                inner = ", ".join(f"{k}={v}" for k, v in value.items() if _scalar(v) is not None)
                out.append(f"{key}: {inner}")
            elif isinstance(value, list):
                out.append(f"{key}: {', '.join(map(str, value))}")
            else:
                out.append(f"{key}: {value}")
        n_src = text.count("\n") + 1
        return Extracted(out, "markdown", "skill", line_nos=[1] * 4 + [n_src] * (len(out) - 4),
                         title=title, kind="skill")
    if path.name == "kernel.py" or path.parent.name == "alternatives":
        return _docstrings(text, path, title)
    return Extracted(text.split("\n"), "python", "skill", title=title, kind="skill")


def _docstrings(text: str, path: Path, title: str) -> Extracted:
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise IngestFailure(f"Python syntax error at line {exc.lineno} ({exc.msg}); fix it") from None
    lines: list[str] = []
    nos: list[int] = []
    label = path.name if path.parent.name != "alternatives" else f"alternatives/{path.name}"
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    for node in nodes:
        doc = ast.get_docstring(node)
        if not doc:
            continue
        if isinstance(node, ast.Module):
            head, first = f"# {title}: {label}", 1
        else:
            word = "class" if isinstance(node, ast.ClassDef) else "def"
            head, first = f"## {word} {node.name}", node.lineno
        last = node.body[0].end_lineno or first
        body = doc.split("\n")
        lines += [head, "", *body, ""]
        nos += [first, first] + [min(first + i + 1, last) for i in range(len(body))] + [last]
    if not lines:       # no docstrings: the code itself is what there is to index
        return Extracted(text.split("\n"), "python", "skill", title=title, kind="skill")
    return Extracted(lines, "markdown", "skill", line_nos=nos, title=title, kind="skill")
