"""HTML (BeautifulSoup, navigation and scripts stripped) and PDF (pypdf, page spans) to lines."""
from __future__ import annotations

import io
import logging
import re
from pathlib import Path

from kernelrag.knowledge.models import Extracted, IngestFailure

_DROP_TAGS = ["script", "style", "nav", "noscript", "svg", "form", "button", "iframe", "aside", "template",
              "link", "meta"]
_PAGE_CHROME = ["header", "footer"]      # dropped unless inside the article (where a header holds its title)
_DROP_SELECTORS = (".sphinxsidebar, .related, a.headerlink, .headerlink, .breadcrumbs, .toctree-wrapper, "
                   "[role=navigation], [role=search], .wy-nav-side, .rst-footer-buttons, .navbar, .sidebar")
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_BLOCKS = {"p", "div", "section", "article", "main", "li", "ul", "ol", "dl", "dt", "dd", "table", "thead",
           "tbody", "tr", "blockquote", "figure", "figcaption", "body", "html", "br", "hr", "caption", "details",
           "summary"}
_CELLS = {"td", "th"}
_SPACE = re.compile(r"\s+")


class _HtmlLines:
    """Walks the kept part of a page, emitting Markdown-like lines with source line numbers."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.nos: list[int] = []
        self.inline: list[str] = []
        self.inline_no = 0
        self.prefix = ""

    def emit(self, text: str, no: int) -> None:
        self.lines.append(text)
        self.nos.append(max(no, 1))

    def flush(self) -> None:
        text = _SPACE.sub(" ", "".join(self.inline)).strip(" |")
        if text:
            self.emit(self.prefix + text, self.inline_no)
            self.emit("", self.inline_no)
        self.inline, self.inline_no, self.prefix = [], 0, ""

    def walk(self, node) -> None:
        from bs4 import NavigableString, Tag
        from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction

        for child in node.children:
            if isinstance(child, (Comment, Declaration, Doctype, ProcessingInstruction)):
                continue
            if isinstance(child, NavigableString):
                if str(child).strip():
                    self.inline_no = self.inline_no or (node.sourceline or 1)
                self.inline.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            no = child.sourceline or node.sourceline or 1
            if child.name in _HEADINGS:
                self.flush()
                text = _SPACE.sub(" ", child.get_text(" ")).replace("¶", "").strip()
                if text:
                    self.emit("#" * _HEADINGS[child.name] + " " + text, no)
                    self.emit("", no)
            elif child.name == "pre":
                self.flush()
                code = child.get_text().strip("\n").split("\n")
                self.emit("```", no)
                for i, line in enumerate(code):
                    self.emit(line.rstrip(), no + i)
                self.emit("```", no + len(code) - 1)
                self.emit("", no + len(code) - 1)
            elif child.name in _CELLS:
                self.inline.append(" | ")
                self.walk(child)
            elif child.name in _BLOCKS:
                self.flush()
                if child.name == "li":
                    self.prefix = "- "
                self.walk(child)
                self.flush()
            else:
                self.walk(child)


def extract_html(text: str, path: Path) -> Extracted:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for tag in soup.select(_DROP_SELECTORS):
        tag.decompose()
    for tag in soup.find_all(_PAGE_CHROME):
        if not tag.decomposed and tag.find_parent(["main", "article"]) is None:
            tag.decompose()
    if soup.title:
        soup.title.decompose()
    root = (soup.find("main") or soup.find(attrs={"role": "main"})
            or soup.find("div", class_="body") or soup.body or soup)
    walker = _HtmlLines()
    walker.walk(root)
    walker.flush()
    if not any(line.strip() for line in walker.lines):
        raise IngestFailure("no text in HTML once navigation, scripts and styles are removed")
    if not title:
        title = next((line.lstrip("#").strip() for line in walker.lines if line.startswith("# ")), "")
    return Extracted(walker.lines, "markdown", "html", line_nos=walker.nos, title=title)


def extract_pdf(data: bytes, path: Path) -> Extracted:
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise IngestFailure("encrypted PDF (needs a password); decrypt it first")
        texts = [page.extract_text() or "" for page in reader.pages]
        meta_title = (reader.metadata.title if reader.metadata else None) or ""
    except IngestFailure:
        raise
    except Exception as exc:  # pypdf raises many types on damaged files
        reason = str(exc).split("\n")[0][:160]
        raise IngestFailure(f"corrupt PDF ({type(exc).__name__}: {reason}); re-export it") from None
    lines: list[str] = []
    pages: list[int] = []
    for number, text in enumerate(texts, 1):
        for line in text.replace("\r\n", "\n").split("\n"):
            lines.append(line.rstrip())
            pages.append(number)
        lines.append("")
        pages.append(number)
    if not any(line.strip() for line in lines):
        raise IngestFailure("PDF has no extractable text (scanned images?); OCR it first")
    title = str(meta_title).strip() or next((line.strip() for line in lines if line.strip()), "")
    return Extracted(lines, "text", "pdf", pages=pages, title=title[:200])
