"""Tables as groups of rows that each carry the caption, the headers and the units.

A question answered by one row ("What does storage cost in Frankfurt?")
must find a chunk that says which column is which and in what unit, so
every group repeats the caption line and the Markdown header.  Rows are
never split; groups are cut by :func:`~workers.chunking.pack.pack` so an
edited row changes its own group only, and they hold at most
``MAX_ROWS`` rows, because a vector of many rows answers each of them
worse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from freshindex.workers.chunking.pack import estimate_tokens, is_anchor, pack
from freshindex.workers.parsing.table import caption_line, markdown_header, markdown_row

MAX_ROWS = 8


@dataclass
class TablePiece:
    text: str
    meta: dict[str, Any] = field(default_factory=dict)


def table_pieces(columns: list[str], rows: list[list[str]], budget: int, *, caption: str | None = None,
                 units: dict[str, str] | None = None, first_row: int = 1,
                 extra: dict[str, Any] | None = None) -> Iterator[TablePiece]:
    head = ([caption_line(caption)] if caption else []) + markdown_header(columns)
    room = max(24, budget - estimate_tokens("\n".join(head)))
    lines = [markdown_row(r) for r in rows]
    sizes = [estimate_tokens(line) for line in lines]
    groups = pack(sizes, [is_anchor(line) for line in lines], room, min_fill=room // 2, max_items=MAX_ROWS)
    for group in groups:
        meta: dict[str, Any] = {"columns": columns, "rows": [first_row + group[0], first_row + group[-1]]}
        if units:
            meta["units"] = units
        if caption:
            meta["caption"] = caption
        meta.update(extra or {})
        yield TablePiece("\n".join(head + [lines[i] for i in group]), meta)
