"""Second pass: the document's blocks, decided with every page in view.

Furniture (margin lines repeating across pages, running heads), heading
levels from font sizes, reading order on two-column pages, paragraphs and
list items joined across page breaks, and tables joined when they go on
at the top of the next page.  Scanned pages are laid out by
:class:`~freshindex.workers.parsing.pdf.scanned.ScannedPages` into the same
block list.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, BlockMeta, block_meta
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.boilerplate import is_volatile, shape
from freshindex.workers.parsing.pdf.options import PdfOptions
from freshindex.workers.parsing.pdf.page import (
    ADMONITION,
    BULLET,
    CAPTION,
    FOOTNOTE,
    MARGIN,
    NUMBERED,
    TERMINAL,
    Line,
    Page,
    Table,
    dehyphenate,
    norm,
)
from freshindex.workers.parsing.pdf.scanned import ScannedPages, joined_ocr
from freshindex.workers.parsing.table import table_block

_RUNNING_HEAD = re.compile(r"^(?:chapter|appendix|part|section)\s+[\w.]+\s*[:.]\s*(.+)$", re.I)


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


class Assembler:
    """The blocks of a document, page by page: the heading path, the block kept
    open across a page break and the last table, which scanned pages share."""

    def __init__(self, pages: list[Page], opts: PdfOptions, toc: list[tuple[int, str, int]] | None = None) -> None:
        self.pages = pages
        self.toc = toc or []
        self.toc_titles = {norm(NUMBERED.sub(r"\2", t)) for _, t, _ in self.toc}
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
        self.scanned = ScannedPages(self)

    def _depth_levels(self, pages: list[Page]) -> dict[int, int]:
        """Numbering depth ("3" is 1, "3.2.1" is 3) to the heading level text pages give it.

        Scanned pages have no font sizes to compare: their numbered headings
        take the level that headings numbered alike have on the text pages,
        so a section keeps one level whether its page was scanned or not.
        """
        seen: dict[int, Counter[int]] = {}
        for p in pages:
            for ln in p.lines:
                m = NUMBERED.match(ln.text)
                level = self._heading_level(ln) if m else 0
                if m and level:
                    seen.setdefault(m.group(1).count(".") + 1, Counter())[level] += 1
        out = {d: c.most_common(1)[0][0] for d, c in seen.items()}
        for d in range(1, 7):  # depths the text pages never showed: one level below the one above
            out.setdefault(d, out.get(d - 1, d - 1) + 1 if d > 1 else 1)
        return out

    # furniture -----------------------------------------------------------

    def _furniture(self, pages: list[Page]) -> set[str]:
        counts: Counter[str] = Counter()
        for p in pages:
            seen = {shape(ln.text) for ln in p.lines if self._in_margin(ln, p)}
            counts.update(seen)
        # Running heads change with the chapter ("Chapter 3: Objects" on chapter 3's pages only): a
        # margin line repeated on three pages, or on a third of them in a short document, is furniture.
        need = max(2, min(3, int(0.3 * len(pages))))
        return {s for s, n in counts.items() if n >= need} if len(pages) >= 3 else set()

    @staticmethod
    def _in_margin(line: Line, page: Page) -> bool:
        return line.y1 <= page.height * MARGIN or line.y0 >= page.height * (1 - MARGIN)

    def _is_furniture(self, line: Line, page: Page) -> bool:
        if not self._in_margin(line, page):
            return False
        if shape(line.text) in self.furniture or self.running_head(line.text):
            return True
        return line.size <= self.body * 1.05 and is_volatile(line.text)

    def running_head(self, text: str) -> bool:
        """"Chapter 3: Objects, their modes and attributes 15": a chapter title from the outline as a page head."""
        text = re.sub(r"\s+\d{1,4}$|^\d{1,4}\s+", "", text.strip())
        m = _RUNNING_HEAD.match(text)
        if not m or not self.toc_titles:
            return False
        title = norm(m.group(1))
        return title in self.toc_titles or any(difflib.SequenceMatcher(None, title, t).ratio() >= 0.85
                                               for t in self.toc_titles if abs(len(t) - len(title)) < 6)


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
            o.meta["page_breaks"] = o.page_breaks(dehyphenate if o.kind == BlockKind.PARAGRAPH else "\n".join)
        if o.kind == BlockKind.CODE:
            self.emit(BlockKind.CODE, _dedent(o.parts), o.page, **o.meta)
            return
        if o.kind == BlockKind.LIST:
            self.emit(BlockKind.LIST, "\n".join(o.parts), o.page, items=list(o.parts), **o.meta)
            return
        text = dehyphenate(o.parts)
        m = ADMONITION.match(text)
        if m:
            self.emit(BlockKind.ADMONITION, text, o.page, admonition=m.group(1).lower(), **o.meta)
        else:
            self.emit(BlockKind.PARAGRAPH, text, o.page, **o.meta)

    def blocks(self) -> list[Block]:
        for page in self.pages:
            if page.ocr is not None:
                self.close()
                self.scanned.page_blocks(page)
                continue
            self._page_blocks(page)
        self.close()
        return self.out

    def _page_blocks(self, page: Page) -> None:
        lines = [ln for ln in page.lines if not self._is_furniture(ln, page)]
        items = _reading_order(lines, page.tables, page.width)
        left = _left_edge(lines)
        right = max((ln.x1 for ln in lines), default=0.0)
        first = True
        heading: Line | None = None  # the heading line just read, for headings set on two lines
        prev: Line | None = None
        for item in items:
            if isinstance(item, Table):
                self.close()
                self.table(item, page.number, at_top=first)
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
                    self.set_heading(line.text, level)
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
            elif BULLET.match(line.text):
                if not (self.open and self.open.kind == BlockKind.LIST):
                    self.close()
                    self.open = _Open(BlockKind.LIST, [], page.number, room)
                self.open.parts.append(line.text)
            elif self.open and self.open.kind == BlockKind.LIST and near and line.x0 > left + 4:
                self.open.parts[-1] += " " + line.text  # the next line of a list item
            elif self.open and self.open.kind == BlockKind.PARAGRAPH and near and not CAPTION.match(line.text):
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

    def _footnote(self, line: Line, page: Page) -> bool:
        """A footnote line: set smaller than the body, low on the page, after its mark ("1 strictly, ...")."""
        return line.size < self.body * 0.95 and line.y0 > page.height * 0.55 and bool(FOOTNOTE.match(line.text))

    def _continues(self, line: Line) -> bool:
        """Does ``line`` (first on a page or column) go on with the open block?"""
        o = self.open
        if o is None or o.kind not in (BlockKind.PARAGRAPH, BlockKind.LIST) or not o.parts:
            return False
        if self._heading_level(line) or line.mono or BULLET.match(line.text) or CAPTION.match(line.text):
            return False
        last = o.parts[-1].rstrip()
        if not last.endswith(TERMINAL) or line.text[:1].islower():
            return True
        # A sentence ended with the page.  Whether the paragraph did too cannot
        # be seen on the page; join only when the last line was filled to the
        # margin (wrapped: this line's first word did not fit on it), which
        # an ending line rarely is.
        char = (line.x1 - line.x0) / max(1, len(line.text))
        first_word = line.text.split(" ", 1)[0]
        return o.room < char * 1.5 < char * (len(first_word) + 1)

    def _append(self, line: Line, page: int) -> None:
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

    def _heading_level(self, line: Line) -> int:
        if len(line.text) > 150 or line.mono or CAPTION.match(line.text):
            return 0
        size = round(line.size * 2) / 2
        if size in self.levels:
            return self.levels[size]
        words = len(line.text.split())
        if line.bold and size >= self.body and words <= 12 and not line.text.endswith((".", ",", ";")):
            return self.bold_level
        return 0

    def set_heading(self, text: str, level: int) -> None:
        while self.path and self.path[-1][0] >= level:
            self.path.pop()
        self.path.append((level, text))

    def _intro(self, page: int) -> str | None:
        """The sentence introducing a table ("... the following types:"), carried by every chunk of it."""
        if not self.out or self.out[-1].kind != BlockKind.PARAGRAPH or self.out[-1].page != page:
            return None
        last = re.split(r"(?<=[.!?])\s+", self.out[-1].text)[-1]
        return last if 3 <= len(last.split()) <= 60 else None

    def table(self, table: Table, page: int, *, at_top: bool, ocr_meta: dict | None = None) -> None:
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
                                 row_pages=row_pages, **joined_ocr(prev.meta, ocr_meta))
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
        if self.out and self.out[-1].kind == BlockKind.PARAGRAPH and CAPTION.match(self.out[-1].text) \
                and len(self.out[-1].text) < 200:
            return self.out.pop().text
        return None


def _dedent(parts: list[str]) -> str:
    """Code lines without the indentation they all share (the page margin), the rest kept."""
    lines = [p.rstrip() for p in parts]
    common = min((len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()), default=0)
    return "\n".join(ln[common:] for ln in lines)


def _squash(cells: list[str]) -> list[str]:
    return ["".join(c.split()).lower() for c in cells]


def _left_edge(lines: list[Line]) -> float:
    return min((ln.x0 for ln in lines), default=0.0)


def _reading_order(lines: list[Line], tables: list[Table], page_width: float) -> list[Line | Table]:
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
    items: list[Line | Table] = [*lines, *tables]
    if not two_columns:
        return sorted(items, key=lambda it: (round(it.y0, 0), it.x0))
    ordered: list[Line | Table] = []
    band: list[Line] = []

    def flush() -> None:
        ordered.extend(sorted((ln for ln in band if ln.x0 < mid - 2), key=lambda ln: (ln.y0, ln.x0)))
        ordered.extend(sorted((ln for ln in band if ln.x0 >= mid - 2), key=lambda ln: (ln.y0, ln.x0)))
        band.clear()

    for it in sorted(items, key=lambda it: (it.y0, it.x0)):
        if isinstance(it, Table) or (it.x0 < mid - 2 and it.x1 > mid + 2):  # full width
            flush()
            ordered.append(it)
        else:
            band.append(it)
    flush()
    return ordered
