"""A transform step that replaces e-mail addresses and phone numbers with ``[email]`` and ``[phone]``.

Off by default; ``pipeline.steps = ["redact_pii"]`` turns it on
(:data:`workers.steps.TRANSFORMS`).  It rewrites every text a parsed
document carries into its chunks and the registry: the title, each block's
text and heading path, and the strings in its metadata (list items, table
cells, link texts and targets, a definition's term, a docstring), so no
address reaches a chunk, a stored text or the embedder.

What it does not do: find every kind of personal data (names, addresses,
identity numbers are left), or phone numbers in shapes other than an
international ``+<country> ...`` number of 8 to 15 digits, ``(555)
123-4567`` and ``555-123-4567`` (dots or spaces too); dates, versions and
plain digit runs are left alone on purpose.  It does not touch hashes the
parser stored (``*hash`` keys of the document's metadata) nor the raw bytes
(the source keeps them; provenance is read from the front matter).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from freshindex.core.types import Block, ParsedDocument

EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,5}"  # international: +44 20 7946 0958, +1 (555) 123-4567
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"  # (555) 123-4567
    r"|\d{3}([ .-])\d{3}\1\d{4}"  # 555-123-4567, 555.123.4567, 555 123 4567
    r")(?![\w])"
)


def _international(match: re.Match[str]) -> bool:
    return not match.group(0).startswith("+") or 8 <= sum(ch.isdigit() for ch in match.group(0)) <= 15


def redact_text(text: str) -> str:
    """``text`` with e-mail addresses replaced by ``[email]`` and phone numbers by ``[phone]``."""
    return _redact_tracked(text)[0]


def _redact_tracked(text: str) -> tuple[str, list[list[tuple[int, int, int]]]]:
    """:func:`redact_text`, and its replacements: per pass (e-mail, phone), (start, end, new length) each, in
    the text that pass read."""
    passes: list[list[tuple[int, int, int]]] = []

    def put(m: re.Match[str], word: str) -> str:
        passes[-1].append((m.start(), m.end(), len(word)))
        return word

    passes.append([])
    if "@" in text:
        text = EMAIL.sub(lambda m: put(m, "[email]"), text)
    passes.append([])
    text = PHONE.sub(lambda m: put(m, "[phone]") if _international(m) else m.group(0), text)
    return text, passes


def _moved(offset: int, passes: list[list[tuple[int, int, int]]]) -> int:
    """Where ``offset`` of the text before the passes lands after them: moved by the length change of every
    replacement before it; inside a replacement, to its start."""
    for edits in passes:
        shift = 0
        for start, end, new in edits:
            if offset >= end:
                shift += new - (end - start)
            elif offset > start:
                shift += start - offset
                break
            else:
                break
        offset += shift
    return offset


def _scrub(value: Any) -> Any:
    """Every string in ``value`` (strings, lists, tuples, dicts of them) redacted; anything else as it is."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_scrub(v) for v in value)
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    return value


def _block(block: Block) -> Block:
    meta = block.meta
    changes = {f.name: _scrub(getattr(meta, f.name)) for f in dataclasses.fields(meta)}
    text, passes = _redact_tracked(block.text)
    if any(passes) and meta.page_breaks:  # a PDF block's page offsets follow its text (citations)
        changes["page_breaks"] = [(_moved(offset, passes), page) for offset, page in meta.page_breaks]
    return dataclasses.replace(block, text=text, heading_path=_scrub(block.heading_path),
                               meta=dataclasses.replace(meta, **changes))


class RedactPii:
    """The ``redact_pii`` step: e-mail addresses and phone numbers out of a parsed document."""

    name = "redact_pii"
    #: Part of every document's version while the step is on: bump it when what it replaces changes.
    version = "1"

    def run(self, doc: ParsedDocument) -> ParsedDocument:
        meta = {k: (v if k.endswith("hash") else _scrub(v)) for k, v in doc.meta.items()}
        return dataclasses.replace(doc, title=redact_text(doc.title), blocks=tuple(_block(b) for b in doc.blocks),
                                   meta=meta)


__all__ = ["EMAIL", "PHONE", "RedactPii", "redact_text"]
