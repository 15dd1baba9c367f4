"""Blocks to chunks: by section, within a token budget, with stable ids.

* Prose is packed section by section (a chunk never spans two headings), so
  a condition stays in the chunk of the step it qualifies whenever the
  section fits the budget; longer paragraphs split at sentence ends with a
  small overlap.
* A code block stays whole when it fits and is joined to the paragraph that
  introduces it; symbols of source files are one chunk each.
* Table rows are grouped, and every group repeats the table's header.

Chunk ids come from (document id, heading path, kind, occurrence of the same
content under the same heading, content hash): an edit elsewhere does not
move a chunk's id, and identical text gets its vector from the cache.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from core.ids import chunk_point_id, sha256_hex
from core.types import Block, ChunkDraft, ParsedDocument

#: Enters every content hash: bump it when chunk boundaries or text may change.
CHUNKER_VERSION = "c1"

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[A-Za-z0-9_]+|[^\sA-Za-z0-9_]")
_SENTENCE = re.compile(r"(?<=[.!?。！？;；])\s+|(?<=[。！？；])")
_WS = re.compile(r"\s+")
_SLUG = re.compile(r"[^a-z0-9\u3400-\u9fff]+")


def estimate_tokens(text: str) -> int:
    """WordPiece-like count without loading a tokenizer (within ~20 %)."""
    return int(len(_TOKEN.findall(text)) * 1.15) + 1


def normalize(text: str) -> str:
    return _WS.sub(" ", text).strip()


def slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-")[:80] or "section"


@dataclass
class _Piece:
    text: str
    kind: str
    page: int | None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Chunker:
    max_tokens: int = 200
    overlap_tokens: int = 24

    def chunk(self, document_id: str, parsed: ParsedDocument) -> list[ChunkDraft]:
        drafts: list[ChunkDraft] = []
        seen: dict[tuple[tuple[str, ...], str], int] = {}
        for heading_path, blocks in _sections(parsed.blocks):
            for piece in self._pack(blocks, parsed):
                text = piece.text.strip()
                if not text:
                    continue
                chash = sha256_hex(
                    CHUNKER_VERSION, parsed.parser_version, "\x1f".join(heading_path), normalize(text)
                )
                occurrence = seen.get((heading_path, chash), 0)
                seen[(heading_path, chash)] = occurrence + 1
                structural = (*heading_path, piece.kind, str(occurrence))
                drafts.append(
                    ChunkDraft(
                        id=chunk_point_id(document_id, structural, chash),
                        ordinal=len(drafts),
                        text=text,
                        content_hash=chash,
                        kind=piece.kind,
                        heading_path=heading_path,
                        anchor=_anchor(heading_path, piece),
                        page=piece.page,
                        meta=piece.meta,
                    )
                )
        return drafts

    # -- packing --------------------------------------------------------------

    def _pack(self, blocks: list[Block], parsed: ParsedDocument) -> Iterator[_Piece]:
        buf: list[_Piece] = []
        budget = self.max_tokens

        def emit() -> Iterator[_Piece]:
            if buf:
                kinds = {p.kind for p in buf}
                kind = buf[0].kind if len(kinds) == 1 else "mixed"
                meta: dict[str, Any] = {}
                for p in buf:
                    for k, v in p.meta.items():
                        meta.setdefault(k, v)
                if any(p.meta.get("ocr") for p in buf):
                    meta["ocr"] = True
                yield _Piece("\n\n".join(p.text for p in buf), kind, buf[0].page, meta)
                buf.clear()

        rows = [b for b in blocks if b.kind == "table_row"]
        if rows:
            yield from self._table_rows(rows, parsed)
            blocks = [b for b in blocks if b.kind != "table_row"]
        for block in blocks:
            if block.kind == "heading":
                continue
            if block.kind == "code" and block.meta.get("symbol"):
                # Source file symbols are units of their own.
                yield from emit()
                yield from self._split(block)
                continue
            size = estimate_tokens(block.text)
            used = sum(estimate_tokens(p.text) for p in buf)
            if buf and used + size > budget:
                # Keep a code sample with the paragraph that introduces it.
                if block.kind == "code" and buf[-1].kind == "paragraph" and estimate_tokens(buf[-1].text) + size <= budget:
                    intro = buf.pop()
                    yield from emit()
                    buf.append(intro)
                else:
                    yield from emit()
            if size > budget:
                yield from emit()
                yield from self._split(block)
                continue
            buf.append(_Piece(block.text, block.kind, block.page, dict(block.meta)))
        yield from emit()

    def _split(self, block: Block) -> Iterator[_Piece]:
        """Split one oversized block: code and tables by line, prose by sentence."""
        if estimate_tokens(block.text) <= self.max_tokens:
            yield _Piece(block.text, block.kind, block.page, dict(block.meta))
            return
        if block.kind in ("code", "table", "list"):
            lines = block.text.splitlines()
            header = lines[:2] if block.kind == "table" and len(lines) > 2 else []
            body = lines[2:] if header else lines
            part: list[str] = []
            n = 0
            for line in body:
                if part and estimate_tokens("\n".join(header + part + [line])) > self.max_tokens:
                    n += 1
                    yield _Piece("\n".join(header + part), block.kind, block.page, {**block.meta, "part": n})
                    part = []
                part.append(line)
            if part:
                yield _Piece("\n".join(header + part), block.kind, block.page, {**block.meta, "part": n + 1})
            return
        sentences = [s for s in _SENTENCE.split(block.text) if s.strip()]
        part, n = [], 0
        for sentence in sentences:
            if part and estimate_tokens(" ".join([*part, sentence])) > self.max_tokens:
                n += 1
                yield _Piece(" ".join(part), block.kind, block.page, {**block.meta, "part": n})
                tail: list[str] = []
                for s in reversed(part):
                    if estimate_tokens(" ".join([s, *tail])) > self.overlap_tokens:
                        break
                    tail.insert(0, s)
                part = tail
            part.append(sentence)
        if part:
            yield _Piece(" ".join(part), block.kind, block.page, {**block.meta, "part": n + 1})

    def _table_rows(self, rows: list[Block], parsed: ParsedDocument) -> Iterator[_Piece]:
        columns = parsed.meta.get("columns") or []
        header = ["| " + " | ".join(columns) + " |", "|" + "---|" * max(1, len(columns))] if columns else []
        group: list[Block] = []

        def render(g: list[Block]) -> _Piece:
            lines = header + ["| " + " | ".join(r.meta.get("cells", [r.text])) + " |" for r in g]
            first, last = g[0].meta.get("row"), g[-1].meta.get("row")
            return _Piece("\n".join(lines), "table", None, {"columns": columns, "rows": [first, last]})

        for row in rows:
            if group and estimate_tokens("\n".join(header + [r.text for r in group] + [row.text])) > self.max_tokens:
                yield render(group)
                group = []
            group.append(row)
        if group:
            yield render(group)


def _sections(blocks: Iterable[Block]) -> Iterator[tuple[tuple[str, ...], list[Block]]]:
    current: tuple[str, ...] | None = None
    acc: list[Block] = []
    for block in blocks:
        if block.heading_path != current and acc:
            yield current or (), acc
            acc = []
        current = block.heading_path
        acc.append(block)
    if acc:
        yield current or (), acc


def _anchor(heading_path: tuple[str, ...], piece: _Piece) -> str:
    lines = piece.meta.get("lines")
    if lines:
        return f"L{lines[0]}-L{lines[1]}"
    rows = piece.meta.get("rows")
    if rows:
        return f"rows-{rows[0]}-{rows[1]}"
    base = slug(heading_path[-1]) if heading_path else ""
    if piece.page:
        return f"page={piece.page}" + (f"&{base}" if base else "")
    return base or "top"
