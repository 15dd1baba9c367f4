"""Plain data passed between the parts of the pipeline.

These are frozen dataclasses with no behaviour beyond small derived values:
each step of the pipeline is a function from one of these to another.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class FetchedObject:
    ref: ObjectRef
    data: bytes


@dataclass(frozen=True)
class Block:
    """A node of a parsed document, flattened in reading order.

    ``kind`` is a :class:`core.enums.BlockKind` (heading, paragraph, list,
    table, table_row, code, admonition); the chunker depends on it.
    ``heading_path`` is the chain of headings above the block, outermost first.
    """

    kind: BlockKind
    text: str
    heading_path: tuple[str, ...] = ()
    page: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)


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


def embed_context(heading_path: Sequence[str], title: str | None = "") -> tuple[str, ...]:
    """The context a chunk is embedded with: its document's title, then its heading path.

    A title that is a file name or a path (what parsers fall back to when a
    document names no title, and the key of a code file) is left out, and so
    is a title the heading path already starts with, so that moving or
    renaming a file changes nothing the model sees."""
    parts = tuple(p for p in heading_path if p)
    title = (title or "").strip()
    if title and not _FILE_NAME.fullmatch(title) and not (parts and parts[0].strip().casefold() == title.casefold()):
        return (title, *parts)
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
