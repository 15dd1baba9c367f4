"""Plain text: paragraphs separated by blank lines."""

from __future__ import annotations

import re

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, ParsedDocument
from freshindex.workers.parsing.decode import decode_text

VERSION = "txt-1"


def parse_plain(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    title = paragraphs[0].splitlines()[0][:120] if paragraphs else key.rsplit("/", 1)[-1]
    blocks = tuple(Block(BlockKind.PARAGRAPH, p) for p in paragraphs)
    return ParsedDocument(title=title, blocks=blocks, parser="text", parser_version=VERSION)
