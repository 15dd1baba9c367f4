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
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pymupdf

from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.core.types import Block, BlockMeta, ParsedDocument, block_meta
from freshindex.workers.parsing import limits, ocr_layout
from freshindex.workers.parsing.boilerplate import is_volatile, shape
from freshindex.workers.parsing.ocr import OcrLine, OcrPage, OcrWord, low_confidence_tokens, ocr_available, ocr_page
from freshindex.workers.parsing.streams import check_pdf_streams
from freshindex.workers.parsing.table import table_block

VERSION = "pdf-4"  # pdf-4: code up to its comment is code; tables joined across scanned pages

__all__ = ["PdfOptions", "ocr_available", "parse_pdf"]

_MARGIN = 0.08  # top and bottom share of the page where running heads and footers live
_BULLET = re.compile(r"^\s*([•◦▪●○■\-–*]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s+")
_CAPTION = re.compile(r"^(table|tabelle|tableau)\s*\d+|^表\s*\d+", re.I)
_ADMONITION = re.compile(r"^(warning|caution|danger|note|important|tip|注意|警告)\s*[:：]", re.I)
_TERMINAL = tuple(".!?:;。！？：；")
_NUMBERED = re.compile(r"^((?:\d{1,2}|[A-Z])(?:\.\d{1,2})*)\.?\s+(\S.*)$")
_COMMENT = ("/*", "//", "#", "--", ";", "%")
#: A comment starting in a code span: ``/*`` or ``//`` after a space (not the ``//`` of a URL), or a ``#`` line.
_COMMENT_MARK = re.compile(r"(?:^|\s)(?:/\*|//)|^\s*#")
_FOOTNOTE = re.compile(r"^(?:\d{1,2}|[*†‡§])\s*\S")
_RUNNING_HEAD = re.compile(r"^(?:chapter|appendix|part|section)\s+[\w.]+\s*[:.]\s*(.+)$", re.I)


@dataclass(frozen=True)
class PdfOptions:
    max_pages: int = 2000
    max_ocr_pages: int = 50
    ocr_language: str = "eng"
    ocr_dpi: int = 300
    #: Word confidence (0-100) under which OCR'd numbers, amounts and commands are flagged.
    ocr_low_confidence: float = 80.0
    find_tables: bool = True
    #: Page segmentation modes tried in turn on a scanned page while its reading looks poor.
    ocr_psm: tuple[int, ...] = (3, 6)
    #: A reading whose rows tesseract split between blocks more than this tries the next mode.
    ocr_retry_fragmentation: float = 0.15
    #: A reading less confident than this (0-1) tries the next mode.
    ocr_retry_confidence: float = 0.85
    #: A scanned page read with less confidence than this (0-1) is a per-document warning.
    ocr_page_floor: float = 0.8

    def with_source(self, options: Mapping[str, Any]) -> PdfOptions:
        """These options with a source's own OCR options (``sources add --option ocr_psm=6,3``).

        Keys (strings, as the CLI stores them, or typed values): ``ocr_psm``
        (comma-separated modes, tried in order), ``ocr_retry_confidence``
        (0-1: a reading under it tries the next mode), ``ocr_low_confidence``
        (0-100: words under it are flagged), ``ocr_page_floor`` (0-1: pages
        under it are warnings), ``ocr_language``.  Other keys are the
        connector's and ignored here.  A bad value fails the document as
        ``parse_failed`` naming the option, rather than parsing with a
        setting nobody asked for.
        """
        changes: dict[str, Any] = {}
        for name, (convert, lo, hi) in _SOURCE_OPTIONS.items():
            raw = options.get(name)
            if raw is None or raw == "":
                continue
            try:
                value = convert(raw)
            except (TypeError, ValueError) as exc:
                raise DocumentError(DocumentError.PARSE_FAILED, f"source option {name}={raw!r}: {exc}") from exc
            bad = [v for v in (value if isinstance(value, tuple) else (value,)) if isinstance(v, (int, float))
                   and not lo <= v <= hi]
            if bad or value == ():
                raise DocumentError(DocumentError.PARSE_FAILED,
                                    f"source option {name}={raw!r}: each value must be in [{lo}, {hi}]")
            changes[name] = value
        return replace(self, **changes) if changes else self


def _psm_list(raw: Any) -> tuple[int, ...]:
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    return tuple(int(str(v).strip()) for v in items if str(v).strip())


def _language(raw: Any) -> str:
    text = str(raw).strip()
    if not re.fullmatch(r"[A-Za-z_]+(?:\+[A-Za-z_]+)*", text):
        raise ValueError("expected tesseract language codes joined by '+' (eng, eng+deu)")
    return text


#: Source options that override :class:`PdfOptions`: name -> (conversion, lowest, highest value).
_SOURCE_OPTIONS: dict[str, tuple[Any, float, float]] = {
    "ocr_psm": (_psm_list, 1, 13),  # 0 is layout analysis only: it reads no text
    "ocr_retry_confidence": (float, 0.0, 1.0),
    "ocr_low_confidence": (float, 0.0, 100.0),
    "ocr_page_floor": (float, 0.0, 1.0),
    "ocr_language": (_language, 0, 0),
}


@dataclass
class _Line:
    text: str
    size: float
    bold: bool
    mono: bool
    x0: float
    y0: float
    x1: float
    y1: float
    links: list[dict[str, str]] = field(default_factory=list)


@dataclass
class _Table:
    header: list[str]
    rows: list[list[str]]
    y0: float
    y1: float
    x0: float
    x1: float
    headerless: bool = False


@dataclass
class _Page:
    number: int
    width: float
    height: float
    lines: list[_Line] = field(default_factory=list)
    tables: list[_Table] = field(default_factory=list)
    ocr: OcrPage | None = None


def parse_pdf(data: bytes, key: str, options: PdfOptions | None = None) -> ParsedDocument:
    opts = options or PdfOptions()
    if b"%PDF-" not in data[:1024]:
        raise DocumentError(DocumentError.PARSE_FAILED, "not a PDF: no %PDF- header in the first 1024 bytes")
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
        pages: list[_Page] = []
        ocr_pages: list[int] = []
        skipped_ocr: list[int] = []
        broken: list[int] = []
        for index in range(doc.page_count):
            limits.check_time(f"page {index + 1}")
            try:
                page = doc.load_page(index)
                content = _read_page(page, opts)
            except DocumentError:
                raise
            except Exception:  # one damaged page: note it and read the rest
                broken.append(index + 1)
                continue
            if content.ocr is None and not content.lines and not content.tables and _looks_scanned(page):
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
        blocks = _Assembler(pages, opts, toc).blocks()
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
    said = [ln.strip() for ln in (pymupdf.TOOLS.mupdf_warnings() or "").splitlines()
            if ln.strip() and not ln.startswith("...")]
    if not said and not doc.is_repaired:
        return ""
    return ": the file is damaged (" + "; ".join(dict.fromkeys(said[:3]) or ["MuPDF had to repair it"]) + ")"


def _looks_scanned(page: pymupdf.Page) -> bool:
    return bool(page.get_images())


# -- first pass: one page ---------------------------------------------------------


def _read_page(page: pymupdf.Page, opts: PdfOptions) -> _Page:
    out = _Page(number=page.number + 1, width=page.rect.width, height=page.rect.height)
    data = page.get_text("dict", flags=pymupdf.TEXTFLAGS_TEXT)
    for block in data.get("blocks", []):
        if block.get("type") != 0:
            continue
        for line in block.get("lines", []):
            spans = [s for s in line.get("spans", []) if s.get("text", "").strip()]
            if not spans:
                continue
            if abs(line.get("dir", (1, 0))[1]) > 0.2:
                continue  # rotated text: watermarks, margin notes
            text = _join_spans(spans)
            size = round(max(s["size"] for s in spans), 1)
            bold = all(s.get("flags", 0) & 16 or "bold" in s.get("font", "").lower() for s in spans)
            mono = _code_spans(spans)
            x0, y0, x1, y1 = line["bbox"]
            out.lines.append(_Line(text, size, bold, mono, x0, y0, x1, y1))
    if not out.lines:
        return out
    out.lines = _merge_baselines(out.lines)
    if opts.find_tables:
        # Code with comments aligned after it lines up in columns too: a "table" of code lines is code.
        out.tables = [t for t in _find_tables(page, out.lines) if not _code_table(t, out.lines)]
        if out.tables:
            out.lines = [ln for ln in out.lines if not any(_inside(ln, t) for t in out.tables)]
    links = [lk for lk in page.get_links() if lk.get("uri")]
    for lk in links:
        r = lk["from"]
        for ln in out.lines:
            if ln.y0 < r.y1 and r.y0 < ln.y1 and ln.x0 < r.x1 and r.x0 < ln.x1:
                ln.links.append({"text": ln.text, "href": lk["uri"]})
                break
    return out


def _mono_span(span: dict) -> bool:
    font = span.get("font", "").lower()
    return bool(span.get("flags", 0) & 8) or "mono" in font or "courier" in font or font.startswith(("cmtt", "sfmono"))


def _code_spans(spans: list[dict]) -> bool:
    """Whether a printed line is code: set in a monospace face up to its comment, if it has one.

    Manuals (Texinfo, LaTeX listings) set the words of a comment in the body
    face (``CTXT_RETURN = 12, /* return() from a closure */``): requiring
    every span to be monospaced would read such a line as prose.
    """
    for s in spans:
        if not s.get("text", "").strip():
            continue
        if _mono_span(s) and _COMMENT_MARK.search(s["text"]):
            return True  # code up to its comment marker; what follows may be in any face
        if not _mono_span(s):
            return False
    return True


def _merge_baselines(lines: list[_Line]) -> list[_Line]:
    """Pieces of one printed line that MuPDF read apart (a list number and its
    text, a run set in another font) become one line again."""
    out: list[_Line] = []
    for ln in sorted(lines, key=lambda ln: (round(ln.y1), ln.x0)):
        last = out[-1] if out else None
        if last is not None and abs(last.y1 - ln.y1) < 2 and 0 <= ln.x0 - last.x1 <= ln.size * 1.5 \
                and last.mono == ln.mono:
            # Code keeps its gap as spaces (a comment one column further right stays aligned with the rest).
            sep = " " * max(1, round((ln.x0 - last.x1) / (last.size * 0.6))) if last.mono else " "
            out[-1] = _Line(f"{last.text}{sep}{ln.text}", max(last.size, ln.size), last.bold and ln.bold, last.mono,
                            last.x0, min(last.y0, ln.y0), ln.x1, max(last.y1, ln.y1), last.links + ln.links)
        elif last is not None and last.mono and abs(last.y1 - ln.y1) < 2 and ln.x0 - last.x1 >= 0 \
                and (ln.mono or ln.text.startswith(_COMMENT)):
            # A code line and the comment aligned after it (set in another font, far right): one line,
            # the gap kept as spaces so the comments stay aligned.
            spaces = " " * max(1, round((ln.x0 - last.x1) / (last.size * 0.6)))
            out[-1] = _Line(f"{last.text}{spaces}{ln.text}", max(last.size, ln.size), False, True,
                            last.x0, min(last.y0, ln.y0), ln.x1, max(last.y1, ln.y1), last.links + ln.links)
        else:
            out.append(ln)
    return out


def _join_spans(spans: list[dict]) -> str:
    parts: list[str] = []
    last_x1 = None
    for s in spans:
        text = s["text"]
        if last_x1 is not None and parts and not parts[-1].endswith(" ") and not text.startswith(" "):
            gap = s["bbox"][0] - last_x1
            if gap > s["size"] * 0.25:
                parts.append(" ")
        parts.append(text)
        last_x1 = s["bbox"][2]
    return " ".join("".join(parts).split())


def _code_table(table: _Table, lines: list[_Line]) -> bool:
    """Whether most lines inside ``table`` are set as code (monospaced up to their comments)."""
    inside = [ln for ln in lines if _inside(ln, table)]
    return bool(inside) and sum(1 for ln in inside if ln.mono) * 3 >= len(inside) * 2


def _inside(line: _Line, table: _Table) -> bool:
    cy = (line.y0 + line.y1) / 2
    cx = (line.x0 + line.x1) / 2
    return table.y0 - 1 <= cy <= table.y1 + 1 and table.x0 - 1 <= cx <= table.x1 + 1


def _find_tables(page: pymupdf.Page, lines: list[_Line]) -> list[_Table]:
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
        tables.append(_Table(header, body, y0, y1, x0, x1, headerless=not header_ok))
    return tables


def _aligned_tables(page: pymupdf.Page) -> list[_Table]:
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
        out.append(_Table(cells[0] if header else [], cells[1:] if header else cells,
                          min(r.top for r in item.rows), max(r.bottom for r in item.rows), x0, x1,
                          headerless=not header))
    return out


def _prose_row(cells: list[str]) -> bool:
    filled = [c for c in cells if c.strip()]
    return len(filled) == 1 and len(cells) >= 2 and len(filled[0].split()) >= 8


def _bold_row(page: pymupdf.Page, bbox: Any) -> bool:
    """Whether the text of a table row is all bold (a header row set apart by weight)."""
    spans = [s for b in page.get_text("dict", clip=pymupdf.Rect(bbox), flags=pymupdf.TEXTFLAGS_TEXT)["blocks"]
             for ln in b.get("lines", []) for s in ln.get("spans", []) if s.get("text", "").strip()]
    return bool(spans) and all(s.get("flags", 0) & 16 or "bold" in s.get("font", "").lower() for s in spans)


def _ruled_area(page: pymupdf.Page) -> pymupdf.Rect:
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


# -- second pass: the document ----------------------------------------------------


@dataclass
class _Open:
    """The block being built, kept open across a page break."""

    kind: str
    parts: list[str]
    page: int
    room: float  # free width at the end of the last line read, in points
    meta: dict[str, Any] = field(default_factory=dict)
    breaks: list[tuple[int, int]] = field(default_factory=list)  # (first part on a page, that page)

    def page_breaks(self, joined: Any) -> list[list[int]]:
        """``[[offset, page], ...]``: where in the block's text each page starts (``joined`` builds the text)."""
        return [[0, self.page]] + [[len(joined(self.parts[:k])) + 1 if k else 0, pg] for k, pg in self.breaks]


class _Assembler:
    def __init__(self, pages: list[_Page], opts: PdfOptions, toc: list[tuple[int, str, int]] | None = None) -> None:
        self.pages = pages
        self.toc = toc or []
        self.toc_titles = {_norm(_NUMBERED.sub(r"\2", t)) for _, t, _ in self.toc}
        self.opts = opts
        self.out: list[Block] = []
        self.path: list[tuple[int, str]] = []
        self.open: _Open | None = None
        self.last_table: Block | None = None  # the last table, while nothing followed it
        text_pages = [p for p in pages if p.lines]
        self.text_pages = len(text_pages)
        self.furniture = self._furniture(text_pages)
        sizes: Counter[float] = Counter()
        for p in text_pages:
            for ln in p.lines:
                sizes[round(ln.size * 2) / 2] += len(ln.text)
        self.body = sizes.most_common(1)[0][0] if sizes else 11.0
        big = sorted({s for s in sizes if s >= self.body * 1.15}, reverse=True)
        self.levels = {s: i + 1 for i, s in enumerate(big)}
        self.bold_level = len(big) + 1
        self.depth_levels = self._depth_levels(text_pages)
        self.ocr_furniture = self._ocr_furniture_shapes()

    def _depth_levels(self, pages: list[_Page]) -> dict[int, int]:
        """Numbering depth ("3" is 1, "3.2.1" is 3) to the heading level text pages give it.

        Scanned pages have no font sizes to compare: their numbered headings
        take the level that headings numbered alike have on the text pages,
        so a section keeps one level whether its page was scanned or not.
        """
        seen: dict[int, Counter[int]] = {}
        for p in pages:
            for ln in p.lines:
                m = _NUMBERED.match(ln.text)
                level = self._heading_level(ln) if m else 0
                if m and level:
                    seen.setdefault(m.group(1).count(".") + 1, Counter())[level] += 1
        out = {d: c.most_common(1)[0][0] for d, c in seen.items()}
        for d in range(1, 7):  # depths the text pages never showed: one level below the one above
            out.setdefault(d, out.get(d - 1, d - 1) + 1 if d > 1 else 1)
        return out

    def _ocr_furniture_shapes(self) -> set[str]:
        """Shapes of margin rows repeating on scanned pages (digits masked), as for text pages."""
        counts: Counter[str] = Counter()
        scans = [p for p in self.pages if p.ocr is not None]
        for p in scans:
            rows = ocr_layout.rows_of(p.ocr.words) if p.ocr else []
            counts.update({shape(r.text) for r in rows if self._row_in_margin(r, p)})
        return {s for s, n in counts.items() if n >= 2}

    # furniture -----------------------------------------------------------

    def _furniture(self, pages: list[_Page]) -> set[str]:
        counts: Counter[str] = Counter()
        for p in pages:
            seen = {shape(ln.text) for ln in p.lines if self._in_margin(ln, p)}
            counts.update(seen)
        # Running heads change with the chapter ("Chapter 3: Objects" on chapter 3's pages only): a
        # margin line repeated on three pages, or on a third of them in a short document, is furniture.
        need = max(2, min(3, int(0.3 * len(pages))))
        return {s for s, n in counts.items() if n >= need} if len(pages) >= 3 else set()

    @staticmethod
    def _in_margin(line: _Line, page: _Page) -> bool:
        return line.y1 <= page.height * _MARGIN or line.y0 >= page.height * (1 - _MARGIN)

    def _is_furniture(self, line: _Line, page: _Page) -> bool:
        if not self._in_margin(line, page):
            return False
        if shape(line.text) in self.furniture or self._running_head(line.text):
            return True
        return line.size <= self.body * 1.05 and is_volatile(line.text)

    def _running_head(self, text: str) -> bool:
        """"Chapter 3: Objects, their modes and attributes 15": a chapter title from the outline as a page head."""
        text = re.sub(r"\s+\d{1,4}$|^\d{1,4}\s+", "", text.strip())
        m = _RUNNING_HEAD.match(text)
        if not m or not self.toc_titles:
            return False
        title = _norm(m.group(1))
        return title in self.toc_titles or any(difflib.SequenceMatcher(None, title, t).ratio() >= 0.85
                                               for t in self.toc_titles if abs(len(t) - len(title)) < 6)

    @staticmethod
    def _row_in_margin(row: ocr_layout.Row, page: _Page) -> bool:
        return row.bottom <= page.height * (_MARGIN + 0.02) or row.top >= page.height * (1 - _MARGIN - 0.02)

    def _is_ocr_furniture(self, row: ocr_layout.Row, page: _Page) -> bool:
        if not self._row_in_margin(row, page):
            return False
        text = row.text
        if is_volatile(text) or self._running_head(text) or shape(text) in self.furniture:
            return True
        s = shape(text)
        known = self.furniture | self.ocr_furniture
        return (s in self.ocr_furniture and len(text) > 3) or any(
            difflib.SequenceMatcher(None, s, f).ratio() >= 0.85 for f in known if abs(len(f) - len(s)) < 8)

    # blocks ----------------------------------------------------------------

    def hp(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.path)

    def emit(self, kind: BlockKind, text: str, page: int, **meta: Any) -> None:
        text = text.strip("\n").rstrip() if kind == BlockKind.CODE else text.strip()
        if not text:
            return
        self.out.append(Block(kind, text, self.hp(), page=page, meta=block_meta(meta)))
        if len(self.out) % 500 == 0:
            limits.check_blocks(len(self.out))

    def close(self) -> None:
        o = self.open
        self.open = None
        if o is None:
            return
        if o.breaks:
            # So that a chunk cut from this block can name the page its own text is on.
            o.meta["page_breaks"] = o.page_breaks(_dehyphenate if o.kind == BlockKind.PARAGRAPH else "\n".join)
        if o.kind == BlockKind.CODE:
            self.emit(BlockKind.CODE, _dedent(o.parts), o.page, **o.meta)
            return
        if o.kind == BlockKind.LIST:
            self.emit(BlockKind.LIST, "\n".join(o.parts), o.page, items=list(o.parts), **o.meta)
            return
        text = _dehyphenate(o.parts)
        m = _ADMONITION.match(text)
        if m:
            self.emit(BlockKind.ADMONITION, text, o.page, admonition=m.group(1).lower(), **o.meta)
        else:
            self.emit(BlockKind.PARAGRAPH, text, o.page, **o.meta)

    def blocks(self) -> list[Block]:
        for page in self.pages:
            if page.ocr is not None:
                self.close()
                self._ocr_blocks(page)
                continue
            self._page_blocks(page)
        self.close()
        return self.out

    def _page_blocks(self, page: _Page) -> None:
        lines = [ln for ln in page.lines if not self._is_furniture(ln, page)]
        items = _reading_order(lines, page.tables, page.width)
        left = _left_edge(lines)
        right = max((ln.x1 for ln in lines), default=0.0)
        first = True
        heading: _Line | None = None  # the heading line just read, for headings set on two lines
        prev: _Line | None = None
        for item in items:
            if isinstance(item, _Table):
                self.close()
                self._table(item, page.number, at_top=first)
                first, prev, heading = False, None, None
                continue
            line = item
            room = right - line.x1
            jumped = prev is not None and line.y0 < prev.y0 - line.size  # the next column
            if (first or jumped) and self._continues(line):
                self._append(line, page.number)
                self.open.room = room  # type: ignore[union-attr]
                first, prev = False, line
                continue
            first = False
            if not self._footnote(line, page):  # a table goes on past the footnotes under it
                self.last_table = None
            level = self._heading_level(line)
            if level:
                if heading is not None and heading.size == line.size and prev is heading \
                        and 0 <= line.y0 - heading.y1 < line.size * 0.6:
                    self._merge_heading(line.text)  # one heading set on two lines
                else:
                    self.close()
                    self._set_heading(line.text, level)
                    self.out.append(Block(BlockKind.HEADING, line.text, self.hp(), page=page.number, meta=BlockMeta(level=level)))
                heading = prev = line
                continue
            heading = None
            gap = line.y0 - prev.y1 if prev is not None else None
            near = gap is not None and -line.size < gap < line.size * 0.5
            if line.mono:
                if not (self.open and self.open.kind == BlockKind.CODE):
                    self.close()
                    self.open = _Open(BlockKind.CODE, [], page.number, room)
                indent = max(0, round((line.x0 - left) / (line.size * 0.6)))
                self.open.parts.append(" " * indent + line.text)
            elif _BULLET.match(line.text):
                if not (self.open and self.open.kind == BlockKind.LIST):
                    self.close()
                    self.open = _Open(BlockKind.LIST, [], page.number, room)
                self.open.parts.append(line.text)
            elif self.open and self.open.kind == BlockKind.LIST and near and line.x0 > left + 4:
                self.open.parts[-1] += " " + line.text  # the next line of a list item
            elif self.open and self.open.kind == BlockKind.PARAGRAPH and near and not _CAPTION.match(line.text):
                self.open.parts.append(line.text)
            else:
                self.close()
                self.open = _Open(BlockKind.PARAGRAPH, [line.text], page.number, room)
            self.open.room = room
            if self.open.page != page.number:  # a list or code block going on from the page before
                pages = self.open.meta.setdefault("pages", [self.open.page])
                if page.number not in pages:
                    pages.append(page.number)
                    self.open.breaks.append((len(self.open.parts) - 1, page.number))
            if line.links:
                self.open.meta.setdefault("links", []).extend(line.links)
            prev = line

    def _footnote(self, line: _Line, page: _Page) -> bool:
        """A footnote line: set smaller than the body, low on the page, after its mark ("1 strictly, ...")."""
        return line.size < self.body * 0.95 and line.y0 > page.height * 0.55 and bool(_FOOTNOTE.match(line.text))

    @staticmethod
    def _ocr_footnote(row: ocr_layout.Row, page: _Page, body_h: float) -> bool:
        return row.height < body_h * 0.95 and row.top > page.height * 0.55 and bool(_FOOTNOTE.match(row.text))

    def _continues(self, line: _Line) -> bool:
        """Does ``line`` (first on a page or column) go on with the open block?"""
        o = self.open
        if o is None or o.kind not in (BlockKind.PARAGRAPH, BlockKind.LIST) or not o.parts:
            return False
        if self._heading_level(line) or line.mono or _BULLET.match(line.text) or _CAPTION.match(line.text):
            return False
        last = o.parts[-1].rstrip()
        if not last.endswith(_TERMINAL) or line.text[:1].islower():
            return True
        # A sentence ended with the page.  Whether the paragraph did too cannot
        # be seen on the page; join only when the last line was filled to the
        # margin (wrapped: this line's first word did not fit on it), which
        # an ending line rarely is.
        char = (line.x1 - line.x0) / max(1, len(line.text))
        first_word = line.text.split(" ", 1)[0]
        return o.room < char * 1.5 < char * (len(first_word) + 1)

    def _append(self, line: _Line, page: int) -> None:
        o = self.open
        assert o is not None
        if o.kind == BlockKind.LIST:
            o.parts[-1] += " " + line.text
        else:
            o.parts.append(line.text)
        if page != o.page:
            pages = o.meta.setdefault("pages", [o.page])
            if page not in pages:
                pages.append(page)
                o.breaks.append((len(o.parts) - 1, page))
        if line.links:
            o.meta.setdefault("links", []).extend(line.links)

    def _merge_heading(self, more: str) -> None:
        level, text = self.path[-1]
        self.path[-1] = (level, f"{text} {more}")
        last = self.out.pop()
        self.out.append(Block(BlockKind.HEADING, self.path[-1][1], self.hp(), page=last.page, meta=last.meta))

    def _heading_level(self, line: _Line) -> int:
        if len(line.text) > 150 or line.mono or _CAPTION.match(line.text):
            return 0
        size = round(line.size * 2) / 2
        if size in self.levels:
            return self.levels[size]
        words = len(line.text.split())
        if line.bold and size >= self.body and words <= 12 and not line.text.endswith((".", ",", ";")):
            return self.bold_level
        return 0

    def _set_heading(self, text: str, level: int) -> None:
        while self.path and self.path[-1][0] >= level:
            self.path.pop()
        self.path.append((level, text))

    def _intro(self, page: int) -> str | None:
        """The sentence introducing a table ("... the following types:"), carried by every chunk of it."""
        if not self.out or self.out[-1].kind != BlockKind.PARAGRAPH or self.out[-1].page != page:
            return None
        last = re.split(r"(?<=[.!?])\s+", self.out[-1].text)[-1]
        return last if 3 <= len(last.split()) <= 60 else None

    def _table(self, table: _Table, page: int, *, at_top: bool, ocr_meta: dict | None = None) -> None:
        prev = self.last_table
        width = len(table.header) or len(table.rows[0]) if (table.header or table.rows) else 0
        if at_top and prev is not None and len(prev.meta["columns"]) == width and \
                max(prev.meta.get("pages", [prev.page or 0])) == page - 1:
            # The table goes on from the previous page: join the rows.
            rows = [*prev.meta["rows"]]
            prev_header = prev.meta["header_rows"][0] if prev.meta["header_rows"] else None
            if table.header and _squash(table.header) != _squash(prev_header or []):
                rows.append(table.header)  # no repeated header: its first line is a row
            rows.extend(table.rows)
            self.out.remove(prev)
            pages = prev.meta.get("pages", [prev.page])
            # The page each body row is printed on, so a part of the table can be placed (and cited) exactly.
            row_pages = prev.meta.get("row_pages") or [prev.page] * len(prev.meta["rows"])
            row_pages = [*row_pages, *[page] * (len(rows) - len(row_pages))]
            joined = table_block(prev.meta["header_rows"], rows, prev.heading_path, caption=prev.meta.get("caption"),
                                 page=prev.page, pages=[*pages, page], headerless=not prev.meta["header_rows"],
                                 row_pages=row_pages, **_joined_ocr(prev.meta, ocr_meta))
            if joined is not None:
                self.out.append(joined)
                self.last_table = joined
            return
        caption = self._pending_caption() or self._intro(page)
        block = table_block([table.header] if table.header else [], table.rows, self.hp(), caption=caption,
                            page=page, headerless=table.headerless, **(ocr_meta or {}))
        if block is not None:
            self.out.append(block)
            self.last_table = block

    def _pending_caption(self) -> str | None:
        if self.out and self.out[-1].kind == BlockKind.PARAGRAPH and _CAPTION.match(self.out[-1].text) \
                and len(self.out[-1].text) < 200:
            return self.out.pop().text
        return None

    def _ocr_blocks(self, page: _Page) -> None:
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
            rows = [r for r in item.rows if not self._is_ocr_furniture(r, page)]
            if not rows:
                continue
            meta = self._ocr_meta(rows, page)
            at_top, first = first, False
            if item.kind == "table":
                self._flush_ocr()
                cells = item.cells
                header = ocr_layout.has_header(cells)
                table = _Table(cells[0] if header else [], cells[1:] if header else cells, 0, 0, 0, 0,
                               headerless=not header)
                self._table(table, page.number, at_top=at_top, ocr_meta=meta)
                continue
            if not all(self._ocr_footnote(r, page, body_h) for r in rows):
                self.last_table = None
            if item.kind == "code":
                self._flush_ocr()
                self.emit(BlockKind.CODE, item.code, page.number, **meta)
                continue
            para: list[ocr_layout.Row] = []
            for n, row in enumerate(rows):
                level = self._ocr_heading(row, page.number, body_h)
                if level:
                    self._ocr_paragraph(para, page)
                    para = []
                    text = _NUMBERED.sub(r"\1 \2", row.text.strip())
                    self._set_heading(text, level)
                    self.out.append(Block(BlockKind.HEADING, text, self.hp(), page=page.number,
                                          meta=block_meta({**self._ocr_meta([row], page), "level": level})))
                    continue
                prev = rows[n - 1] if n else None
                gap = row.top - prev.bottom if prev is not None else 0.0
                # A paragraph's first line is indented under a line that ended a sentence; the
                # indented lines of a definition's text go on from the term above them.
                indented = prev is not None and row.x0 > prev.x0 + 1.5 * max(row.pitch, 3.0) \
                    and prev.text.rstrip().endswith(_TERMINAL)
                if para and (gap > body_h * 0.9 or indented or _BULLET.match(row.text)):
                    self._ocr_paragraph(para, page)
                    para = []
                para.append(row)
            self._ocr_paragraph(para, page)

    def _flush_ocr(self) -> None:
        self.close()

    def _ocr_meta(self, rows: list[ocr_layout.Row], page: _Page) -> dict[str, Any]:
        words = [w for r in rows for w in r.words]
        meta: dict[str, Any] = {"ocr": True, "ocr_confidence": page.ocr.confidence if page.ocr else 0.0,
                                "ocr_block_confidence": ocr_layout.confidence(words)}
        flagged = [t for r in rows for t in low_confidence_tokens(
            OcrLine(r.text, tuple(r.words), 0, 0, r.height, r.top, r.x0), self.opts.ocr_low_confidence, page.number)]
        if flagged:
            meta["low_confidence_tokens"] = flagged
        return meta

    def _ocr_paragraph(self, rows: list[ocr_layout.Row], page: _Page) -> None:
        if not rows:
            return
        self.close()
        text = _dehyphenate([r.text for r in rows])
        meta = self._ocr_meta(rows, page)
        if _BULLET.match(text):
            kind = BlockKind.LIST
            meta["items"] = [text]
        elif _ADMONITION.match(text):
            kind = BlockKind.ADMONITION
        else:
            kind = BlockKind.PARAGRAPH
        self.out.append(Block(kind, text, self.hp(), page=page.number, meta=block_meta(meta)))

    def _ocr_heading(self, row: ocr_layout.Row, page: int, body_h: float) -> int:
        text = row.text.strip()
        words = text.split()
        if not words or len(words) > 12 or text.endswith((".", ",", ";", ":")) or len(row.segments) > 1:
            return 0
        m = _NUMBERED.match(text)
        title = _norm(m.group(2) if m else text)
        for level, toc_title, toc_page in self.toc:
            if toc_page in (page, page - 1, page + 1) and title and \
                    difflib.SequenceMatcher(None, title, _norm(_NUMBERED.sub(r"\2", toc_title))).ratio() >= 0.88:
                depth = m.group(1).count(".") + 1 if m else level
                return self.depth_levels.get(depth, depth)
        if m and row.height >= body_h * 1.1 and m.group(2)[:1].isupper():
            depth = m.group(1).count(".") + 1
            return self.depth_levels.get(depth, depth)
        if not self.toc and not self.levels and len(words) <= 8 and row.height >= body_h * 1.4:
            # No outline and no heading sizes on text pages: the row's size is the only evidence there is.
            return 1 if row.height >= body_h * 1.8 else 2
        return 0


def _joined_ocr(first: BlockMeta | dict[str, Any], second: dict[str, Any] | None) -> dict[str, Any]:
    """The OCR meta of a table joined across a page break: OCR'd if either part was, the lower confidence."""
    parts = [m for m in (first, second or {}) if m.get("ocr")]
    if not parts:
        return {}
    out: dict[str, Any] = {"ocr": True, "ocr_confidence": min(m.get("ocr_confidence", 1.0) for m in parts)}
    tokens = [t for m in parts for t in m.get("low_confidence_tokens", [])]
    if tokens:
        out["low_confidence_tokens"] = tokens
    return out


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def _dedent(parts: list[str]) -> str:
    """Code lines without the indentation they all share (the page margin), the rest kept."""
    lines = [p.rstrip() for p in parts]
    common = min((len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()), default=0)
    return "\n".join(ln[common:] for ln in lines)


def _squash(cells: list[str]) -> list[str]:
    return ["".join(c.split()).lower() for c in cells]


def _dehyphenate(parts: list[str]) -> str:
    text = ""
    for part in parts:
        if text.endswith("-") and part[:1].islower() and len(text) > 1 and text[-2].isalpha():
            text = text[:-1] + part
        elif text:
            text += " " + part
        else:
            text = part
    return text


def _left_edge(lines: list[_Line]) -> float:
    return min((ln.x0 for ln in lines), default=0.0)


def _reading_order(lines: list[_Line], tables: list[_Table], page_width: float) -> list[_Line | _Table]:
    """Lines and tables in reading order: bands between full-width items, each
    band read left column first when the page is set in two columns."""
    if not lines:
        return sorted(tables, key=lambda t: t.y0)
    left, right = _left_edge(lines), max(ln.x1 for ln in lines)
    mid = (left + right) / 2
    width = right - left
    narrow_left = [ln for ln in lines if ln.x1 < mid + 2 and ln.x1 - ln.x0 < width * 0.55]
    narrow_right = [ln for ln in lines if ln.x0 > mid - 2 and ln.x1 - ln.x0 < width * 0.55]
    two_columns = len(narrow_left) >= 5 and len(narrow_right) >= 5 and \
        len(narrow_left) + len(narrow_right) >= 0.6 * len(lines)
    items: list[_Line | _Table] = [*lines, *tables]
    if not two_columns:
        return sorted(items, key=lambda it: (round(it.y0, 0), it.x0))
    ordered: list[_Line | _Table] = []
    band: list[_Line] = []

    def flush() -> None:
        ordered.extend(sorted((ln for ln in band if ln.x0 < mid - 2), key=lambda ln: (ln.y0, ln.x0)))
        ordered.extend(sorted((ln for ln in band if ln.x0 >= mid - 2), key=lambda ln: (ln.y0, ln.x0)))
        band.clear()

    for it in sorted(items, key=lambda it: (it.y0, it.x0)):
        if isinstance(it, _Table) or (it.x0 < mid - 2 and it.x1 > mid + 2):  # full width
            flush()
            ordered.append(it)
        else:
            band.append(it)
    flush()
    return ordered
