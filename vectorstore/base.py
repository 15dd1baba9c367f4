"""The narrow interface every vector store implements.

A *collection* is one immutable-after-build version of a knowledge base; an
*alias* names the version that serves.  Implementations: Qdrant Edge in
process (:mod:`vectorstore.edge`) and Qdrant through ``qdrant-client``
(:mod:`vectorstore.qdrant`, for a server or the client's local mode).  All of
them pass the one contract suite in ``tests/vectorstore``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

#: Name of the dense vector in every collection.
DENSE = "dense"


@dataclass(frozen=True)
class PointRecord:
    id: str
    vector: Sequence[float] | None
    payload: dict[str, Any]


@dataclass(frozen=True)
class ScoredHit:
    id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class FieldMatch:
    """``key`` equals one of ``any`` (for a list payload: shares one value)."""

    key: str
    any: tuple[Any, ...]


@dataclass(frozen=True)
class Filter:
    """All of ``must`` and none of ``must_not``: the only filter shape we need.

    ACL and validity filters are built from this and run *inside* the vector
    query, never after it.
    """

    must: tuple[FieldMatch, ...] = field(default_factory=tuple)
    must_not: tuple[FieldMatch, ...] = field(default_factory=tuple)

    def matches(self, payload: dict[str, Any]) -> bool:
        """Reference semantics, used by tests to check the backends."""

        def hit(cond: FieldMatch) -> bool:
            value = payload.get(cond.key)
            values = value if isinstance(value, list) else [value]
            return any(v in cond.any for v in values)

        return all(hit(c) for c in self.must) and not any(hit(c) for c in self.must_not)


class VectorStore(Protocol):
    """What freshindex needs from a vector database, and nothing more."""

    def create_collection(self, name: str, dim: int, *, clone_from: str | None = None) -> None:
        """Create ``name``; with ``clone_from``, start as a copy of that collection."""

    def drop_collection(self, name: str) -> None:
        """Delete ``name`` and its data; dropping a missing collection is a no-op."""

    def list_collections(self) -> list[str]: ...

    def upsert(self, name: str, points: Sequence[PointRecord]) -> None: ...

    def delete(self, name: str, ids: Sequence[str]) -> None: ...

    def count(self, name: str) -> int: ...

    def retrieve(self, name: str, ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]: ...

    def iter_ids(self, name: str, batch: int = 1000) -> Iterator[str]: ...

    def search(
        self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None = None, exact: bool = False
    ) -> list[ScoredHit]: ...

    def get_alias(self, alias: str) -> str | None:
        """The collection ``alias`` points at, or None."""

    def swap_alias(self, alias: str, collection: str) -> str | None:
        """Point ``alias`` at ``collection`` atomically; returns the previous target.

        Readers see the old target or the new one, never neither.  After the
        swap the implementation reads the alias back and raises
        :class:`core.errors.StoreError` (restoring the old target) if it does
        not match.
        """

    def flush(self, name: str) -> None:
        """Make everything written to ``name`` durable."""

    def export_collection(self, name: str, dest: Path) -> None:
        """Write ``name`` to one file (an archive the matching import reads back)."""

    def import_collection(self, name: str, source: Path | str) -> None:
        """Create ``name`` from an export: a local file, or (server) a URL it can fetch."""

    def release(self, name: str | None = None) -> None:
        """Close open handles (file handles and mapped memory of embedded collections)."""

    def close(self) -> None: ...
