"""Pack blocks into chunks that follow headings and keep code blocks whole.

A heading always starts a new chunk (a heading with no body of its own joins the
next chunk, so "# Title" then "## Part" make one chunk under "Title > Part").
Within a section, blocks are packed up to ``chunk_chars``. A fenced code block
is never split, however long. An over-long paragraph, or an over-long region of
a source file, is split at line (then character) boundaries. Each chunk keeps its
heading path and its line span (or page span for PDFs).
"""
from __future__ import annotations

from kernelrag.knowledge.blocks import (Block, c_blocks, markdown_blocks, python_blocks, rst_blocks,
                                        text_blocks)
from kernelrag.knowledge.formats import Extracted
from kernelrag.knowledge.models import Chunk


def blocks_for(doc: Extracted, chunk_chars: int) -> list[Block]:
    if doc.syntax == "markdown":
        return markdown_blocks(doc.lines)
    if doc.syntax == "rst":
        return rst_blocks(doc.lines)
    if doc.syntax == "python":
        return python_blocks(doc.lines, chunk_chars)
    if doc.syntax == "c":
        return c_blocks(doc.lines)
    return text_blocks(doc.lines)


def _size(lines: list[str], block: Block) -> int:
    return sum(len(line) + 1 for line in lines[block.start:block.end])


def _split_long(lines: list[str], block: Block, chunk_chars: int) -> list[Block]:
    """Cut an over-long paragraph (or source region) into pieces of whole lines,
    preferring blank lines as cut points in source code."""
    pieces: list[Block] = []
    start, size, last_blank = block.start, 0, None
    for i in range(block.start, block.end):
        size += len(lines[i]) + 1
        if not lines[i].strip():
            last_blank = i
        if size > chunk_chars and i > start:
            cut = last_blank + 1 if last_blank is not None and last_blank > start else i
            pieces.append(Block(block.kind, start, cut, name=block.name))
            start, last_blank = cut, None
            size = sum(len(line) + 1 for line in lines[start:i + 1])
    pieces.append(Block(block.kind, start, block.end, name=block.name))
    return [p for p in pieces if p.end > p.start]


def _cut_text(text: str, chunk_chars: int) -> list[str]:
    """A single line longer than a chunk: cut at sentence ends, else spaces."""
    out: list[str] = []
    while len(text) > chunk_chars:
        window = text[:chunk_chars]
        cut = max(window.rfind(". "), window.rfind("; "))
        cut = cut + 1 if cut > chunk_chars // 3 else (window.rfind(" ") if window.rfind(" ") > 0 else chunk_chars)
        out.append(text[:cut].strip())
        text = text[cut:].strip()
    return out + ([text] if text.strip() else [])


class _Packer:
    def __init__(self, doc: Extracted, chunk_chars: int) -> None:
        self.doc, self.chunk_chars = doc, chunk_chars
        self.chunks: list[Chunk] = []
        self.blocks: list[Block] = []
        self.size = 0
        self.section = ""

    def span(self, first: int, last: int) -> dict:
        if self.doc.pages is not None:
            return {"start_page": self.doc.pages[first], "end_page": self.doc.pages[last]}
        nos = self.doc.line_nos
        return {"start_line": nos[first] if nos else first + 1, "end_line": nos[last] if nos else last + 1}

    def close(self) -> None:
        if not self.blocks or all(b.kind == "heading" for b in self.blocks):
            return
        lines = self.doc.lines
        first, last = self.blocks[0].start, self.blocks[-1].end - 1
        while last > first and not lines[last].strip():
            last -= 1
        text = "\n".join(lines[first:last + 1]).strip("\n")
        section = self.section
        if self.doc.syntax in {"python", "c"}:
            names = list(dict.fromkeys(b.name for b in self.blocks if b.name))
            section = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        if len(text) > self.chunk_chars and len(self.blocks) == 1 and self.blocks[0].end - first == 1:
            for piece in _cut_text(text, self.chunk_chars):     # one huge line
                self.chunks.append(Chunk(piece, section, **self.span(first, last)))
        elif text.strip():
            self.chunks.append(Chunk(text, section, **self.span(first, last)))
        self.blocks, self.size = [], 0

    def add(self, block: Block, size: int) -> None:
        if any(b.kind != "heading" for b in self.blocks) and self.size + size > self.chunk_chars:
            self.close()
        if (self.doc.syntax in {"python", "c"} and self.blocks and block.name
                and self.blocks[-1].name != block.name and self.size > self.chunk_chars // 3):
            self.close()          # keep definitions apart unless they are tiny
        self.blocks.append(block)
        self.size += size


# A list of references is provenance, not content: it joins the chunk before it rather
# than becoming a chunk (and a citation) of its own.
REFERENCE_HEADINGS = {"sources", "references", "bibliography", "further reading"}


def chunk_document(doc: Extracted, chunk_chars: int) -> list[Chunk]:
    """The chunks of one extracted document, in order."""
    packer = _Packer(doc, chunk_chars)
    stack: dict[int, str] = {}
    for block in blocks_for(doc, chunk_chars):
        if (block.kind == "heading" and doc.syntax in {"markdown", "rst"} and packer.blocks
                and block.name.strip().lower() in REFERENCE_HEADINGS):
            packer.add(Block("para", block.start, block.end), _size(doc.lines, block))
            continue
        if block.kind == "heading":
            if any(b.kind != "heading" for b in packer.blocks):
                packer.close()
            stack = {lvl: name for lvl, name in stack.items() if lvl < block.level}
            stack[block.level] = block.name
            packer.section = " > ".join(stack[lvl] for lvl in sorted(stack))
            packer.blocks.append(block)
            packer.size += _size(doc.lines, block)
            continue
        size = _size(doc.lines, block)
        fenced = block.kind == "code" and doc.syntax in {"markdown", "rst"}
        if size > chunk_chars and not fenced:
            for piece in _split_long(doc.lines, block, chunk_chars):
                packer.add(piece, _size(doc.lines, piece))
        else:
            packer.add(block, size)
    packer.close()
    return packer.chunks
