"""Scanned pages into blocks, from the layout of their OCR words (:mod:`workers.parsing.ocr_layout`).

Paragraphs, lists, tables and code as on text pages; headings only on
evidence (the outline, numbering like the text pages' headings); margin rows
that are furniture dropped, fuzzily, to survive misreadings.  Every block
carries the page's and its own OCR confidence and the tokens tesseract was
unsure of.
"""

from __future__ import annotations

import difflib
from collections import Counter
from typing import TYPE_CHECKING, Any

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, BlockMeta, block_meta
from freshindex.workers.parsing import ocr_layout
from freshindex.workers.parsing.boilerplate import is_volatile, shape
from freshindex.workers.parsing.ocr import OcrLine, low_confidence_tokens
from freshindex.workers.parsing.pdf.page import (
    ADMONITION,
    BULLET,
    FOOTNOTE,
    MARGIN,
    NUMBERED,
    TERMINAL,
    Page,
    Table,
    dehyphenate,
    norm,
)

if TYPE_CHECKING:
    from freshindex.workers.parsing.pdf.assemble import Assembler


class ScannedPages:
    """Writes the blocks of scanned pages into the document's :class:`Assembler`,
    whose heading path, open block and last table text pages share."""

    def __init__(self, doc: Assembler) -> None:
        self.doc = doc
        self.ocr_furniture = self._furniture_shapes()

    def _furniture_shapes(self) -> set[str]:
        """Shapes of margin rows repeating on scanned pages (digits masked), as for text pages."""
        counts: Counter[str] = Counter()
        scans = [p for p in self.doc.pages if p.ocr is not None]
        for p in scans:
            rows = ocr_layout.rows_of(p.ocr.words) if p.ocr else []
            counts.update({shape(r.text) for r in rows if self._row_in_margin(r, p)})
        return {s for s, n in counts.items() if n >= 2}

    @staticmethod
    def _row_in_margin(row: ocr_layout.Row, page: Page) -> bool:
        return row.bottom <= page.height * (MARGIN + 0.02) or row.top >= page.height * (1 - MARGIN - 0.02)

    def _is_furniture(self, row: ocr_layout.Row, page: Page) -> bool:
        if not self._row_in_margin(row, page):
            return False
        text = row.text
        if is_volatile(text) or self.doc.running_head(text) or shape(text) in self.doc.furniture:
            return True
        s = shape(text)
        known = self.doc.furniture | self.ocr_furniture
        return (s in self.ocr_furniture and len(text) > 3) or any(
            difflib.SequenceMatcher(None, s, f).ratio() >= 0.85 for f in known if abs(len(f) - len(s)) < 8)

    @staticmethod
    def _footnote(row: ocr_layout.Row, page: Page, body_h: float) -> bool:
        return row.height < body_h * 0.95 and row.top > page.height * 0.55 and bool(FOOTNOTE.match(row.text))

    def page_blocks(self, page: Page) -> None:
        """A scanned page from its layout: paragraphs, lists, tables and code, headings only on evidence.

        A row is a heading when the outline names it on this page (or the
        next: the outline's page may be off by one), or when it is numbered
        like the text pages' headings ("3.2.1 Title"), short, unpunctuated
        and taller than the body rows.  Its level is the outline's or the
        numbering depth's level on the text pages.  Margin rows that are
        furniture (running heads, page numbers) are dropped first.
        """
        ocr = page.ocr
        assert ocr is not None
        items = ocr_layout.layout(ocr.words)
        if not items:
            return
        body_h = sorted(r.height for it in items for r in it.rows)[sum(len(it.rows) for it in items) // 2]
        first = True
        for item in items:
            rows = [r for r in item.rows if not self._is_furniture(r, page)]
            if not rows:
                continue
            meta = self._meta(rows, page)
            at_top, first = first, False
            if item.kind == "table":
                self.doc.close()
                cells = item.cells
                header = ocr_layout.has_header(cells)
                table = Table(cells[0] if header else [], cells[1:] if header else cells, 0, 0, 0, 0,
                              headerless=not header)
                self.doc.table(table, page.number, at_top=at_top, ocr_meta=meta)
                continue
            if not all(self._footnote(r, page, body_h) for r in rows):
                self.doc.last_table = None
            if item.kind == "code":
                self.doc.close()
                self.doc.emit(BlockKind.CODE, item.code, page.number, **meta)
                continue
            para: list[ocr_layout.Row] = []
            for n, row in enumerate(rows):
                level = self._heading_level(row, page.number, body_h)
                if level:
                    self._paragraph(para, page)
                    para = []
                    text = NUMBERED.sub(r"\1 \2", row.text.strip())
                    self.doc.set_heading(text, level)
                    self.doc.out.append(Block(BlockKind.HEADING, text, self.doc.hp(), page=page.number,
                                          meta=block_meta({**self._meta([row], page), "level": level})))
                    continue
                prev = rows[n - 1] if n else None
                gap = row.top - prev.bottom if prev is not None else 0.0
                # A paragraph's first line is indented under a line that ended a sentence; the
                # indented lines of a definition's text go on from the term above them.
                indented = prev is not None and row.x0 > prev.x0 + 1.5 * max(row.pitch, 3.0) \
                    and prev.text.rstrip().endswith(TERMINAL)
                if para and (gap > body_h * 0.9 or indented or BULLET.match(row.text)):
                    self._paragraph(para, page)
                    para = []
                para.append(row)
            self._paragraph(para, page)

    def _meta(self, rows: list[ocr_layout.Row], page: Page) -> dict[str, Any]:
        words = [w for r in rows for w in r.words]
        meta: dict[str, Any] = {"ocr": True, "ocr_confidence": page.ocr.confidence if page.ocr else 0.0,
                                "ocr_block_confidence": ocr_layout.confidence(words)}
        flagged = [t for r in rows for t in low_confidence_tokens(
            OcrLine(r.text, tuple(r.words), 0, 0, r.height, r.top, r.x0), self.doc.opts.ocr_low_confidence, page.number)]
        if flagged:
            meta["low_confidence_tokens"] = flagged
        return meta

    def _paragraph(self, rows: list[ocr_layout.Row], page: Page) -> None:
        if not rows:
            return
        self.doc.close()
        text = dehyphenate([r.text for r in rows])
        meta = self._meta(rows, page)
        if BULLET.match(text):
            kind = BlockKind.LIST
            meta["items"] = [text]
        elif ADMONITION.match(text):
            kind = BlockKind.ADMONITION
        else:
            kind = BlockKind.PARAGRAPH
        self.doc.out.append(Block(kind, text, self.doc.hp(), page=page.number, meta=block_meta(meta)))

    def _heading_level(self, row: ocr_layout.Row, page: int, body_h: float) -> int:
        text = row.text.strip()
        words = text.split()
        if not words or len(words) > 12 or text.endswith((".", ",", ";", ":")) or len(row.segments) > 1:
            return 0
        m = NUMBERED.match(text)
        title = norm(m.group(2) if m else text)
        for level, toc_title, toc_page in self.doc.toc:
            if toc_page in (page, page - 1, page + 1) and title and \
                    difflib.SequenceMatcher(None, title, norm(NUMBERED.sub(r"\2", toc_title))).ratio() >= 0.88:
                depth = m.group(1).count(".") + 1 if m else level
                return self.doc.depth_levels.get(depth, depth)
        if m and row.height >= body_h * 1.1 and m.group(2)[:1].isupper():
            depth = m.group(1).count(".") + 1
            return self.doc.depth_levels.get(depth, depth)
        if not self.doc.toc and not self.doc.levels and len(words) <= 8 and row.height >= body_h * 1.4:
            # No outline and no heading sizes on text pages: the row's size is the only evidence there is.
            return 1 if row.height >= body_h * 1.8 else 2
        return 0


def joined_ocr(first: BlockMeta | dict[str, Any], second: dict[str, Any] | None) -> dict[str, Any]:
    """The OCR meta of a table joined across a page break: OCR'd if either part was, the lower confidence."""
    parts = [m for m in (first, second or {}) if m.get("ocr")]
    if not parts:
        return {}
    out: dict[str, Any] = {"ocr": True, "ocr_confidence": min(m.get("ocr_confidence", 1.0) for m in parts)}
    tokens = [t for m in parts for t in m.get("low_confidence_tokens", [])]
    if tokens:
        out["low_confidence_tokens"] = tokens
    return out

