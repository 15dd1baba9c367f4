"""Tables on a text page: ``find_tables`` where the page looks tabular (ruled
lines, aligned columns), rule-less listings by column alignment, cell texts
from the page's words, a header row only on evidence."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from freshindex.workers.parsing import ocr_layout
from freshindex.workers.parsing.ocr import OcrWord
from freshindex.workers.parsing.pdf.page import Line, Table

if TYPE_CHECKING:  # imported where a page is read: see workers/parsing/pdf/__init__.py
    import pymupdf


def code_table(table: Table, lines: list[Line]) -> bool:
    """Whether most lines inside ``table`` are set as code (monospaced up to their comments)."""
    inside = [ln for ln in lines if in_table(ln, table)]
    return bool(inside) and sum(1 for ln in inside if ln.mono) * 3 >= len(inside) * 2


def in_table(line: Line, table: Table) -> bool:
    cy = (line.y0 + line.y1) / 2
    cx = (line.x0 + line.x1) / 2
    return table.y0 - 1 <= cy <= table.y1 + 1 and table.x0 - 1 <= cx <= table.x1 + 1


def find_tables(page: pymupdf.Page, lines: list[Line]) -> list[Table]:
    """Tables on pages that look tabular; the layout model only where needed (it costs ~0.4 s a page)."""
    ruled = 0
    for d in page.get_cdrawings():
        for item in d.get("items", ()):
            if item[0] == "l":
                (ax, ay), (bx, by) = item[1], item[2]
                w, h = abs(bx - ax), abs(by - ay)
            elif item[0] == "re":
                x0, y0, x1, y1 = item[1]
                w, h = abs(x1 - x0), abs(y1 - y0)
            else:
                continue
            if (w < 2.5 or h < 2.5) and max(w, h) > 8:
                ruled += 1
    found = None
    try:
        if ruled >= 6:
            found = page.find_tables(strategy="lines", use_layout=False, clip=_ruled_area(page))
        elif _aligned_columns(page):
            found = page.find_tables()
    except Exception:  # table detection is best effort: the text is still read as paragraphs
        return []
    if found is None or not found.tables:
        return _aligned_tables(page) if ruled < 6 else []
    words = page.get_text("words")
    tables = []
    for t in found.tables:
        rows = _cell_rows(t, words)
        x0, y0, x1, y1 = t.bbox
        # A prose line the detector took in as a first or last row (one cell, a sentence) is given back.
        start = 0
        while rows and _prose_row(rows[0]):
            rows.pop(0)
            start += 1
            y0 = t.rows[start].bbox[1] if rows else y1
        while rows and _prose_row(rows[-1]):
            rows.pop()
            y1 = t.rows[start + len(rows) - 1].bbox[3] if rows else y0
        if len(rows) < 2 or max(len(r) for r in rows) < 2:
            continue
        header_ok = _bold_row(page, t.rows[start].bbox) or \
            ocr_layout.has_header(rows)
        if header_ok:
            header, body = rows[0], [r for r in rows[1:] if any(r)]
        else:
            header, body = [], [r for r in rows if any(r)]
        tables.append(Table(header, body, y0, y1, x0, x1, headerless=not header_ok))
    return tables


def _aligned_tables(page: pymupdf.Page) -> list[Table]:
    """Rule-less tables the detector missed (a listing of names, numbers and descriptions), by column alignment.

    The page's words go through the same layout analysis as OCR words
    (:mod:`workers.parsing.ocr_layout`); only its tables are kept.
    """
    words = [OcrWord(w[4], 100.0, w[0], w[1], w[2] - w[0], w[3] - w[1], w[5], w[6], w[7])
             for w in page.get_text("words")]
    out = []
    for item in ocr_layout.layout(words):
        if item.kind != "table":
            continue
        cells = item.cells
        header = ocr_layout.has_header(cells)
        x0 = min(r.x0 for r in item.rows)
        x1 = max(r.x1 for r in item.rows)
        out.append(Table(cells[0] if header else [], cells[1:] if header else cells,
                          min(r.top for r in item.rows), max(r.bottom for r in item.rows), x0, x1,
                          headerless=not header))
    return out


def _prose_row(cells: list[str]) -> bool:
    filled = [c for c in cells if c.strip()]
    return len(filled) == 1 and len(cells) >= 2 and len(filled[0].split()) >= 8


def _bold_row(page: pymupdf.Page, bbox: Any) -> bool:
    """Whether the text of a table row is all bold (a header row set apart by weight)."""
    import pymupdf

    spans = [s for b in page.get_text("dict", clip=pymupdf.Rect(bbox), flags=pymupdf.TEXTFLAGS_TEXT)["blocks"]
             for ln in b.get("lines", []) for s in ln.get("spans", []) if s.get("text", "").strip()]
    return bool(spans) and all(s.get("flags", 0) & 16 or "bold" in s.get("font", "").lower() for s in spans)


def _ruled_area(page: pymupdf.Page) -> pymupdf.Rect:
    import pymupdf

    area = pymupdf.Rect()
    for d in page.get_cdrawings():
        area |= pymupdf.Rect(d["rect"])
    return pymupdf.Rect(area.x0 - 3, area.y0 - 3, area.x1 + 3, area.y1 + 3) & page.rect


def _cell_rows(table: Any, words: list[tuple]) -> list[list[str]]:
    """Cell texts from the page's words (``to_markdown`` is exact but slow,
    ``extract`` splits "1,200"); a word belongs to the cell holding its centre.
    The grid's own rows only: PyMuPDF's "external header" is usually the caption."""
    out = []
    for row in table.rows:
        cells: list[str] = []
        for box in row.cells:
            if box is None:  # spanned by the cell on its left
                cells.append(cells[-1] if cells else "")
                continue
            x0, y0, x1, y1 = box
            inside = [w for w in words if x0 - 1 <= (w[0] + w[2]) / 2 <= x1 + 1 and y0 - 1 <= (w[1] + w[3]) / 2 <= y1 + 1]
            inside.sort(key=lambda w: (round(w[3] / 3), w[0]))
            cells.append(" ".join(w[4] for w in inside))
        out.append(cells)
    return out


def _aligned_columns(page: pymupdf.Page) -> bool:
    """At least three consecutive rows of words split into the same columns by wide gaps."""
    rows: dict[int, list[tuple[float, float]]] = {}
    for w in page.get_text("words"):
        rows.setdefault(round(w[3] / 3), []).append((w[0], w[2]))
    starts_per_row = []
    for y in sorted(rows):
        words = sorted(rows[y])
        starts = [words[0][0]]
        for (_, prev_x1), (x0, _) in itertools.pairwise(words):
            if x0 - prev_x1 > 14:
                starts.append(x0)
        starts_per_row.append(starts if len(starts) >= 2 else None)
    run = 0
    prev: list[float] | None = None
    for cols in starts_per_row:
        if cols and prev and sum(1 for s in cols if any(abs(s - p) < 4 for p in prev)) >= 2:
            run += 1
            if run >= 2:
                return True
        else:
            run = 0
        prev = cols
    return False
