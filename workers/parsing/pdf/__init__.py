"""PDF through PyMuPDF, with OCR (tesseract) for pages that have no text layer.

Two passes.  The first reads every page's text lines (font size, weight,
monospace, box), its tables and, for a page without a text layer, its OCR
words.  The second decides with the whole document in view:

* **furniture**: lines in the top or bottom margin whose shape (digits
  masked) repeats on many pages, or that read like a page number, a date
  stamp or a version banner, are dropped.  A release that bumps the banner
  on every page therefore changes no block;
* **headings**: the body size is the most common font size of the document;
  clearly larger sizes are heading levels (largest first), short bold lines
  at body size the level below them;
* **reading order**: two-column pages are read column by column, between the
  full-width lines and tables that separate them;
* **tables**: ``find_tables`` on pages that look tabular (ruled lines:
  the fast line strategy; aligned columns of words: the layout model),
  rows read from ``to_markdown()`` (exact where ``extract()`` mangles
  "1,200"), a "Table 3: ..." line above a table is its caption, and a table
  that continues at the top of the next page with the same columns is
  joined to it (a repeated header row is dropped);
* **page breaks**: a paragraph or list item cut by a page break is joined
  again (the text before the break does not end a sentence, the text after
  it starts in lower case, or the last line was filled to the margin), so a
  reflow that moves a break changes no block.  A break that falls right
  after a sentence, on a line that happens to end short, reads as a
  paragraph end: on the page the two cases look the same.

* **running heads**: besides repeated margin lines (three pages suffice:
  Texinfo's "Chapter 3: Objects" changes with the chapter), a margin line
  "Chapter N: <a title of the outline>" is furniture; scanned pages get the
  same removal on their OCR rows (fuzzy, to survive misreadings);
* **tables**: a header row needs evidence (bold, or a numeric column under a
  word); without it the table is ``headerless`` and its columns are named
  by position.  A prose line taken in as a first or last row is given back.
  The sentence introducing a table on its page is its caption when it has
  none, so every chunk of the table carries it.  Rule-less listings the
  detector misses are found by column alignment (:mod:`.ocr_layout`);
* **code**: a comment set on a code line's baseline stays on that line,
  aligned; a block is dedented to its own margin, first line included.

Scanned pages are read by tesseract (:mod:`.ocr`, page segmentation modes
tried in turn, ``PdfOptions.ocr_psm``) and laid out from the word boxes
(:mod:`.ocr_layout`: rows, tables, code).  Their headings need evidence
beyond one row's height: the outline naming the row on that page, or
numbering like the text pages' headings ("3.2.1"), whose level they then
take; height alone counts only when the document has neither outline nor
heading sizes.

Every block carries the page it starts on, and a block running over a page
break records where each page starts in its text (``page_breaks``), so a
chunk cut from it can cite its own pages.  OCR'd blocks carry ``ocr``, the
page's ``ocr_confidence``, their own ``ocr_block_confidence`` and
``low_confidence_tokens`` (numbers, amounts and commands tesseract was
unsure of).  A page under ``ocr_page_floor`` is listed in
``meta["ocr_low_confidence_pages"]`` and ``meta["warnings"]``.

The package: :mod:`.options` (what a PDF is read with), :mod:`.read` (the
first pass), :mod:`.tables`, :mod:`.assemble` (the second pass) and
:mod:`.scanned` (scanned pages into blocks); :mod:`.page` holds what the
first pass reads and the patterns both passes share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.core.types import ParsedDocument
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.ocr import ocr_available, ocr_page
from freshindex.workers.parsing.pdf.assemble import Assembler
from freshindex.workers.parsing.pdf.options import OcrDeferred, PdfOptions
from freshindex.workers.parsing.pdf.page import Page
from freshindex.workers.parsing.pdf.read import read_page
from freshindex.workers.parsing.streams import check_pdf_streams

if TYPE_CHECKING:  # PyMuPDF is imported by parse_pdf only: it costs ~0.3-1 s of start-up (its layout models)
    import pymupdf

VERSION = "pdf-4"  # pdf-4: code up to its comment is code; tables joined across scanned pages

__all__ = ["OcrDeferred", "PdfOptions", "ocr_available", "parse_pdf"]


def parse_pdf(data: bytes, key: str, options: PdfOptions | None = None) -> ParsedDocument:
    opts = options or PdfOptions()
    if b"%PDF-" not in data[:1024]:
        raise DocumentError(DocumentError.PARSE_FAILED, "not a PDF: no %PDF- header in the first 1024 bytes")
    import pymupdf  # here, not at module level: importing the pipeline must not load it

    # MuPDF's warnings (a repaired xref, a broken stream) tell a damaged file
    # from an empty one; they are process-wide, so start from none.
    pymupdf.TOOLS.reset_mupdf_warnings()
    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # pymupdf raises FileDataError/RuntimeError variants
        raise DocumentError(DocumentError.PARSE_FAILED, f"not a readable PDF: {exc}") from exc
    with doc:
        if doc.needs_pass or doc.is_encrypted:
            raise DocumentError(DocumentError.ENCRYPTED, "the PDF is encrypted (password protected)")
        if doc.page_count > opts.max_pages:
            raise DocumentError(DocumentError.TOO_LARGE, f"{doc.page_count} pages, limit {opts.max_pages}")
        if doc.page_count == 0:
            # A PDF writer cannot produce a document without pages: the page tree is damaged.
            raise DocumentError(DocumentError.PARSE_FAILED, f"no page of the PDF could be found{_damage(doc)}")
        check_pdf_streams(doc, len(data))
        title = (doc.metadata or {}).get("title") or ""
        pages: list[Page] = []
        ocr_pages: list[int] = []
        skipped_ocr: list[int] = []
        broken: list[int] = []
        for index in range(doc.page_count):
            limits.check_time(f"page {index + 1}")
            try:
                page = doc.load_page(index)
                content = read_page(page, opts)
            except DocumentError:
                raise
            except Exception:  # one damaged page: note it and read the rest
                broken.append(index + 1)
                continue
            if content.ocr is None and not content.lines and not content.tables and _looks_scanned(page):
                if opts.defer_ocr and len(ocr_pages) < opts.max_ocr_pages:
                    raise OcrDeferred(index + 1)
                if not ocr_available():
                    raise DocumentError(DocumentError.OCR_UNAVAILABLE,
                                        f"page {index + 1} is scanned and tesseract is not installed")
                if len(ocr_pages) >= opts.max_ocr_pages:
                    skipped_ocr.append(index + 1)
                    continue
                content.ocr = ocr_page(page, language=opts.ocr_language, dpi=opts.ocr_dpi, psms=opts.ocr_psm,
                                       retry_fragmentation=opts.ocr_retry_fragmentation,
                                       retry_confidence=opts.ocr_retry_confidence)
                ocr_pages.append(index + 1)
            pages.append(content)
        if broken and len(broken) == doc.page_count:
            raise DocumentError(DocumentError.PARSE_FAILED, "no page of the PDF could be read")
        toc = [(int(lvl), str(t), int(pg)) for lvl, t, pg, *_ in doc.get_toc(simple=True)][:5000]
        blocks = Assembler(pages, opts, toc).blocks()
        damage = _damage(doc)
        if not blocks and damage:
            raise DocumentError(DocumentError.PARSE_FAILED, f"no text could be read from the PDF{damage}")
        if not title:
            title = next((b.text for b in blocks if b.kind == BlockKind.HEADING), key.rsplit("/", 1)[-1])
        meta: dict[str, Any] = {"pages": doc.page_count, "ocr_pages": ocr_pages}
        conf = {p.number: p.ocr.confidence for p in pages if p.ocr is not None}
        if conf:
            meta["ocr_confidence"] = conf
            meta["ocr_psm"] = {p.number: p.ocr.psm for p in pages if p.ocr is not None}
            meta["ocr_tried"] = {p.number: p.ocr.tried for p in pages if p.ocr is not None}
            low = sorted(n for n, c in conf.items() if c < opts.ocr_page_floor)
            if low:
                meta["ocr_low_confidence_pages"] = low
                meta["warnings"] = [*meta.get("warnings", []), *(
                    f"page {n}: OCR confidence {conf[n]:.2f} is under the floor {opts.ocr_page_floor:.2f}"
                    for n in low)]
        if skipped_ocr:
            meta["ocr_skipped_pages"] = skipped_ocr
        if broken:
            meta["unreadable_pages"] = broken
        return ParsedDocument(title=title, blocks=tuple(blocks), parser="pdf", parser_version=VERSION, meta=meta)


def _damage(doc: pymupdf.Document) -> str:
    """What MuPDF said was wrong with the file while reading it ("" when nothing)."""
    import pymupdf

    said = [ln.strip() for ln in (pymupdf.TOOLS.mupdf_warnings() or "").splitlines()
            if ln.strip() and not ln.startswith("...")]
    if not said and not doc.is_repaired:
        return ""
    return ": the file is damaged (" + "; ".join(dict.fromkeys(said[:3]) or ["MuPDF had to repair it"]) + ")"


def _looks_scanned(page: pymupdf.Page) -> bool:
    return bool(page.get_images())
