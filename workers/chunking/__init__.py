"""Blocks to chunks, by document type, with ids that survive edits.

* **Prose** (Markdown, HTML, text, PDF) is chunked section by section: a
  chunk never spans two headings.  Inside a section, blocks become units (a
  step with its conditions, warnings and code, see
  :mod:`workers.chunking.units`) and units are packed into the token budget
  with content-defined boundaries (:mod:`workers.chunking.pack`), so an
  edited paragraph re-chunks its own chunk and not the rest of the section.
  A unit over the budget is cut at sentence ends with a small overlap (or
  between lines, for code and lists) into parts linked to each other.
* **Tables** (and CSV/TSV files) are groups of whole rows, each carrying the
  caption, the column headers and the units (:mod:`workers.chunking.tables`).
* **Code** files are one chunk per symbol (:mod:`workers.chunking.code`).

Identity.  ``content_hash`` covers the chunker version, the parser's
version, the heading path and the normalized text (for a table that text
holds the caption and header).  It is the vector cache key, so it covers
exactly what the model sees (:attr:`core.types.ChunkDraft.embed_text`).
Volatile furniture (version banners, footer dates, page numbers, generated
heading anchors) never reaches a chunk: the parsers drop it, so it is in
neither the text nor the hash.  The page a chunk sits on is metadata, not
identity.  The point id comes from (document id, heading path, kind, the
occurrence of identical content under that path, content hash): no
ordinal, so a section inserted above leaves every id below unchanged, and a
section reordered among its siblings keeps its ids and vectors.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.core.ids import chunk_point_id, sha256_hex
from freshindex.core.types import Block, ChunkDraft, ParsedDocument
from freshindex.workers.chunking.code import code_pieces
from freshindex.workers.chunking.pack import Piece, estimate_tokens, is_anchor, pack, split_lines, split_prose
from freshindex.workers.chunking.tables import table_pieces
from freshindex.workers.chunking.units import Unit, build_units, merged_meta, render

#: Enters every content hash: bump it when chunk boundaries or text may change.
CHUNKER_VERSION = "c2"

__all__ = ["CHUNKER_VERSION", "Chunker", "estimate_tokens", "normalize", "slug"]

_WS = re.compile(r"\s+")
_INVISIBLE = re.compile(r"[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_SLUG = re.compile(r"[^a-z0-9\u3400-\u9fff]+")


def normalize(text: str) -> str:
    """What the hash sees: Unicode NFC, no invisible characters, single spaces."""
    return _WS.sub(" ", _INVISIBLE.sub("", unicodedata.normalize("NFC", text))).strip()


def slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-")[:80] or "section"


@dataclass(frozen=True)
class Chunker:
    """Cuts one parsed document into chunks, within per-document bounds.

    ``max_chunks`` and ``max_document_tokens`` bound what one document may
    cost the embedder (and the memory its chunks take).  A document over
    either fails as ``too_large`` as early as it can be seen: its blocks'
    tokens are counted before any unit is built, and chunking stops at the
    first chunk over a limit, so a 50 MB text file never becomes 46,000
    chunks.  The token counts are :func:`estimate_tokens` estimates.
    """

    max_tokens: int = 200
    overlap_tokens: int = 24
    #: Chunks one document may produce.
    max_chunks: int = 10_000
    #: Estimated tokens one document may send to the embedder.
    max_document_tokens: int = 2_000_000

    def chunk(self, document_id: str, parsed: ParsedDocument) -> list[ChunkDraft]:
        self._check_source_tokens(parsed.blocks)
        if parsed.parser == "code":
            pieces: Iterable[Piece] = code_pieces(parsed.blocks, self.max_tokens)
        else:
            pieces = self._document_pieces(parsed)
        return _identify(document_id, parsed, pieces, self)

    def _check_source_tokens(self, blocks: Iterable[Block]) -> None:
        # Counted block by block so a huge document stops after the limit's
        # worth of text, not after all of it.
        total = 0
        for block in blocks:
            total += estimate_tokens(block.text)
            if total > self.max_document_tokens:
                raise DocumentError(
                    DocumentError.TOO_LARGE,
                    f"more than {self.max_document_tokens} tokens of text (the per-document limit); "
                    "split the document or raise sources.max_tokens_per_document",
                )

    # -- documents ------------------------------------------------------------

    def _document_pieces(self, parsed: ParsedDocument) -> Iterator[Piece]:
        rows = [b for b in parsed.blocks if b.kind == BlockKind.TABLE_ROW]
        if rows:
            yield from self._csv(rows, parsed)
        for heading_path, blocks in _sections(b for b in parsed.blocks if b.kind != BlockKind.TABLE_ROW):
            run: list[Block] = []
            for block in blocks:
                if block.kind == BlockKind.HEADING:
                    continue
                if block.kind == BlockKind.TABLE and "rows" in block.meta:
                    yield from self._prose(heading_path, run)
                    run = []
                    yield from self._table(heading_path, block)
                    continue
                run.append(block)
            yield from self._prose(heading_path, run)

    def _csv(self, rows: list[Block], parsed: ParsedDocument) -> Iterator[Piece]:
        columns = parsed.meta.get("columns") or []
        cells = [r.meta.get("cells", [r.text]) for r in rows]
        path = rows[0].heading_path
        # The file's title is the heading path (the model sees it); no caption line.
        for piece in table_pieces(columns, cells, self.max_tokens, units=parsed.meta.get("units")):
            first, last = piece.meta["rows"]
            piece.meta["rows"] = [rows[first - 1].meta.get("row", first), rows[last - 1].meta.get("row", last)]
            yield Piece(piece.text, BlockKind.TABLE, path, None, piece.meta)

    def _table(self, heading_path: tuple[str, ...], block: Block) -> Iterator[Piece]:
        m = block.meta
        extra = {k: m[k] for k in ("pages",) if k in m}
        for piece in table_pieces(m["columns"], m["rows"], self.max_tokens, caption=m.get("caption"),
                                  units=m.get("units"), extra=extra):
            yield Piece(piece.text, BlockKind.TABLE, heading_path, block.page, piece.meta)

    def _prose(self, heading_path: tuple[str, ...], blocks: list[Block]) -> Iterator[Piece]:
        if not blocks:
            return
        units = build_units(blocks, self.max_tokens)
        groups = pack([u.tokens for u in units], [is_anchor(normalize(u.text)) for u in units],
                      self.max_tokens, min_fill=self.max_tokens // 2)
        for group in groups:
            if len(group) == 1 and units[group[0]].tokens > self.max_tokens:
                yield from self._split(heading_path, units[group[0]])
                continue
            parts = [b for i in group for b in units[i].parts]
            text = render([units[i] for i in group])
            yield Piece(text, _kind(parts), heading_path, _first_page(parts), merged_meta(parts))

    def _split(self, heading_path: tuple[str, ...], unit: Unit) -> Iterator[Piece]:
        kinds = {b.kind for b in unit.parts}
        if BlockKind.CODE in kinds or kinds == {BlockKind.LIST} or kinds == {BlockKind.TABLE}:
            texts = split_lines(unit.text, self.max_tokens)
        else:
            texts = split_prose(unit.text, self.max_tokens, self.overlap_tokens)
        meta = merged_meta(unit.parts)
        group = hashlib.blake2b(normalize(unit.text).encode(), digest_size=8).hexdigest()
        for text in texts:
            yield Piece(text, _kind(unit.parts), heading_path, _first_page(unit.parts), dict(meta), group=group)


def _identify(document_id: str, parsed: ParsedDocument, pieces: Iterable[Piece], bounds: Chunker) -> list[ChunkDraft]:
    drafts: list[ChunkDraft] = []
    seen: dict[tuple[Any, ...], int] = {}
    groups: dict[str, list[int]] = {}
    tokens = 0
    for piece in pieces:
        text = piece.text.strip()
        if not text:
            continue
        path = piece.heading_path
        if len(drafts) >= bounds.max_chunks:
            raise DocumentError(
                DocumentError.TOO_LARGE,
                f"more than {bounds.max_chunks} chunks (the per-document limit); "
                "split the document or raise sources.max_chunks_per_document",
            )
        # What the embedder sees: repeated table headers and overlaps count too.
        tokens += estimate_tokens(text) + (estimate_tokens(" > ".join(path)) if path else 0)
        if tokens > bounds.max_document_tokens:
            raise DocumentError(
                DocumentError.TOO_LARGE,
                f"its chunks hold more than {bounds.max_document_tokens} tokens (the per-document limit); "
                "split the document or raise sources.max_tokens_per_document",
            )
        chash = sha256_hex(CHUNKER_VERSION, parsed.parser_version, "\x1f".join(path), normalize(text))
        occurrence = seen.get((path, piece.kind, chash), 0)
        seen[(path, piece.kind, chash)] = occurrence + 1
        structural = (*path, piece.kind, str(occurrence))
        if piece.group:
            groups.setdefault(f"{'/'.join(path)}\x1f{piece.group}", []).append(len(drafts))
        drafts.append(
            ChunkDraft(
                id=chunk_point_id(document_id, structural, chash),
                ordinal=len(drafts),
                text=text,
                content_hash=chash,
                kind=piece.kind,
                heading_path=path,
                anchor=_anchor(path, piece),
                page=piece.page,
                meta=dict(piece.meta),
            )
        )
    for members in groups.values():
        if len(members) < 2:
            continue
        for n, index in enumerate(members):
            meta = drafts[index].meta
            meta["part"], meta["parts"] = n + 1, len(members)
            if n:
                meta["prev"] = drafts[members[n - 1]].id
            if n + 1 < len(members):
                meta["next"] = drafts[members[n + 1]].id
    return drafts


#: A chunk's kind when it packs blocks of several kinds (otherwise its blocks' :class:`BlockKind`).
MIXED_KIND = "mixed"


def _kind(blocks: list[Block]) -> str:
    kinds = {b.kind for b in blocks}
    return kinds.pop() if len(kinds) == 1 else MIXED_KIND


def _first_page(blocks: list[Block]) -> int | None:
    return next((b.page for b in blocks if b.page), None)


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


def _anchor(heading_path: tuple[str, ...], piece: Piece) -> str:
    lines = piece.meta.get("lines")
    if lines:
        return f"L{lines[0]}-L{lines[1]}"
    rows = piece.meta.get("rows")
    if rows and piece.kind == BlockKind.TABLE:
        return f"rows-{rows[0]}-{rows[1]}"
    base = slug(heading_path[-1]) if heading_path else ""
    if piece.page:
        return f"page={piece.page}" + (f"&{base}" if base else "")
    return base or "top"
