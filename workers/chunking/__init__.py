"""Blocks to chunks, by document type, with ids that survive edits.

* **Prose** (Markdown, HTML, text, PDF) is chunked section by section: a
  chunk never spans two headings, but for one case: a section whose own
  text is a line or two (at most a quarter of a chunk: a date and a summary
  above the first subsection) shares a chunk with that subsection's first
  piece, under the section's own path, when both fit and sit on one page;
  a section inserted right below such a lead takes it over (one chunk
  re-embedded beside the new one).  Inside a section, blocks become units (a
  step with its conditions, warnings and code, see
  :mod:`workers.chunking.units`) and units are packed into the token budget
  with content-defined boundaries (:mod:`workers.chunking.pack`), so an
  edited paragraph re-chunks its own chunk and not the rest of the section.
  A unit over the budget is cut at sentence ends with a small overlap (or
  between lines, for code and lists) into parts linked to each other; a
  comment that would end a part moves to the next one, with the code it
  explains, when that part has room.
* **Tables** (and CSV/TSV files) are groups of whole rows, each carrying the
  caption, the column headers and the units (:mod:`workers.chunking.tables`).
* **Code** files are one chunk per symbol (:mod:`workers.chunking.code`).

Sizes.  Every size is counted with the embedding model's own tokenizer
(``count_tokens``, injected; MiniLM's tokenizer when none is given, or
where that is missing :func:`models.tokens.conservative_count`,
an upper bound), and every chunk fits the model's input
limit *with* the header it is embedded with: a chunk's text gets
``min(max_tokens, max_input_tokens - [CLS]/[SEP] - header)`` tokens, and a
piece still over it (a table cut by estimate, a huge line) is cut again, so
the model never truncates a chunk.

Identity.  ``content_hash`` covers the chunker version, the parser's
version, and exactly what the model sees (:func:`core.types.embed_text`):
the document title, the heading path *without section numbers*, the
normalized text (for a table that text holds the caption and header).  It
is the vector cache key.  It never covers the file's key or path (a code
chunk's context is its qualified symbol name), so moving or renaming a file
re-embeds nothing; renumbering sections ("3.2 Rollback" -> "3.3 Rollback")
changes neither ids nor hashes (the numbered path is kept in
``meta["numbered_heading_path"]`` for citations).
Volatile furniture (version banners, footer dates, page numbers, generated
heading anchors) never reaches a chunk: the parsers drop it, so it is in
neither the text nor the hash.  The page a chunk sits on is metadata, not
identity.  The point id comes from (document id, heading path, kind, the
occurrence of identical content under that path, content hash): no
ordinal, so a section inserted above leaves every id below unchanged, and a
section reordered among its siblings keeps its ids and vectors.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.core.ids import chunk_point_id, sha256_hex
from freshindex.core.types import Block, BlockMeta, ChunkDraft, ParsedDocument, TableMeta, embed_header
from freshindex.models.tokens import minilm_count
from freshindex.workers.chunking.code import code_pieces
from freshindex.workers.chunking.pack import (
    Piece,
    estimate_tokens,
    hard_split,
    is_anchor,
    pack,
    split_lines,
    split_prose,
)
from freshindex.workers.chunking.tables import table_pieces
from freshindex.workers.chunking.units import Unit, build_units, entry_of, merged_meta, render

#: Enters every content hash: bump it when chunk boundaries or text may change.
#: c3: sizes by the model's tokenizer, the title in the embedded context, no file path and no
#: section numbers in it (a full re-embed once, on upgrade).
#: c4: every chunk holding part of a definition-list entry names its term (:func:`term_label`).
#: c5: a short section lead joins its first subsection; a comment ending a code part moves to the next.
#: c6: the parser's version leaves the content hash (what the vector cache keys on) for the point id, so
#: a parser upgrade rewrites its documents' points from cached vectors (a full re-embed once, on upgrade).
CHUNKER_VERSION = "c6"

__all__ = ["CHUNKER_VERSION", "Chunker", "estimate_tokens", "normalize", "slug", "strip_section_number", "term_label"]

_WS = re.compile(r"\s+")
_INVISIBLE = re.compile(r"[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_SLUG = re.compile(r"[^a-z0-9\u3400-\u9fff]+")
# "3.2.1 Rollback", "12. Limits", "A.3 Glossary", "B. Terms", "IV. Scope", "§ 4 Fees": a number, then a word.
_SECTION_NUMBER = re.compile(
    r"\s*((?:§\s*)?(?:\d{1,3}(?:\.\d{1,3})+\.?|\d{1,2}\.?|[A-Z](?:\.\d{1,3})+\.?|[A-Z]\.|[IVXLC]{1,6}\.))"
    r"[\s:)\u2013\u2014-]+(?=[^\W\d_])")


def normalize(text: str) -> str:
    """What the hash sees: Unicode NFC, no invisible characters, single spaces."""
    return _WS.sub(" ", _INVISIBLE.sub("", unicodedata.normalize("NFC", text))).strip()


def slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-")[:80] or "section"


def strip_section_number(text: str) -> tuple[str, str]:
    """``"3.2 Rollback"`` -> ``("3.2", "Rollback")``; a heading with no leading number -> ``("", text)``.

    Years and quantities are left alone ("2024 roadmap", "3D printing"); a
    bare one- or two-digit number followed by a word is taken as a number
    ("10 Limits" -> "Limits"), which a heading such as "10 things to check"
    pays for in its embedded text, not in its citation."""
    m = _SECTION_NUMBER.match(text)
    if not m:
        return "", text
    return m.group(1).rstrip("."), text[m.end() :]


_KEY = re.compile(r"\w+")


def _key(text: str) -> str:
    """Words (letters, digits, ``_``), lower case, between spaces: ``"HttpResponse.set_cookie()"``
    holds ``httpresponse set_cookie``; ``"openssl ciphers"`` does not hold ``ssl_ciphers``, nor
    ``"ModelForm factory"`` ``modelform_factory``."""
    return f" {' '.join(_KEY.findall(text.lower()))} "


def term_label(meta: BlockMeta | Mapping[str, Any], room: int, count: Callable[[str], int]) -> str:
    """The term a chunk of a definition-list entry repeats ("" outside an entry).

    The whole term (``work_mem (integer)``) when it takes at most a quarter
    of the room; otherwise the name a reader searches for, from the parser
    (``meta["term_name"]``: ``HttpResponse.set_cookie`` for a signature of
    twelve parameters), cut to that quarter if even the name is longer.  A
    repeated signature would crowd out the description it labels."""
    term = " ".join(str(meta.get("term") or "").split())
    if not term:
        return ""
    quarter = max(4, room // 4)
    if count(term) <= quarter:
        return term
    name = " ".join(str(meta.get("term_name") or "").split())
    if name and count(name) <= quarter:
        return name
    return hard_split(name or term, quarter, count)[0]


def _names_term(text: str, meta: BlockMeta | Mapping[str, Any]) -> bool:
    """Whether ``text`` already holds the entry's term or its name."""
    key = _key(text)
    wanted = (_key(str(meta.get("term") or "")), _key(str(meta.get("term_name") or "")))
    return any(k.strip() and k in key for k in wanted)


def _heading_paths(blocks: list[Block], path: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the path without section numbers, the path as the document numbers it)."""
    numbers = next((b.meta["heading_numbers"] for b in blocks if b.meta.get("heading_numbers")), None)
    if numbers and len(numbers) == len(path):  # the parser already took them out
        numbered = tuple(f"{n} {h}" if n else h for n, h in zip(numbers, path, strict=True))
        return tuple(strip_section_number(h)[1] for h in path), numbered
    return tuple(strip_section_number(h)[1] for h in path), path


#: Texts -> token counts as the embedding model sees them (special tokens included).
TokenCounter = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True)
class Chunker:
    """Cuts one parsed document into chunks, within per-document bounds.

    ``count_tokens`` is the embedding model's token counter (the embedder's
    ``count_tokens``) and ``max_input_tokens`` its input limit, special
    tokens included; every chunk, embedded with its header, fits it.  Without
    one, sizes come from the default model's tokenizer, or where that is not
    installed from an upper bound (:func:`models.tokens.minilm_count`):
    chunks are then smaller than they need be, never truncated.  ``max_tokens`` is the
    target size of a chunk's text (``sources.chunk_tokens``), capped by what
    the limit leaves.

    ``max_chunks`` and ``max_document_tokens`` bound what one document may
    cost the embedder (and the memory its chunks take).  A document over
    either fails as ``too_large`` as early as it can be seen: its blocks'
    tokens are estimated before any unit is built (:func:`estimate_tokens`),
    and chunking stops at the first chunk over a limit (counted), so a 50 MB
    text file never becomes 46,000 chunks.
    """

    max_tokens: int = 200
    overlap_tokens: int = 24
    #: Chunks one document may produce.
    max_chunks: int = 10_000
    #: Tokens one document may send to the embedder.
    max_document_tokens: int = 2_000_000
    count_tokens: TokenCounter | None = None
    max_input_tokens: int = 256
    # Derived in __post_init__: the counter's special tokens, and a cached count without them.
    _specials: int = field(init=False, repr=False, compare=False)
    _count: Callable[[str], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counter = self.count_tokens or minilm_count
        specials = counter([""])[0]

        @functools.lru_cache(maxsize=65536)
        def count(text: str) -> int:
            return max(0, counter([text])[0] - specials)

        object.__setattr__(self, "_specials", specials)
        object.__setattr__(self, "_count", count)

    def room(self, heading_path: Sequence[str], title: str = "") -> int:
        """Tokens a chunk's text may hold under ``heading_path``: the target size, or what
        the model's limit leaves after [CLS]/[SEP] and the header, whichever is smaller."""
        header = embed_header(heading_path, title)
        left = self.max_input_tokens - self._specials - (self._count(header) if header else 0)
        return max(8, min(self.max_tokens, left))

    def chunk(self, document_id: str, parsed: ParsedDocument) -> list[ChunkDraft]:
        self._check_source_tokens(parsed.blocks)
        title = parsed.title
        if parsed.parser == "code":
            pieces: Iterable[Piece] = code_pieces(parsed.blocks, lambda path: self.room(path, title), self._count)
        else:
            pieces = self._document_pieces(parsed)
        return _identify(document_id, parsed, self._fitted(pieces, title), self)

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

    def _fitted(self, pieces: Iterable[Piece], title: str) -> Iterator[Piece]:
        """Every piece within its room: one still over it is cut again (never truncated by the model)."""
        for piece in pieces:
            text = piece.text.strip()
            if not text:
                continue
            room = self.room(piece.heading_path, title)
            if self._count(text) <= room:
                yield piece
                continue
            label = term_label(piece.meta, room, self._count) if piece.kind != BlockKind.TABLE else ""
            if label:  # each part names the entry it describes, and still fits with that name
                room -= self._count(label) + 1
            if piece.kind == BlockKind.TABLE:
                lines = text.split("\n")
                n_head = 3 if piece.meta.get("caption") else 2
                parts = split_lines("\n".join(lines[n_head:]), room, header=lines[:n_head], count=self._count)
            elif "\n" in text:
                parts = split_lines(text, room, count=self._count)
            else:
                parts = split_prose(text, room, 0, self._count)
            group = piece.group or hashlib.blake2b(normalize(text).encode(), digest_size=8).hexdigest()
            for part in parts:
                for fit in [part] if self._count(part) <= room else hard_split(part, room, self._count):
                    if label and not _names_term(fit, piece.meta):
                        fit = f"{label}\n{fit}"
                    yield Piece(fit, piece.kind, piece.heading_path, piece.page, dict(piece.meta), group=group)

    # -- documents ------------------------------------------------------------

    def _document_pieces(self, parsed: ParsedDocument) -> Iterator[Piece]:
        title = parsed.title
        rows = [b for b in parsed.blocks if b.kind == BlockKind.TABLE_ROW]
        if rows:
            yield from self._csv(rows, parsed)
        # A section whose own text is a line or two (a date and a one-sentence summary above its first
        # subsection) is held and shares a chunk with that subsection's first piece, under its own heading
        # path, the subsection's heading written in between: alone it is too small a chunk to be found, and
        # the subsection it introduces would lose what it says (which release, which product).
        lead: tuple[tuple[str, ...], tuple[str, ...], list[Block]] | None = None
        for raw_path, blocks in _sections(b for b in parsed.blocks if b.kind != BlockKind.TABLE_ROW):
            heading_path, numbered = _heading_paths(blocks, raw_path)
            pieces = self._section_pieces(heading_path, numbered, blocks, title)
            merged = None
            if lead is not None:
                held, lead = list(self._section_pieces(*lead, title)), None
                if len(held) == 1 and len(heading_path) > len(held[0].heading_path) \
                        and heading_path[: len(held[0].heading_path)] == held[0].heading_path:
                    first = next(pieces, None)
                    merged = self._with_lead(held[0], first, heading_path[-1], title) if first is not None else None
                    yield from [merged] if merged is not None else [*held, *([first] if first else [])]
                else:
                    yield from held
            if merged is None and self._short_lead(heading_path, blocks, title):
                lead = (heading_path, numbered, blocks)
                continue
            yield from pieces
        if lead is not None:
            yield from self._section_pieces(*lead, title)

    def _with_lead(self, lead: Piece, first: Piece, heading: str, title: str) -> Piece | None:
        """``lead`` then ``heading`` then ``first`` as one piece under the lead's path (None: over its room)."""
        if first.kind == BlockKind.TABLE or (lead.page and first.page and lead.page != first.page):
            return None  # a table keeps its header first; a lead on another page (a cover) stays on its own
        text = f"{lead.text.strip()}\n\n{heading}\n\n{first.text.strip()}"
        if self._count(text) > self.room(lead.heading_path, title):
            return None
        meta = {**first.meta, **lead.meta}  # the lead's provenance first: the chunk starts there
        if "numbered_heading_path" not in lead.meta:
            meta.pop("numbered_heading_path", None)
        kind = lead.kind if lead.kind == first.kind else MIXED_KIND
        return Piece(text, kind, lead.heading_path, lead.page or first.page, meta, group=first.group)

    def _short_lead(self, heading_path: tuple[str, ...], blocks: list[Block], title: str) -> bool:
        """Whether a section's text is prose of at most a quarter of a chunk (see :meth:`_document_pieces`)."""
        if any(b.kind == BlockKind.TABLE for b in blocks):
            return False
        texts = [b.text for b in blocks if b.kind != BlockKind.HEADING and b.text.strip()]
        if not texts:
            return False
        limit = self.room(heading_path, title) // 4
        # Block by block (each count is cached, the chunker needs it again), stopping once far over:
        # counting a long section whole only to learn it is long was a quarter of the chunker's time.
        # Joining adds at most a few tokens, so only a sum near the limit is settled by the exact count.
        total = 0
        for text in texts:
            total += self._count(text)
            if total > 2 * limit:
                return False
        return self._count("\n\n".join(texts)) <= limit

    def _section_pieces(self, heading_path: tuple[str, ...], numbered: tuple[str, ...], blocks: list[Block],
                        title: str) -> Iterator[Piece]:
        room = self.room(heading_path, title)
        for piece in self._section(heading_path, blocks, room):
            piece.meta.pop("heading_numbers", None)
            if numbered != heading_path:
                piece.meta["numbered_heading_path"] = list(numbered)
            yield piece

    def _section(self, heading_path: tuple[str, ...], blocks: list[Block], room: int) -> Iterator[Piece]:
        run: list[Block] = []
        for block in blocks:
            if block.kind == BlockKind.HEADING:
                continue
            if block.kind == BlockKind.TABLE and isinstance(block.meta, TableMeta):
                yield from self._prose(heading_path, run, room)
                run = []
                yield from self._table(heading_path, block, room)
                continue
            run.append(block)
        yield from self._prose(heading_path, run, room)

    def _csv(self, rows: list[Block], parsed: ParsedDocument) -> Iterator[Piece]:
        columns = parsed.meta.get("columns") or []
        cells = [r.meta.get("cells", [r.text]) for r in rows]
        path = rows[0].heading_path
        # The file's title is the heading path (the model sees it); no caption line.
        for piece in table_pieces(columns, cells, self.room(path, parsed.title), units=parsed.meta.get("units")):
            first, last = piece.meta["rows"]
            piece.meta["rows"] = [rows[first - 1].meta.get("row", first), rows[last - 1].meta.get("row", last)]
            yield Piece(piece.text, BlockKind.TABLE, path, None, piece.meta)

    def _table(self, heading_path: tuple[str, ...], block: Block, room: int) -> Iterator[Piece]:
        m = block.meta
        assert isinstance(m, TableMeta)
        # What a table chunk keeps of its block (rows, columns, units and caption are its own).
        kept = {"anchor_id": m.anchor_id, "ocr": m.ocr, "ocr_confidence": m.ocr_confidence,
                "low_confidence_tokens": m.low_confidence_tokens, "term": m.term, "term_name": m.term_name,
                "entry": m.entry}
        extra = {k: v for k, v in kept.items() if v is not None}
        caption = m.caption
        label = term_label(m, room, self._count)
        if label and not _names_term(caption or "", m):
            # A table inside an entry's description: its caption line names the entry.
            caption = f"{caption} \u2014 {label}" if caption else label
        for piece in table_pieces(m.columns, m.rows, room, caption=caption, units=m.units or None, extra=extra):
            if m.caption:
                piece.meta["caption"] = m.caption
            else:
                piece.meta.pop("caption", None)
            # A group of rows cites the pages its own rows are printed on, not every page of its table.
            first, last = piece.meta["rows"]
            pages = m.pages_of(first, last) or m.pages
            page = pages[0] if pages and m.row_pages else block.page
            if pages and len(pages) > 1:
                piece.meta["pages"] = pages
            yield Piece(piece.text, BlockKind.TABLE, heading_path, page, piece.meta)

    def _prose(self, heading_path: tuple[str, ...], blocks: list[Block], room: int) -> Iterator[Piece]:
        if not blocks:
            return
        count = self._count
        units = build_units(blocks, room, count)
        # The part of an entry that does not start with its term (the rest of a
        # description after a nested list) names it when its chunk does not:
        # room for that label is kept when packing.
        labels = [self._unit_label(u, room) for u in units]
        sizes = [count(u.text) + (count(lb) + 1 if lb else 0) for u, lb in zip(units, labels, strict=True)]
        groups = pack(sizes, [is_anchor(normalize(u.text)) for u in units], room, min_fill=room // 2)
        for group in groups:
            if len(group) == 1 and sizes[group[0]] > room:
                yield from self._split(heading_path, units[group[0]], room)
                continue
            parts = [b for i in group for b in units[i].parts]
            text = render(_labelled([units[i] for i in group], [labels[i] for i in group]))
            yield Piece(text, _kind(parts), heading_path, _first_page(parts), merged_meta(parts))

    def _unit_label(self, unit: Unit, room: int) -> str:
        """The label a unit of an entry needs ("" when it names its term already or is no entry's)."""
        meta = unit.parts[0].meta
        if entry_of(unit.parts[0]) is None or _names_term(unit.text, meta):
            return ""
        return term_label(meta, room, self._count)

    def _split(self, heading_path: tuple[str, ...], unit: Unit, room: int) -> Iterator[Piece]:
        kinds = {b.kind for b in unit.parts}
        entry = entry_of(unit.parts[0])
        full = " ".join(entry[1].split()) if entry else ""
        term = term_label(unit.parts[0].meta, room, self._count) if entry else ""
        budget = room - (self._count(term) + 1 if term else 0)
        text = unit.text
        stripped = bool(term) and term == full and text.startswith(term)
        if stripped:  # said once per part rather than twice in the first
            text = text[len(term) :].lstrip(" :\u2014-\n")
        if BlockKind.CODE in kinds or kinds == {BlockKind.LIST} or kinds == {BlockKind.TABLE}:
            texts = split_lines(text, budget, count=self._count)
        else:
            texts = split_prose(text, budget, self.overlap_tokens, self._count)
        meta = merged_meta(unit.parts)
        group = hashlib.blake2b(normalize(unit.text).encode(), digest_size=8).hexdigest()
        for part in texts:
            # A definition split in parts: every part says what it defines (a long
            # signature stays whole in the part that starts with it, its name elsewhere).
            body = f"{term}\n{part}" if term and (stripped or not _names_term(part, meta)) else part
            first, pages = _page_range(unit.parts, part)
            yield Piece(body, _kind(unit.parts), heading_path, first,
                        {**{k: v for k, v in meta.items() if k != "pages"}, **pages}, group=group)


def _labelled(units: list[Unit], labels: list[str]) -> list[Unit]:
    """``units`` with each needed label put before the unit's first text, unless
    an earlier unit of the same chunk already names that term."""
    out: list[Unit] = []
    for unit, label in zip(units, labels, strict=True):
        if label and not _names_term(render(out), unit.parts[0].meta):
            unit = Unit(list(unit.parts), [f"{label}: {unit.texts[0]}", *unit.texts[1:]])
        out.append(unit)
    return out


def _identify(document_id: str, parsed: ParsedDocument, pieces: Iterable[Piece], bounds: Chunker) -> list[ChunkDraft]:
    drafts: list[ChunkDraft] = []
    seen: dict[tuple[Any, ...], int] = {}
    groups: dict[str, list[int]] = {}
    tokens = 0
    count = bounds._count
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
        header = embed_header(path, parsed.title)
        # What the embedder sees: headers, repeated table headers and overlaps count too.
        tokens += count(text) + (count(header) if header else 0)
        if tokens > bounds.max_document_tokens:
            raise DocumentError(
                DocumentError.TOO_LARGE,
                f"its chunks hold more than {bounds.max_document_tokens} tokens (the per-document limit); "
                "split the document or raise sources.max_tokens_per_document",
            )
        chash = sha256_hex(CHUNKER_VERSION, header, normalize(text))
        occurrence = seen.get((path, piece.kind, chash), 0)
        seen[(path, piece.kind, chash)] = occurrence + 1
        structural = (parsed.parser_version, *path, piece.kind, str(occurrence))
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
                title=parsed.title,
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


def _page_range(blocks: list[Block], part: str) -> tuple[int | None, dict[str, Any]]:
    """The first page of ``part`` (a piece cut from ``blocks``) and its ``{"pages": [...]}`` when it spans several.

    A block that runs over a page break records where each page starts in
    its text (``page_breaks``); a part is placed by finding its first and
    last words in the blocks.  Without that record the block's pages stand.
    """
    paged = [(b, " ".join(b.text.split())) for b in blocks if b.page]
    found: list[int] = []
    flat = " ".join(part.split()) if paged else ""  # nothing to place on a page without pages (HTML)
    ends = (flat[:60], flat[-60:])
    for needle in ends if paged else ():
        for b, text in paged:
            at = text.find(needle)
            if at < 0:
                continue
            at += len(needle) - 1 if needle is ends[1] else 0
            page = b.page or 0  # never 0: only blocks with a page are searched
            for offset, pg in b.meta.get("page_breaks", ()):
                if offset <= at:
                    page = pg
            found.append(page)
            break
    if len(found) < 2:
        pages = merged_meta(blocks).get("pages")
        return _first_page(blocks), ({"pages": pages} if pages else {})
    first, last = min(found), max(found)
    return first, ({"pages": list(range(first, last + 1))} if last > first else {})


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
    anchor_id = piece.meta.get("anchor_id")
    if rows and piece.kind == BlockKind.TABLE and not anchor_id:  # an HTML table cites its own id; rows stay in meta
        return f"rows-{rows[0]}-{rows[1]}"
    base = str(anchor_id) if anchor_id else (slug(heading_path[-1]) if heading_path else "")
    if piece.page:
        return f"page={piece.page}" + (f"&{base}" if base else "")
    return base or "top"
