"""Plain data passed between the parts of the pipeline.

These are frozen dataclasses with no behaviour beyond small derived values:
each step of the pipeline is a function from one of these to another.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from freshindex.core.enums import BlockKind

if TYPE_CHECKING:  # only the Embedder protocol's annotation: registry readers need not load numpy
    import numpy as np


@dataclass(frozen=True)
class ObjectRef:
    """One object as a source lists it, before it is fetched.

    ``etag`` is whatever cheap change marker the source offers (S3's ETag, or
    ``mtime_ns-size`` for a folder).  Equal etags mean "unchanged" without a
    fetch; different etags only mean "fetch and compare the content hash".
    """

    key: str
    etag: str | None
    size: int
    modified: float | None = None
    #: The key this object had in the previous listing, when the source itself says it was
    #: renamed (git's rename detection); None when the source cannot tell.
    moved_from: str | None = None
    #: The object's media type when the source knows it (an HTTP ``Content-Type``, S3's ``ContentType``;
    #: parameters such as ``; charset=utf-8`` allowed): a key without an extension a parser reads is
    #: parsed by it (:func:`workers.parsing.registry.spec_for`).  None: chosen by the key alone.
    media_type: str | None = None


@dataclass(frozen=True)
class FetchedObject:
    ref: ObjectRef
    data: bytes


_DECLARED: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {}


def _declared(cls: type) -> tuple[tuple[str, ...], frozenset[str]]:
    """A metadata class's field names, in order and as a set: computed once per class
    (``dataclasses.fields`` on every ``get`` was a measurable share of a build)."""
    got = _DECLARED.get(cls)
    if got is None:
        names = tuple(f.name for f in fields(cls))
        got = _DECLARED[cls] = (names, frozenset(names))
    return got


class _Fields:
    """Typed metadata that still reads like the dict it replaced.

    Every key is a declared field, so a parser that writes an unknown key
    fails (``KeyError``/``TypeError``) instead of sending a typo to the chunker.
    A field that is ``None`` is unset: ``meta.get("term")`` is None, ``"term" in
    meta`` is False and :meth:`to_dict` leaves it out.  The mapping methods
    (``get``, ``[]``, ``in``, ``setdefault``, ``update``) are kept for readers
    written against the dict; new code reads the attributes.  (No ``items()``:
    ``items`` is a list's field; iterate :meth:`to_dict`.)
    """

    __slots__ = ()

    @classmethod
    def keys_declared(cls) -> frozenset[str]:
        return _declared(cls)[1]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Any:
        unknown = set(values) - cls.keys_declared()
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, in declaration order (the JSON a registry row or a payload stores)."""
        return {k: v for k in _declared(type(self))[0] if (v := getattr(self, k)) is not None}

    def keys_declared_ordered(self) -> list[str]:
        return list(_declared(type(self))[0])

    def _check(self, key: str) -> None:
        if key not in self.keys_declared():
            raise KeyError(f"{type(self).__name__} has no field {key!r}")

    def get(self, key: str, default: Any = None) -> Any:
        value = getattr(self, key, None) if key in self.keys_declared() else None
        return default if value is None else value

    def __getitem__(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self._check(key)
        setattr(self, key, value)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def setdefault(self, key: str, default: Any) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, values: Mapping[str, Any]) -> None:
        for k, v in values.items():
            self[k] = v

    def __bool__(self) -> bool:
        return bool(self.to_dict())


@dataclass(slots=True, eq=True)
class BlockMeta(_Fields):
    """What a parser says about a block beyond its kind, text, heading path and page.

    Read by the chunker: provenance a chunk keeps (``anchor_id``, ``language``,
    ``pages``, the OCR fields, a definition-list entry's ``term``), structure
    it cuts by (``items``, ``page_breaks``, code ``lines`` and ``members``).
    """

    level: int | None = None  #: a heading's level (0 for a document's Title style)
    links: list[dict[str, str]] | None = None  #: ``{"text", "href"}`` of the links in the text
    items: list[str] | None = None  #: a list's top-level items
    language: str | None = None  #: a code block's language
    admonition: str | None = None  #: note, warning, quote, notes (speaker notes)...
    anchor_id: str | None = None  #: the id of the page element a citation may link to
    #: A definition-list entry: its ordinal in the document, its term, the name a reader searches for.
    entry: int | None = None
    term: str | None = None
    term_name: str | None = None
    #: The section numbers the parser took out of the heading path ("20.4.", "20.4.1.").
    heading_numbers: tuple[str, ...] | None = None
    # Code (workers/parsing/code.py): the symbol a block defines.
    path: str | None = None
    symbol: str | None = None
    symbol_kind: str | None = None
    signature: str | None = None
    docstring: str | None = None
    members: list[dict[str, Any]] | None = None
    lines: list[int] | None = None  #: first and last line
    source_version: str | None = None
    # Pages (PDF): every page a block runs over, and where each page starts in its text.
    pages: list[int] | None = None
    page_breaks: list[tuple[int, int]] | None = None  #: (offset in the text, page)
    # OCR: the page's confidence, the block's own, the tokens tesseract was unsure of.
    ocr: bool | None = None
    ocr_confidence: float | None = None
    ocr_block_confidence: float | None = None
    low_confidence_tokens: list[dict[str, Any]] | None = None
    # One row of a CSV/TSV file (a ``table_row`` block): its number and cells.
    row: int | None = None
    cells: list[str] | None = None


@dataclass(slots=True, eq=True)
class TableMeta(BlockMeta):
    """A table block's structure (see :mod:`workers.parsing.table`): the chunker cuts it into groups
    of rows that each repeat the caption, the column names and the units.

    ``row_pages`` (one page per body row, when the table runs over a page break) places a group of
    rows on its own pages, so its chunk cites those and not every page of the table."""

    columns: list[str] = field(default_factory=list)
    header_rows: list[list[str]] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)
    caption: str | None = None
    headerless: bool | None = None
    row_pages: list[int] | None = None

    def pages_of(self, first: int, last: int) -> list[int] | None:
        """The pages body rows ``first``..``last`` (1-based, inclusive) are printed on; None when unknown."""
        if not self.row_pages or len(self.row_pages) != len(self.rows):
            return None
        return sorted(set(self.row_pages[first - 1 : last]))


_TABLE_KEYS = frozenset({"columns", "header_rows", "rows", "units", "caption", "headerless", "row_pages"})


def block_meta(values: BlockMeta | Mapping[str, Any] | None) -> BlockMeta:
    """``values`` as typed metadata: a :class:`TableMeta` when it holds a table's structure."""
    if isinstance(values, BlockMeta):
        return values
    values = dict(values or {})
    return (TableMeta if _TABLE_KEYS & set(values) else BlockMeta).from_dict(values)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Block:
    """A node of a parsed document, flattened in reading order.

    ``kind`` is a :class:`core.enums.BlockKind` (heading, paragraph, list,
    table, table_row, code, admonition); the chunker depends on it.
    ``heading_path`` is the chain of headings above the block, outermost first.
    ``meta`` is a :class:`BlockMeta` (a :class:`TableMeta` for a table); a dict
    given here is converted, and an unknown key in it is a ``TypeError``.
    """

    kind: BlockKind
    text: str
    heading_path: tuple[str, ...] = ()
    page: int | None = None
    meta: BlockMeta = field(default_factory=BlockMeta)

    def __post_init__(self) -> None:
        if not isinstance(self.meta, BlockMeta):
            object.__setattr__(self, "meta", block_meta(self.meta))


@dataclass(frozen=True)
class ParsedDocument:
    title: str
    blocks: tuple[Block, ...]
    parser: str
    parser_version: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkDraft:
    """A chunk as the chunker produced it, before it has a vector.

    ``content_hash`` covers exactly what the model sees (:func:`embed_text`:
    the document title, the heading path without section numbers, the
    normalized text) and the chunker version; it keys the vector cache.
    Neither covers the file's path or key, so a moved file reuses its
    vectors.  ``title`` is the document's title as parsed (the registry keeps
    it as ``documents.title``); ``heading_path`` holds no section numbers
    (``meta["numbered_heading_path"]`` has them, for citations).
    ``id`` is the stable point id (see :func:`core.ids.chunk_point_id`).
    """

    id: str
    ordinal: int
    text: str
    content_hash: str
    kind: str
    heading_path: tuple[str, ...]
    anchor: str
    page: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    title: str = ""

    @property
    def embed_text(self) -> str:
        return embed_text(self.heading_path, self.text, title=self.title)


_FILE_NAME = re.compile(r"[^\s]*[/\\][^\s]*|[^\s/\\]+\.[A-Za-z][A-Za-z0-9]{0,7}")


#: The longest context line a chunk is embedded with, in characters.  A WordPiece token covers at least one
#: character, so the line costs at most this many tokens and leaves a 256-token model room for the text
#: (real manuals' lines stay under 200: CPython 3.11's longest is 191 characters, R's 162).
MAX_HEADER_CHARS = 240


def embed_context(heading_path: Sequence[str], title: str | None = "") -> tuple[str, ...]:
    """The context a chunk is embedded with: its document's title, then its heading path.

    A title that is a file name or a path (what parsers fall back to when a
    document names no title, and the key of a code file) is left out, and so
    is a title the heading path already starts with, so that moving or
    renaming a file changes nothing the model sees.  A context longer than
    :data:`MAX_HEADER_CHARS` (written as one line) loses its outermost parts
    first, the title before the headings, and its innermost heading is cut
    to that length: a forged or generated heading cannot crowd the text out."""
    parts = tuple(p for p in heading_path if p)
    title = (title or "").strip()
    if title and not _FILE_NAME.fullmatch(title) and not (parts and parts[0].strip().casefold() == title.casefold()):
        parts = (title, *parts)
    while len(parts) > 1 and len(" > ".join(parts)) > MAX_HEADER_CHARS:
        parts = parts[1:]
    if parts and len(parts[0]) > MAX_HEADER_CHARS:
        parts = (parts[0][:MAX_HEADER_CHARS],)
    return parts


def embed_header(heading_path: Sequence[str], title: str | None = "") -> str:
    """The line :func:`embed_text` puts above a chunk's text ("" when it has no context)."""
    return " > ".join(embed_context(heading_path, title))


def embed_text(heading_path: Sequence[str], text: str, *, title: str | None = "") -> str:
    """What the model sees: title and heading path (no section numbers, no
    file path) give a fragment its topic, then the fragment.

    The one rule for both the pipeline (from a :class:`ChunkDraft`) and the
    snapshot builder (from a registry row: ``heading_path``, ``text`` and the
    document's ``title``), so a vector is always computed from the same text
    its content hash stands for."""
    header = embed_header(heading_path, title)
    return f"{header}\n{text}" if header else text


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model.

    ``model_id`` names the model *and* its numeric variant (quantization,
    export): it is part of every vector's cache key, so two models never share
    cached vectors.  Vectors are L2-normalised float32 rows.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def may_kill_the_process(embedder: object) -> bool:
    """Whether ``embedder.embed`` runs native model code in this process (ONNX, torch), which a bad input or
    the memory it takes could kill; False for one that declares ``cannot_kill_process`` (the hashing
    stand-in: numpy only; a remote model: an HTTP request).  Attempts are closed before such work
    (``workers.batch.RunBatch.settle``), so a death in it is not charged to documents that did not cause it."""
    return not getattr(embedder, "cannot_kill_process", False)


@runtime_checkable
class Releasable(Protocol):
    """An embedder that can let go of its loaded model and load it again on the next call.

    The snapshot builder calls :meth:`release` before it writes and optimises
    a collection: that work needs no model, so a process doing both is sized
    by the larger of the two rather than their sum.  ``release`` must be safe
    while another thread embeds (that call keeps what it already holds)."""

    def release(self) -> None: ...
