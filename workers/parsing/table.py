"""CSV and TSV files as tables: one header, many rows."""

from __future__ import annotations

import csv
import io

from core.errors import DocumentError
from core.types import Block, ParsedDocument
from workers.parsing.decode import decode_text

VERSION = "table-1"


def parse_table(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    delimiter = "\t" if key.lower().endswith(".tsv") else ","
    try:
        rows = [r for r in csv.reader(io.StringIO(text), delimiter=delimiter) if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise DocumentError(DocumentError.PARSE_FAILED, f"malformed {delimiter!r}-separated file: {exc}") from exc
    if not rows:
        raise DocumentError(DocumentError.EMPTY, "no rows")
    header = [c.strip() for c in rows[0]]
    title = key.rsplit("/", 1)[-1]
    blocks = tuple(
        Block("table_row", " | ".join(c.strip() for c in row), (title,), meta={"row": n, "cells": [c.strip() for c in row]})
        for n, row in enumerate(rows[1:], start=1)
    )
    return ParsedDocument(
        title=title, blocks=blocks, parser="table", parser_version=VERSION, meta={"columns": header}
    )
