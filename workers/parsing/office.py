"""Office Open XML documents (Word, PowerPoint, Excel) to blocks.

* **Word** (``.docx``, python-docx): body paragraphs and tables in reading
  order.  A paragraph styled ``Title`` or ``Heading N`` (or a style based on
  one, or one with an outline level) is a heading; paragraphs styled
  ``List ...`` or carrying Word numbering are list items, rendered with
  their bullets or numbers and indented by level; a table's repeated header
  rows (``w:tblHeader``) are its header, otherwise its first row is; a
  ``Caption`` paragraph right above a table is its caption.  Headers,
  footers, comments and footnotes are furniture and stay out.
* **PowerPoint** (``.pptx``, python-pptx): each slide is a section under its
  title (``Slide N`` when it has none), on page N, so a chunk cites its
  slide; text frames in reading order (top to bottom, left to right; group
  shapes opened), several paragraphs as a list, tables as table blocks, and
  the speaker notes as a ``notes`` admonition at the end of the slide.
* **Excel** (``.xlsx``, openpyxl in read-only mode, cached values not
  formulas): each worksheet is a section and one table captioned with the
  sheet's name; note lines above the header row (:func:`_header_at`)
  become paragraphs; empty leading columns and trailing
  cells are dropped.  Rows are bounded by ``max_table_rows`` per sheet and
  ``max_blocks`` per workbook, like a CSV file.

Every package is checked before a library opens it: an encrypted file (an
OLE container holding ``EncryptedPackage``) is ``encrypted``, a legacy binary
file (``.doc``, ``.xls``, ``.ppt``) is ``unsupported_type``, and every zip
package, whatever its format, goes through :func:`workers.parsing.archive.check_package`,
which inflates each part in bounded steps and refuses one that inflates past
``max_decompressed_bytes``, lies about its sizes, lists more than
``max_archive_members`` parts or holds more than ``max_xml_elements`` XML
elements, before any library reads it; a broken package is ``parse_failed``
naming what could not be read.  What this
does not guarantee: embedded objects (charts, pictures, OLE files) and text
boxes anchored in Word drawings are not read.
"""

from __future__ import annotations

import datetime as dt
import io
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.core.types import Block, BlockMeta, ParsedDocument
from freshindex.workers.parsing import archive, limits
from freshindex.workers.parsing.table import clean_cell, table_block

VERSION = "office-1"

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")
_KIND = {"docx": "Word document", "pptx": "PowerPoint presentation", "xlsx": "Excel workbook"}
_HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.I)
_CAPTION = re.compile(r"^(table|tabelle|tableau|表)\s*[\d.:\-]", re.I)
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _package(data: bytes, key: str, ext: str) -> None:
    """Refuse what is not a readable OOXML package, before a library parses it."""
    what = _KIND[ext]
    if data.startswith(_OLE_MAGIC):
        if _ENCRYPTED_STREAM in data:
            raise DocumentError(DocumentError.ENCRYPTED, f"the {what} is encrypted (password protected)")
        raise DocumentError(DocumentError.UNSUPPORTED,
                            f"{key.rsplit('/', 1)[-1]} is a legacy binary Office file, not a {what} "
                            f"(.{ext}); save it as .{ext}")
    archive.check_package(data, what)


def _open(data: bytes, key: str, ext: str, opener: Callable[[io.BytesIO], Any]) -> Any:
    _package(data, key, ext)
    try:
        return opener(io.BytesIO(data))
    except DocumentError:
        raise
    except (KeyError, ValueError, zipfile.BadZipFile, OSError, SyntaxError) as exc:
        # python-docx/pptx raise KeyError for a missing part and ValueError/PackageNotFoundError for a
        # wrong content type; lxml's XMLSyntaxError is a SyntaxError.
        raise DocumentError(DocumentError.PARSE_FAILED,
                            f"not a readable {_KIND[ext]}: {type(exc).__name__}: {exc}") from exc


def _file_title(key: str) -> str:
    name = key.rsplit("/", 1)[-1]
    return re.sub(r"[-_]+", " ", name.rsplit(".", 1)[0]).strip() or name


def _text(value: str | None) -> str:
    return " ".join((value or "").replace("\x0b", "\n").split())


class _Sections:
    """The heading path as headings arrive, and the blocks under it (bounded by the parse limits)."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, str]] = []
        self.blocks: list[Block] = []

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(t for _, t in self.stack)

    def heading(self, level: int, text: str, page: int | None = None) -> None:
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))
        self.add(Block(BlockKind.HEADING, text, self.path, page=page, meta=BlockMeta(level=level)))

    def add(self, block: Block | None) -> None:
        if block is None:
            return
        self.blocks.append(block)
        if len(self.blocks) % 200 == 0:
            limits.check_time(f"block {len(self.blocks)}")
            limits.check_blocks(len(self.blocks))


# -- Word ---------------------------------------------------------------------

def _style_chain(style: Any) -> Iterator[Any]:
    seen = 0
    while style is not None and seen < 16:
        yield style
        style, seen = style.base_style, seen + 1


class _Styles:
    """Each paragraph style's chain (the style, then the styles it is based on), looked up once per style id.

    python-docx's ``paragraph.style`` scans every style of the document for the default one on each call
    (about 3 ms a paragraph with its own template, so 100,000 paragraphs took past the parse time limit);
    here that happens once per document.  Not guaranteed: a style edited while the document is read.
    """

    def __init__(self, document: Any) -> None:
        from docx.enum.style import WD_STYLE_TYPE

        self.part = document.part
        self.kind = WD_STYLE_TYPE.PARAGRAPH
        self.chains: dict[str | None, tuple[Any, ...]] = {}

    def chain(self, paragraph: Any) -> tuple[Any, ...]:
        style_id = paragraph._p.style
        found = self.chains.get(style_id)
        if found is None:
            found = self.chains[style_id] = tuple(_style_chain(self.part.get_style(style_id, self.kind)))
        return found

    def name(self, paragraph: Any) -> str:
        """The paragraph's style name ("" for none)."""
        chain = self.chain(paragraph)
        return (chain[0].name or "") if chain else ""


def _heading_level(paragraph: Any, chain: tuple[Any, ...]) -> int | None:
    """0 for Title, N for Heading N (or a style based on it), outline level + 1, None for body text."""
    p_pr = paragraph._p.pPr
    outline = p_pr.find(f"{_W}outlineLvl") if p_pr is not None else None
    for style in chain:
        name = (style.name or "").strip()
        if name.lower() == "title":
            return 0
        m = _HEADING_STYLE.match(name)
        if m:
            return int(m.group(1))
        s_pr = style.element.pPr
        if outline is None and s_pr is not None:
            outline = s_pr.find(f"{_W}outlineLvl")
    if outline is not None:
        level = int(outline.get(f"{_W}val", "9"))
        return level + 1 if level < 9 else None
    return None


class _Numbering:
    """Bullets and numbers of Word list paragraphs, counted as the document goes."""

    def __init__(self, document: Any, styles: _Styles) -> None:
        self.styles = styles
        self.formats: dict[tuple[str, int], str] = {}
        self.counters: dict[str, list[int]] = {}
        try:
            root = document.part.numbering_part.element
        except (KeyError, NotImplementedError, AttributeError):
            return
        abstract = {a.get(f"{_W}abstractNumId"): a for a in root.iter(f"{_W}abstractNum")}
        for num in root.iter(f"{_W}num"):
            ref = num.find(f"{_W}abstractNumId")
            a = abstract.get(ref.get(f"{_W}val")) if ref is not None else None
            for lvl in a.iter(f"{_W}lvl") if a is not None else ():
                fmt = lvl.find(f"{_W}numFmt")
                self.formats[(num.get(f"{_W}numId"), int(lvl.get(f"{_W}ilvl", "0")))] = \
                    fmt.get(f"{_W}val", "bullet") if fmt is not None else "bullet"

    def _num_pr(self, paragraph: Any) -> Any:
        for holder in (paragraph._p, *(s.element for s in self.styles.chain(paragraph))):
            p_pr = holder.pPr
            num_pr = p_pr.numPr if p_pr is not None else None
            if num_pr is not None:
                return num_pr
        return None

    def item(self, paragraph: Any) -> tuple[int, str] | None:
        """(level, marker) of a list paragraph; None for a paragraph that is no list item."""
        num_pr = self._num_pr(paragraph)
        style = self.styles.name(paragraph)
        if num_pr is None or num_pr.numId is None:
            if not style.lower().startswith("list") or style.lower() == "list paragraph":
                return None
            m = re.search(r"(\d)$", style)
            level = int(m.group(1)) - 1 if m else 0
            return level, ("1." if "number" in style.lower() else "-")
        num_id = str(num_pr.numId.val)
        if num_id == "0":  # numbering switched off on this paragraph
            return None
        level = int(num_pr.ilvl.val) if num_pr.ilvl is not None else 0
        fmt = self.formats.get((num_id, level), "decimal" if "number" in style.lower() else "bullet")
        if fmt in ("bullet", "none"):
            return level, "-"
        counts = self.counters.setdefault(num_id, [0] * 9)
        counts[level] += 1
        counts[level + 1 :] = [0] * (8 - level)
        return level, f"{counts[level]}."


def _docx_rows(table: Any) -> tuple[list[list[str]], list[list[str]]]:
    header: list[list[str]] = []
    rows: list[list[str]] = []
    for n, row in enumerate(table.rows):
        if n % 1000 == 999:
            limits.check_time(f"table row {n}")
        limits.check_rows(n)
        cells: list[str] = []
        previous = None
        for cell in row.cells:  # a merged cell is listed once per grid column it spans
            cells.append("" if cell._tc is previous else _text(cell.text))
            previous = cell._tc
        tr_pr = row._tr.trPr
        repeated = tr_pr is not None and tr_pr.find(f"{_W}tblHeader") is not None
        (header if repeated and not rows else rows).append(cells)
    return header, rows


def parse_docx(data: bytes, key: str) -> ParsedDocument:
    import docx  # deferred: only a worker that meets a .docx pays for the import

    document = _open(data, key, "docx", docx.Document)
    styles = _Styles(document)
    numbering = _Numbering(document, styles)
    out = _Sections()
    title = _text(document.core_properties.title)
    items: list[str] = []
    tops: list[str] = []
    caption_block: Block | None = None  # the last paragraph styled Caption

    def flush_list() -> None:
        if items:
            out.add(Block(BlockKind.LIST, "\n".join(items), out.path, meta=BlockMeta(items=list(tops))))
            items.clear()
            tops.clear()

    for part in document.iter_inner_content():
        if isinstance(part, docx.table.Table):
            flush_list()
            header, rows = _docx_rows(part)
            caption = None
            last = out.blocks[-1] if out.blocks else None
            if last is not None and last.kind == BlockKind.PARAGRAPH and last.heading_path == out.path \
                    and (last is caption_block or _CAPTION.match(last.text)) and len(last.text) < 200:
                caption = out.blocks.pop().text
            out.add(table_block(header, rows, out.path, caption=caption))
            continue
        text = _text(part.text)
        if not text:
            continue
        level = _heading_level(part, styles.chain(part))
        if level is not None:
            flush_list()
            if level == 0 and not title:
                title = text
            out.heading(level, text)
            continue
        item = numbering.item(part)
        if item is not None:
            depth, marker = item
            items.append(f"{'  ' * depth}{marker} {text}")
            if depth == 0 or not tops:
                tops.append(f"{marker} {text}")
            continue
        flush_list()
        style = styles.name(part).lower()
        if "code" in style or "preformatted" in style or style == "source":
            out.add(Block(BlockKind.CODE, part.text.rstrip(), out.path))
        elif "quote" in style:
            out.add(Block(BlockKind.ADMONITION, text, out.path, meta=BlockMeta(admonition="quote")))
        else:
            out.add(Block(BlockKind.PARAGRAPH, text, out.path))
            caption_block = out.blocks[-1] if style == "caption" else None
    flush_list()
    blocks = out.blocks
    if not blocks:
        raise DocumentError(DocumentError.EMPTY, "the Word document holds no text")
    title = title or next((b.text for b in blocks if b.kind == BlockKind.HEADING), "") or _file_title(key)
    return ParsedDocument(title=title, blocks=tuple(blocks), parser="docx", parser_version=VERSION)


# -- PowerPoint ---------------------------------------------------------------

def _shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """Shapes in reading order (top to bottom, then left to right), group shapes opened."""
    def place(s: Any) -> tuple[int, int]:
        return (s.top or 0, s.left or 0)

    for shape in sorted(shapes, key=place):
        if getattr(shape, "shapes", None) is not None and shape.shape_type is not None \
                and int(shape.shape_type) == 6:  # MSO_SHAPE_TYPE.GROUP
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _frame_block(frame: Any, path: tuple[str, ...], page: int) -> Block | None:
    paras = [(p.level, _text("".join(r.text for r in p.runs) or p.text)) for p in frame.paragraphs]
    paras = [(level, t) for level, t in paras if t]
    if not paras:
        return None
    if len(paras) == 1:
        return Block(BlockKind.PARAGRAPH, paras[0][1], path, page=page)
    lines = [f"{'  ' * level}- {t}" for level, t in paras]
    return Block(BlockKind.LIST, "\n".join(lines), path, page=page,
                 meta=BlockMeta(items=[f"- {t}" for level, t in paras if level == 0]))


def parse_pptx(data: bytes, key: str) -> ParsedDocument:
    import pptx  # deferred, as for Word

    deck = _open(data, key, "pptx", pptx.Presentation)
    out = _Sections()
    title = _text(deck.core_properties.title)
    for n, slide in enumerate(deck.slides, start=1):
        limits.check_time(f"slide {n}")
        title_shape = slide.shapes.title
        heading = _text(title_shape.text_frame.text) if title_shape is not None and title_shape.has_text_frame else ""
        if n == 1 and heading and not title:
            title = heading
        out.heading(1, heading or f"Slide {n}", page=n)
        for shape in _shapes(slide.shapes):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            if getattr(shape, "has_table", False) and shape.has_table:
                table = shape.table
                rows = [[_text(c.text) for c in r.cells] for r in table.rows]
                limits.check_rows(len(rows))
                header, body = (rows[:1], rows[1:]) if table.first_row else ([], rows)
                out.add(table_block(header, body, out.path, page=n))
            elif shape.has_text_frame:
                out.add(_frame_block(shape.text_frame, out.path, n))
        if slide.has_notes_slide:
            frame = slide.notes_slide.notes_text_frame
            notes = "\n".join(t for p in frame.paragraphs if (t := _text(p.text))) if frame is not None else ""
            if notes:
                out.add(Block(BlockKind.ADMONITION, notes, out.path, page=n, meta=BlockMeta(admonition="notes")))
    if all(b.kind == BlockKind.HEADING and b.text == f"Slide {b.page}" for b in out.blocks):
        raise DocumentError(DocumentError.EMPTY, "the presentation holds no text")
    return ParsedDocument(title=title or _file_title(key), blocks=tuple(out.blocks), parser="pptx",
                          parser_version=VERSION)


# -- Excel --------------------------------------------------------------------

def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return clean_cell(value)


def _sheet_rows(sheet: Any, budget: list[int]) -> list[list[str]]:
    """A sheet's non-empty rows, trailing empty cells dropped, bounded by the parse limits."""
    cap = limits.current().max_table_rows
    rows: list[list[str]] = []
    for n, values in enumerate(sheet.iter_rows(values_only=True)):
        if n % 1000 == 999:
            limits.check_time(f"sheet {sheet.title!r} row {n}")
        cells = [_cell(v) for v in values]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            continue
        rows.append(cells)
        budget[0] += 1
        if len(rows) > cap + 1:  # the header row is not counted
            raise DocumentError(DocumentError.TOO_LARGE, f"sheet {sheet.title!r} has more than {cap} rows")
        limits.check_blocks(budget[0])
    if rows:  # empty leading columns (a table that starts at C3)
        lead = min(next(i for i, c in enumerate(r) if c) for r in rows)
        rows = [r[lead:] for r in rows]
    return rows


def _header_at(rows: list[list[str]]) -> int:
    """The header row: the first of the top rows that fills (nearly) as many cells as the fullest of them,
    with a row as full below it; note lines written above a table ("Lots of people / simply cannot resist
    writing some notes") fail the first test or the second."""
    top = rows[:20]
    filled = [sum(1 for c in row if c) for row in top]
    most = max(filled)
    need = most - 1 if most >= 4 else most  # a header may leave its corner cell blank
    for i, n in enumerate(filled):
        if n >= need and (i + 1 == len(filled) or filled[i + 1] >= need):
            return i
    return 0


def parse_xlsx(data: bytes, key: str) -> ParsedDocument:
    import openpyxl  # deferred, as for Word

    book = _open(data, key, "xlsx", lambda f: openpyxl.load_workbook(f, read_only=True, data_only=True))
    out = _Sections()
    budget = [0]
    try:
        for sheet in book.worksheets:
            if hasattr(sheet, "reset_dimensions"):
                sheet.reset_dimensions()  # a stale <dimension> would hide rows or pad them to it
            rows = _sheet_rows(sheet, budget)
            if not rows:
                continue
            name = _text(sheet.title) or f"Sheet {len(out.blocks) + 1}"
            out.heading(1, name)
            start = _header_at(rows)
            for note in rows[:start]:
                out.add(Block(BlockKind.PARAGRAPH, " ".join(c for c in note if c), out.path))
            out.add(table_block(rows[start : start + 1], rows[start + 1 :], out.path, caption=name))
        title = _text(book.properties.title) if book.properties is not None else ""
    finally:
        book.close()
    if not out.blocks:
        raise DocumentError(DocumentError.EMPTY, "the workbook holds no cell values")
    return ParsedDocument(title=title or _file_title(key), blocks=tuple(out.blocks), parser="xlsx",
                          parser_version=VERSION)


__all__ = ["VERSION", "parse_docx", "parse_pptx", "parse_xlsx"]
