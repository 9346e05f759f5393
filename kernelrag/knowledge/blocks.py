"""Split lines into blocks: headings, paragraphs, code (fenced code stays one block).

One parser per syntax: Markdown (ATX headings, ``` and ~~~ fences), reStructuredText
(underlined headings, ``::`` literal blocks and code directives), plain text
(paragraphs), Python (top-level definitions via ``ast``) and C-like sources
(CUDA, C++, PTX: brace-balanced regions between blank lines).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass


@dataclass
class Block:
    kind: str            # heading | para | code
    start: int           # index into lines, inclusive
    end: int             # exclusive
    level: int = 0       # headings: 1 = top
    name: str = ""       # heading text, or the definition a code block holds


_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+:._])\1{2,}\s*$")
_RST_CODE = re.compile(r"^\s*\.\.\s+(code-block|code|sourcecode|literalinclude)::")


def markdown_blocks(lines: list[str]) -> list[Block]:
    blocks: list[Block] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            mark = fence.group(1)
            j = i + 1
            while j < n and not (lines[j].strip().startswith(mark) and not lines[j].strip().lstrip(mark[0])):
                j += 1
            end = min(j + 1, n)
            blocks.append(Block("code", i, end))
            i = end
            continue
        heading = _ATX.match(line)
        if heading:
            blocks.append(Block("heading", i, i + 1, len(heading.group(1)), heading.group(2)))
            i += 1
            continue
        j = i + 1
        while j < n and lines[j].strip() and not _FENCE.match(lines[j]) and not _ATX.match(lines[j]):
            j += 1
        blocks.append(Block("para", i, j))
        i = j
    return blocks


def rst_blocks(lines: list[str]) -> list[Block]:
    blocks: list[Block] = []
    styles: list[tuple[str, bool]] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        over = bool(_RST_UNDERLINE.match(line)) and i + 2 < n and bool(_RST_UNDERLINE.match(lines[i + 2]))
        text_i = i + 1 if over else i
        if (text_i + 1 < n and lines[text_i].strip() and not _RST_UNDERLINE.match(lines[text_i])
                and _RST_UNDERLINE.match(lines[text_i + 1])
                and len(lines[text_i + 1].strip()) >= len(lines[text_i].strip())):
            style = (lines[text_i + 1].strip()[0], over)
            if style not in styles:
                styles.append(style)
            blocks.append(Block("heading", i, text_i + 2, styles.index(style) + 1, lines[text_i].strip()))
            i = text_i + 2
            continue
        j = i + 1
        while j < n and lines[j].strip():
            j += 1
        literal = _RST_CODE.match(lines[i]) or lines[j - 1].rstrip().endswith("::")
        if literal:   # the indented block after "::" or a code directive belongs to it
            while j < n and (not lines[j].strip() or lines[j][:1] in " \t"):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1
        blocks.append(Block("code" if literal else "para", i, j))
        i = j
    return blocks


def text_blocks(lines: list[str]) -> list[Block]:
    blocks, i, n = [], 0, len(lines)
    while i < n:
        if not lines[i].strip():
            i += 1
            continue
        j = i + 1
        while j < n and lines[j].strip():
            j += 1
        blocks.append(Block("para", i, j))
        i = j
    return blocks


def python_blocks(lines: list[str], max_chars: int) -> list[Block]:
    """One code block per top-level definition (classes too big are split per member)."""
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return c_blocks(lines)
    blocks: list[Block] = []
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        end = node.end_lineno or node.lineno
        name = ""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"def {node.name}"
        elif isinstance(node, ast.ClassDef):
            name = f"class {node.name}"
        if blocks and start < blocks[-1].end:      # comment lines already taken
            start = blocks[-1].end
        if isinstance(node, ast.ClassDef) and sum(len(x) + 1 for x in lines[start:end]) > max_chars:
            first = node.body[0].lineno - 1 if node.body else end
            blocks.append(Block("code", start, first, name=name))
            for member in node.body:
                m_start = min([member.lineno] + [d.lineno for d in getattr(member, "decorator_list", [])]) - 1
                m_start = max(m_start, blocks[-1].end)
                m_name = getattr(member, "name", "")
                blocks.append(Block("code", m_start, member.end_lineno or m_start + 1,
                                    name=f"{name} > def {m_name}" if m_name else name))
            continue
        if not name and blocks and not blocks[-1].name:      # statements run together
            blocks[-1].end = end
        else:
            blocks.append(Block("code", start, end, name=name))
    return [b for b in blocks if b.end > b.start] or text_blocks(lines)


_C_NAME = re.compile(r"\.(?:entry|func)\s+(?:\([^)]*\)\s*)?(\w+)|\b(?:struct|class|union)\s+(\w+)|(\w+)\s*\(")
_C_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "catch", "static_assert",
               "decltype", "alignof", "__launch_bounds__", "__attribute__", "template"}


def _c_name(lines: list[str]) -> str:
    for line in lines:
        s = line.strip()
        if not s or s.startswith(("//", "/*", "*", "#include")):
            continue
        if s.startswith("#define"):
            return s.split()[1].split("(")[0] if len(s.split()) > 1 else ""
        for m in _C_NAME.finditer(s):
            name = next(g for g in m.groups() if g)
            if name not in _C_KEYWORDS:
                return name
    return ""


def c_blocks(lines: list[str]) -> list[Block]:
    """Brace-balanced regions ending at a blank line; named by the function they define."""
    blocks: list[Block] = []
    depth, start, n = 0, None, len(lines)
    for i, line in enumerate(lines):
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line.split("//")[0])
        if start is None:
            if not line.strip():
                continue
            start = i
        depth = max(depth + code.count("{") - code.count("}"), 0)
        if depth == 0 and (i + 1 == n or not lines[i + 1].strip()):
            blocks.append(Block("code", start, i + 1, name=_c_name(lines[start:i + 1])))
            start = None
    if start is not None:
        blocks.append(Block("code", start, n, name=_c_name(lines[start:n])))
    return blocks
