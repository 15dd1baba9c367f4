"""PDF through PyMuPDF, with OCR (tesseract) for pages that have no text layer.

Each text block becomes a paragraph with its page number; lines set in a
clearly larger or bold font than the page's body text become headings.
Pages without a text layer are rendered at ``ocr_dpi`` and read by
tesseract through PyMuPDF; their blocks carry ``ocr: true`` so answers built
on them can be labelled.
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass

import pymupdf

from core.errors import DocumentError
from core.types import Block, ParsedDocument

VERSION = "pdf-1"


@dataclass(frozen=True)
class PdfOptions:
    max_pages: int = 2000
    max_ocr_pages: int = 50
    ocr_language: str = "eng"
    ocr_dpi: int = 300


def ocr_available() -> bool:
    return shutil.which("tesseract") is not None


def parse_pdf(data: bytes, key: str, options: PdfOptions | None = None) -> ParsedDocument:
    opts = options or PdfOptions()
    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # pymupdf raises FileDataError/RuntimeError variants
        raise DocumentError(DocumentError.PARSE_FAILED, f"not a readable PDF: {exc}") from exc
    with doc:
        if doc.needs_pass or doc.is_encrypted:
            raise DocumentError(DocumentError.ENCRYPTED, "the PDF is encrypted (password protected)")
        if doc.page_count > opts.max_pages:
            raise DocumentError(DocumentError.TOO_LARGE, f"{doc.page_count} pages, limit {opts.max_pages}")
        title = (doc.metadata or {}).get("title") or ""
        blocks: list[Block] = []
        ocr_pages: list[int] = []
        skipped_ocr: list[int] = []
        path: list[tuple[float, str]] = []
        for index in range(doc.page_count):
            page = doc.load_page(index)
            number = index + 1
            page_blocks = _text_blocks(page, number, path)
            if not page_blocks and page.get_images():
                if not ocr_available():
                    raise DocumentError(DocumentError.OCR_UNAVAILABLE,
                                        f"page {number} is scanned and tesseract is not installed")
                if len(ocr_pages) >= opts.max_ocr_pages:
                    skipped_ocr.append(number)
                    continue
                page_blocks = _ocr_blocks(page, number, opts, tuple(t for _, t in path))
                ocr_pages.append(number)
            blocks.extend(page_blocks)
        if not title:
            title = next((b.text for b in blocks if b.kind == "heading"), key.rsplit("/", 1)[-1])
        meta = {"pages": doc.page_count, "ocr_pages": ocr_pages}
        if skipped_ocr:
            meta["ocr_skipped_pages"] = skipped_ocr
        return ParsedDocument(title=title, blocks=tuple(blocks), parser="pdf", parser_version=VERSION, meta=meta)


def _text_blocks(page: pymupdf.Page, number: int, path: list[tuple[float, str]]) -> list[Block]:
    data = page.get_text("dict", sort=True)
    lines = []
    for block in data.get("blocks", []):
        if block.get("type") != 0:
            continue
        for line in block.get("lines", []):
            spans = [s for s in line.get("spans", []) if s.get("text", "").strip()]
            if not spans:
                continue
            text = "".join(s["text"] for s in spans).strip()
            size = max(s["size"] for s in spans)
            bold = all(s.get("flags", 0) & 16 for s in spans)
            lines.append((block["number"], text, size, bold))
    if not lines:
        return []
    body = statistics.median(size for _, _, size, _ in lines)
    out: list[Block] = []
    para: list[str] = []
    para_block = None

    def flush() -> None:
        if para:
            out.append(Block("paragraph", " ".join(para), tuple(t for _, t in path), page=number))
            para.clear()

    for bno, text, size, bold in lines:
        is_heading = (size >= body * 1.15 or (bold and size >= body)) and len(text) < 120
        if is_heading:
            flush()
            while path and path[-1][0] <= size:
                path.pop()
            path.append((size, text))
            out.append(Block("heading", text, tuple(t for _, t in path), page=number))
            para_block = None
            continue
        if para_block is not None and bno != para_block:
            flush()
        para_block = bno
        para.append(text)
    flush()
    return out


def _ocr_blocks(page: pymupdf.Page, number: int, opts: PdfOptions, heading_path: tuple[str, ...]) -> list[Block]:
    try:
        textpage = page.get_textpage_ocr(language=opts.ocr_language, dpi=opts.ocr_dpi, full=True)
    except Exception as exc:
        raise DocumentError(DocumentError.PARSE_FAILED, f"OCR failed on page {number}: {exc}") from exc
    blocks = []
    for b in page.get_text("blocks", textpage=textpage, sort=True):
        text = " ".join(b[4].split())
        if text:
            blocks.append(Block("paragraph", text, heading_path, page=number, meta={"ocr": True}))
    return blocks
