"""Plain data passed between the parts of the pipeline.

These are frozen dataclasses with no behaviour beyond small derived values:
each step of the pipeline is a function from one of these to another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from freshindex.core.enums import BlockKind


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

    ``content_hash`` covers the normalized text plus its context (heading
    path, table header) and the chunker version; it keys the vector cache.
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

    @property
    def embed_text(self) -> str:
        return embed_text(self.heading_path, self.text)


def embed_text(heading_path: Sequence[str], text: str) -> str:
    """What the model sees: the heading path gives a fragment its topic."""
    if heading_path:
        return " > ".join(heading_path) + "\n" + text
    return text


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
