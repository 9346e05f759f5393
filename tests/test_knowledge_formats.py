"""Formats and chunking of the knowledge store (no embedding model, no Chroma)."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kernelrag.knowledge.chunking import chunk_document
from kernelrag.knowledge.formats import IngestFailure, SkipFile, classify, decode, extract

DOCS = Path(__file__).parent / "fixtures" / "knowledge" / "docs"


def make_pdf(pages: list[list[str]], title: str = "") -> bytes:
    """A small valid PDF, one text line per entry, written by hand (Helvetica, no compression)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, lines in enumerate(pages):
        shown = " T* ".join(f"({line}) Tj" for line in lines)
        stream = f"BT /F1 12 Tf 16 TL 72 720 Td {shown} ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources "
                       f"<< /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = None
    if title:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = len(objects)
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    trailer = b"<< /Size %d /Root 1 0 R" % (len(objects) + 1) + (b" /Info %d 0 R" % info if info else b"")
    out += b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return out


def chunks_of(path: Path, chunk_chars: int = 1800, data: bytes | None = None):
    action, fmt = classify(path)
    assert action == "read", (path, action, fmt)
    raw = decode(path, path.read_bytes() if data is None else data, 10**7)
    doc = extract(path, raw, fmt)
    return doc, chunk_document(doc, chunk_chars)


def assert_spans_match(path: Path, chunks) -> None:
    """Each chunk's first and last lines are the source file's lines at its span."""
    lines = path.read_text().split("\n")
    for chunk in chunks:
        text_lines = chunk.text.split("\n")
        assert lines[chunk.start_line - 1].strip() == text_lines[0].strip(), chunk
        assert lines[chunk.end_line - 1].strip() == text_lines[-1].strip(), chunk


def test_markdown_follows_headings_with_front_matter_and_spans():
    path = DOCS / "bank-conflicts.md"
    doc, chunks = chunks_of(path)
    assert (doc.title, doc.kind, doc.tags) == ("Shared-memory bank conflicts", "guide",
                                               ["shared-memory", "bank-conflicts"])
    assert [c.section for c in chunks] == ["Bank conflicts", "Bank conflicts > Padding",
                                          "Bank conflicts > Swizzling"]
    assert "title:" not in chunks[0].text          # front matter is not content
    assert_spans_match(path, chunks)


def test_fenced_code_is_never_split():
    path = DOCS / "bank-conflicts.md"
    _, chunks = chunks_of(path, chunk_chars=60)      # far smaller than the code block
    fence = [c for c in chunks if "```cuda" in c.text]
    assert len(fence) == 1
    assert "tile[32][33]" in fence[0].text and "tile[threadIdx.y]" in fence[0].text
    assert fence[0].text.count("```") == 2
    big = "# Big\n\n```python\n" + "\n\n".join(f"x{i} = {i}" for i in range(400)) + "\n```\n"
    md = DOCS / "virtual.md"
    _, chunks = chunks_of(md, chunk_chars=200, data=big.encode())
    assert len(chunks) == 1 and "x0 = 0" in chunks[0].text and "x399 = 399" in chunks[0].text


def test_long_prose_is_split_near_chunk_chars():
    text = "# Long\n\n" + "\n".join(f"Sentence number {i} talks about warps and banks." for i in range(200))
    _, chunks = chunks_of(DOCS / "virtual.md", chunk_chars=500, data=text.encode())
    assert len(chunks) > 10
    assert all(len(c.text) <= 500 for c in chunks)
    assert all(c.section == "Long" for c in chunks)
    assert chunks[1].start_line == chunks[0].end_line + 1


def test_rst_headings_and_literal_blocks():
    path = DOCS / "coalescing.rst"
    doc, chunks = chunks_of(path, chunk_chars=60)
    assert doc.title == "Global memory coalescing"
    sections = {c.section for c in chunks}
    assert "Global memory coalescing > Strided access" in sections
    literal = [c for c in chunks if "in[2 * threadIdx.x]" in c.text]
    assert len(literal) == 1 and "in[threadIdx.x];" in literal[0].text    # blank line inside kept
    assert_spans_match(path, chunks)


def test_html_strips_navigation_scripts_and_styles():
    path = DOCS / "site" / "index.html"
    doc, chunks = chunks_of(path)
    text = "\n".join(c.text for c in chunks)
    for marker in ("NAVMARKER", "SCRIPTMARKER", "FOOTERMARKER", "color: red", "¶"):
        assert marker not in text
    assert doc.title == "Tensor cores overview"
    assert [c.section for c in chunks] == ["Tensor cores", "Tensor cores > Fragments"]
    assert "mma.sync.aligned.m16n8k16" in chunks[1].text and "```" in chunks[1].text
    assert chunks[0].start_line == 9         # the <h1> line of the source


def test_pdf_text_with_page_spans():
    data = make_pdf([["Warp shuffles exchange registers.", "No shared memory is needed."],
                     ["Second page mentions ldmatrix."]], title="Shuffle notes")
    path = DOCS / "virtual.pdf"
    doc, chunks = chunks_of(path, data=data)
    assert doc.title == "Shuffle notes"
    text = "\n".join(c.text for c in chunks)
    assert "Warp shuffles exchange registers." in text and "ldmatrix" in text
    assert chunks[0].start_page == 1 and chunks[-1].end_page == 2
    assert all(c.start_line is None for c in chunks)


def test_gzip_reads_like_the_plain_file():
    plain = DOCS / "bank-conflicts.md"
    _, expected = chunks_of(plain)
    _, got = chunks_of(DOCS / "bank-conflicts.md.gz", data=gzip.compress(plain.read_bytes()))
    assert got == expected


def test_source_code_chunks_by_definition():
    _, chunks = chunks_of(DOCS / "reduce.cu", chunk_chars=400)
    assert [c.section for c in chunks] == ["warp_sum", "block_sum"]
    assert "__shfl_down_sync" in chunks[0].text and chunks[1].start_line == 10
    src = "import os\n\n\nclass A:\n    def f(self):\n        return 1\n\n\ndef g():\n    return 2\n"
    _, chunks = chunks_of(DOCS / "virtual.py", chunk_chars=60, data=src.encode())
    assert [c.section for c in chunks] == ["class A", "def g"]
    _, chunks = chunks_of(DOCS / "virtual.py", chunk_chars=25, data=src.encode())
    assert "class A > def f" in [c.section for c in chunks]       # a big class splits per member


def test_optimization_log_is_one_section_per_round():
    doc, chunks = chunks_of(DOCS / "opt-log.jsonl")
    assert doc.kind == "log" and "run42" in doc.title
    rounds = [c for c in chunks if c.section.endswith("Round 2")]
    assert rounds and rounds[0].start_line == 3
    assert "kernel_ms: 0.021 ms" in rounds[0].text
    with pytest.raises(SkipFile):
        chunks_of(DOCS / "questions.jsonl")


def test_skill_folder_files_are_skill_kind():
    root = DOCS / "skills" / "softmax_online"
    for name in ("skill.toml", "kernel.py", "reference.py", "alternatives/two_pass_reduction.py"):
        doc, chunks = chunks_of(root / name)
        assert doc.kind == "skill" and doc.title == "skill softmax_online" and chunks
    _, chunks = chunks_of(root / "kernel.py")
    text = "\n".join(c.text for c in chunks)
    assert "running max" in text and "return None" not in text       # docstrings only
    _, chunks = chunks_of(root / "skill.toml")
    assert "online_softmax" in chunks[0].text and "softmax[dim=-1]" in chunks[0].text


@pytest.mark.parametrize("name,reason", [
    ("logo.png", "image"), ("basic.css", "stylesheet"), ("app.js", "script"), ("app.js.map", "script"),
    ("searchindex.js", "search index or build data"), ("objects.inv", "search index or build data"),
    ("page.fjson", "search index or build data"), ("font.woff2", "font"), ("logo.svg.gz", "image"),
])
def test_non_text_formats_are_skipped(name, reason):
    assert classify(Path("/docs") / name) == ("skip", reason)


def test_unknown_extension_is_reported():
    assert classify(Path("/docs/data.bin")) == ("unknown", ".bin")


@pytest.mark.parametrize("name,data,fragment", [
    ("blob.txt", b"abc\x00\x01\x02" * 10, "binary file"),
    ("latin.md", "café crème".encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 3)"),
    ("empty.md", b"", "empty file"),
    ("blank.md", b"   \n\n", "empty file"),
    ("huge.txt", b"x" * 101, "too large (101 bytes > max_file_bytes 100)"),
    ("broken.md.gz", b"\x1f\x8b\x08\x00garbage", "corrupt gzip"),
    ("broken.pdf", b"%PDF-1.4\nthis is not really a pdf\n", "corrupt PDF"),
    ("badkind.md", b"---\nkind: recipe\n---\n# X\n\ntext\n", "kind 'recipe' is not one of"),
])
def test_bad_input_gives_one_line_reason(name, data, fragment):
    path = DOCS / name
    with pytest.raises(IngestFailure) as info:
        extract(path, decode(path, data, 100), classify(path)[1])
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_html_keeps_an_article_header_but_drops_page_chrome():
    page = (b"<html><body><header>SITEHEADER</header><article><header><h1>Split-K</h1></header>"
            b"<p>Split the reduction dimension across programs.</p></article><footer>FOOT</footer></body></html>")
    _, chunks = chunks_of(DOCS / "virtual.html", data=page)
    text = "\n".join(c.text for c in chunks)
    assert chunks[0].section == "Split-K" and "Split the reduction" in text
    assert "SITEHEADER" not in text and "FOOT" not in text


def test_skill_helper_without_docstrings_is_indexed_as_code(tmp_path):
    root = tmp_path / "softmax_online"
    root.mkdir()
    (root / "skill.toml").write_text('name = "softmax_online"\nsummary = "x"\n')
    (root / "kernel.py").write_text("def launch(x):\n    return x\n")
    (root / "helpers.py").write_text("def pad(n):\n    return n + 1\n")
    for name in ("kernel.py", "helpers.py"):
        doc, chunks = chunks_of(root / name)
        assert doc.kind == "skill" and "return" in chunks[0].text
