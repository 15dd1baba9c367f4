"""Tables: CSV and TSV files, and the table block every parser emits.

A table block (``kind=BlockKind.TABLE``) carries its structure in ``meta`` so the
chunker can cut it into groups of rows that each repeat the caption, the
column headers and the units:

* ``columns``: one name per column (multi-row headers joined);
* ``header_rows``: the header rows as printed;
* ``rows``: the body rows, a list of cell lists;
* ``units``: column name to unit, read from "Price (USD)", "Latency [ms]"
  or a header row made only of bracketed units;
* ``caption`` when the table has one;
* ``row_pages`` when its rows are printed on several pages (one page per row).

All of it is a :class:`core.types.TableMeta`.

CSV and TSV files are one table each: their rows are ``table_row`` blocks
(``meta["cells"]``, ``meta["row"]``) and their header is in the document
meta, so a file of a million rows never becomes one giant block.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.core.types import Block, BlockMeta, ParsedDocument, TableMeta
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.decode import decode_text

VERSION = "table-2"

_UNIT = re.compile(r"(?:\(([^()]{1,24})\)|\[([^\[\]]{1,24})\])\s*$")
_UNIT_ONLY = re.compile(r"^\s*(?:\(([^()]{1,24})\)|\[([^\[\]]{1,24})\])\s*$")
_WS = re.compile(r"\s+")


def clean_cell(text: Any) -> str:
    return _WS.sub(" ", str(text if text is not None else "")).strip()


def unit_of(column: str) -> str | None:
    m = _UNIT.search(column)
    if not m:
        return None
    unit = (m.group(1) or m.group(2)).strip()
    # "(optional)" or "(see note 3)" are remarks, not units.
    if len(unit.split()) > 3 or unit.lower() in ("optional", "required", "default", "deprecated", "beta"):
        return None
    return unit


def split_unit_row(header_rows: list[list[str]]) -> tuple[list[list[str]], list[str] | None]:
    """A header row made only of "(USD)", "[ms]" cells is a row of units."""
    for i, row in enumerate(header_rows[1:], start=1):
        cells = [c for c in row if c]
        if cells and all(_UNIT_ONLY.match(c) for c in cells):
            units = []
            for c in row:
                m = _UNIT_ONLY.match(c)
                units.append((m.group(1) or m.group(2)).strip() if m else "")
            return header_rows[:i] + header_rows[i + 1 :], units
    return header_rows, None


def column_names(header_rows: list[list[str]], width: int, unit_row: list[str] | None = None) -> list[str]:
    names = []
    for col in range(width):
        parts: list[str] = []
        for row in header_rows:
            cell = row[col] if col < len(row) else ""
            if cell and cell not in parts:
                parts.append(cell)
        name = " ".join(parts) or f"column {col + 1}"
        if unit_row and col < len(unit_row) and unit_row[col] and unit_of(name) is None:
            name = f"{name} ({unit_row[col]})"
        names.append(name)
    return names


def escape(cell: str) -> str:
    return cell.replace("|", "\\|")


def markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(escape(c) for c in cells) + " |"


def markdown_header(columns: Sequence[str]) -> list[str]:
    return [markdown_row(columns), "|" + "---|" * max(1, len(columns))]


def caption_line(caption: str) -> str:
    return caption if re.match(r"(table|tabelle|tableau)\b|表", caption, re.I) else f"Table: {caption}"


def table_meta(header_rows: list[list[str]], rows: list[list[str]], caption: str | None = None,
               headerless: bool = False, row_pages: list[int] | None = None) -> TableMeta:
    """The meta of a table block from raw header and body rows (cells cleaned here).

    ``headerless``: the table has no header row (``header_rows`` empty); its
    columns are named by position ("column 1") and every row stays data.
    ``row_pages``: the page of each body row; it follows the rows when a first
    row turns out to be a header or a row of units.
    """
    header_rows = [[clean_cell(c) for c in r] for r in header_rows]
    rows = [[clean_cell(c) for c in r] for r in rows]
    limits.check_rows(len(rows))
    pages = list(row_pages) if row_pages is not None and len(row_pages) == len(rows) else None
    width = max([len(r) for r in header_rows + rows] or [0])
    if header_rows and rows:
        # A units row right under the header ("| | (hours) | (EUR) |").
        header_rows, rows = header_rows + rows[:1], rows[1:]
        header_rows, unit_row = split_unit_row(header_rows)
        if unit_row is None:
            header_rows, rows = header_rows[:-1], [header_rows[-1], *rows]
        elif pages:
            pages = pages[1:]
    else:
        header_rows, unit_row = split_unit_row(header_rows)
    if not header_rows and rows and not headerless:
        header_rows, rows = [rows[0]], rows[1:]
        pages = pages[1:] if pages else pages
    columns = column_names(header_rows, width, unit_row)
    rows = [r + [""] * (width - len(r)) for r in rows]
    units = {c: u for c in columns if (u := unit_of(c))}
    return TableMeta(columns=columns, header_rows=header_rows, rows=rows, units=units, caption=caption or None,
                     row_pages=pages if pages and len(set(pages)) > 1 else None)


def table_block(header_rows: list[list[str]], rows: list[list[str]], heading_path: tuple[str, ...],
                caption: str | None = None, page: int | None = None, headerless: bool = False,
                row_pages: list[int] | None = None, **extra: Any) -> Block | None:
    """A table block, or None for a table with no cell text.  ``extra`` are other
    :class:`~core.types.BlockMeta` fields (``pages``, ``anchor_id``, the OCR fields)."""
    meta = table_meta(header_rows, rows, caption, headerless=headerless, row_pages=row_pages)
    if headerless:
        meta.headerless = True
    if not meta.rows and not any(any(r) for r in meta.header_rows):
        return None
    meta.update(extra)
    lines = ([caption_line(caption)] if caption else []) + markdown_header(meta.columns)
    lines += [markdown_row(r) for r in meta.rows]
    return Block(BlockKind.TABLE, "\n".join(lines), heading_path, page=page, meta=meta)


def parse_table(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    delimiter = "\t" if key.lower().endswith(".tsv") else ","
    rows: list[list[str]] = []
    try:
        for n, r in enumerate(csv.reader(io.StringIO(text), delimiter=delimiter)):
            if n % 5000 == 0:
                limits.check_time(f"row {n}")
                limits.check_rows(n, "the file")
            if any(c.strip() for c in r):
                rows.append([clean_cell(c) for c in r])
    except csv.Error as exc:
        raise DocumentError(DocumentError.PARSE_FAILED, f"malformed {delimiter!r}-separated file: {exc}") from exc
    if not rows:
        raise DocumentError(DocumentError.EMPTY, "no rows")
    limits.check_rows(len(rows) - 1, "the file")
    header_rows, body = [rows[0]], rows[1:]
    unit_row = split_unit_row([rows[0], body[0]])[1] if body else None
    if unit_row is not None:
        body = body[1:]
    width = max(len(r) for r in rows)
    columns = column_names(header_rows, width, unit_row)
    units = {c: u for c in columns if (u := unit_of(c))}
    name = key.rsplit("/", 1)[-1]
    title = re.sub(r"[-_]+", " ", name.rsplit(".", 1)[0]).strip().capitalize() or name
    blocks = tuple(
        Block(BlockKind.TABLE_ROW, " | ".join(row), (title,),
              meta=BlockMeta(row=n, cells=row + [""] * (width - len(row))))
        for n, row in enumerate(body, start=1)
    )
    return ParsedDocument(
        title=title, blocks=blocks, parser="table", parser_version=VERSION,
        meta={"columns": columns, "units": units, "file": name},
    )
