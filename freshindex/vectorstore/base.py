"""The narrow interface every vector store implements.

A *collection* is one immutable-after-build version of a knowledge base; an
*alias* names the version that serves.  Implementations: Qdrant Edge in
process (:mod:`vectorstore.edge`) and Qdrant through ``qdrant-client``
(:mod:`vectorstore.qdrant`, for a server or the client's local mode).  All of
them pass the one contract suite in ``tests/vectorstore``.

Abilities only some stores have are declared here too, as small
runtime-checkable protocols (:class:`LexicalStats`, :class:`Renames`,
:class:`ReaderTracking`): a caller asks ``isinstance(store, Renames)``
instead of probing for an attribute, so the type checker follows the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from freshindex.core.clock import as_utc
from freshindex.vectorstore.lexical import SparseVector

#: Name of the dense vector in every collection.
DENSE = "dense"
#: Name of the sparse lexical (BM25, IDF applied by the engine) vector in every collection.
LEXICAL = "lexical"

#: Payload fields that queries filter on, and the index each gets on every engine
#: (``keyword``, ``integer``, ``datetime``; ``tenant`` is a keyword index marked
#: as the tenant field).  A field missing from a point is simply not indexed for it.
INDEXED_FIELDS: dict[str, str] = {
    "acl": "keyword", "kb": "keyword", "tenant": "tenant", "document_id": "keyword", "source_id": "keyword",
    "chunk_id": "keyword", "acl_version": "integer", "doc_version": "integer",
    "valid_from": "datetime", "valid_until": "datetime",
}

#: How deep each side of a hybrid query reaches before fusion (at least the limit).
HYBRID_PREFETCH = 50
#: RRF's constant: the fused score of a hit is the sum of 1 / (RRF_K + rank) over the sides.
RRF_K = 60


@dataclass(frozen=True)
class PointRecord:
    """A point to write or one read back.

    ``lexical`` is the text the lexical side indexes (see
    :func:`vectorstore.lexical.lexical_text`); None writes no lexical vector
    and is what reads return.  ``sparse``: that text's
    :func:`vectorstore.lexical.document_vector` when the writer computed it
    already (a build computes them in a worker process); None: the store
    computes it from ``lexical``.
    """

    id: str
    vector: Sequence[float] | None
    payload: dict[str, Any]
    lexical: str | None = None
    sparse: SparseVector | None = None


@dataclass(frozen=True)
class ScoredHit:
    """One search result.

    ``score`` is always the dense (cosine) similarity to the query vector, so
    a relevance threshold means the same with and without ``text``.  A
    hybrid search (``text`` given) orders hits by ``fused`` (RRF of the dense
    and the lexical ranking, engine-specific scale: compare ranks, not
    values, across engines) and sets ``lexical`` (the BM25 score, IDF
    included) and ``lexical_rank`` (1-based) for hits the lexical side ranked
    within its prefetch depth; both are None for the rest.
    """

    id: str
    score: float
    payload: dict[str, Any]
    fused: float | None = None
    lexical: float | None = None
    lexical_rank: int | None = None


@dataclass(frozen=True)
class FieldMatch:
    """``key`` equals one of ``any`` (for a list payload: shares one value)."""

    key: str
    any: tuple[Any, ...]


@dataclass(frozen=True)
class FieldRange:
    """``key`` lies within the bounds given (numbers, or datetimes / ISO 8601 strings).

    A point without the field does not match, so a validity window is
    ``must_not=(FieldRange("valid_until", lte=now), FieldRange("valid_from", gt=now))``:
    points without the fields stay in.
    """

    key: str
    gt: float | str | datetime | None = None
    gte: float | str | datetime | None = None
    lt: float | str | datetime | None = None
    lte: float | str | datetime | None = None

    @property
    def is_datetime(self) -> bool:
        return any(isinstance(b, str | datetime) for b in (self.gt, self.gte, self.lt, self.lte))

    def bounds(self) -> dict[str, Any]:
        """The bounds that are set, datetimes as ISO 8601 strings (what the engines take)."""
        out = {}
        for name in ("gt", "gte", "lt", "lte"):
            b = getattr(self, name)
            if b is not None:
                out[name] = b.isoformat() if isinstance(b, datetime) else b
        return out


#: One condition of a :class:`Filter`.
Condition = FieldMatch | FieldRange


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        d = value
    elif isinstance(value, str):
        try:
            d = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return as_utc(d)  # naive means UTC, as in Qdrant


def _in_range(cond: FieldRange, value: Any) -> bool:
    v: datetime | float | None
    conv: Callable[[Any], datetime | float | None]
    if cond.is_datetime:
        v = _as_datetime(value)
        conv = _as_datetime
    else:
        v = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        conv = float
    if v is None:
        return False
    for name, ok in (("gt", lambda a, b: a > b), ("gte", lambda a, b: a >= b),
                     ("lt", lambda a, b: a < b), ("lte", lambda a, b: a <= b)):
        b = getattr(cond, name)
        if b is not None and not ok(v, conv(b)):
            return False
    return True


@dataclass(frozen=True)
class Filter:
    """All of ``must`` and none of ``must_not``: the only filter shape we need.

    ACL, tenant, validity and tombstone filters are built from this and run
    *inside* the vector query (inside both sides of a hybrid one), never
    after it.
    """

    must: tuple[Condition, ...] = field(default_factory=tuple)
    must_not: tuple[Condition, ...] = field(default_factory=tuple)

    def matches(self, payload: dict[str, Any]) -> bool:
        """Reference semantics, used by tests to check the backends."""

        def hit(cond: Condition) -> bool:
            value = payload.get(cond.key)
            values = value if isinstance(value, list) else [value]
            if isinstance(cond, FieldRange):
                return any(_in_range(cond, v) for v in values)
            return any(v in cond.any for v in values)

        return all(hit(c) for c in self.must) and not any(hit(c) for c in self.must_not)


def fuse_hits(vector: Sequence[float], hits: Sequence[Any], lexical_hits: Sequence[tuple[str, float]],
              *, dense_of: Any) -> list[ScoredHit]:
    """Fused hits annotated with their dense score (cosine from the returned, normalised
    vector) and, where the lexical side ranked them, its score and 1-based rank."""
    import numpy as np  # the store adapters have it; the interface module needs it only here

    q = np.asarray(vector, dtype=np.float32)
    q = q / (float(np.linalg.norm(q)) or 1.0)
    ranks = {pid: (n, score) for n, (pid, score) in enumerate(lexical_hits, start=1)}
    out = []
    for h in hits:
        pid = str(h.id)
        stored = dense_of(h.vector)
        dense = float(np.dot(q, np.asarray(stored, dtype=np.float32))) if stored else 0.0
        rank = ranks.get(pid)
        out.append(ScoredHit(id=pid, score=dense, payload=dict(h.payload or {}), fused=float(h.score),
                             lexical=rank[1] if rank else None, lexical_rank=rank[0] if rank else None))
    return out


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

    def vector_size(self, name: str) -> int:
        """The dense vector size ``name`` was created with (the builder checks it against the model's)."""

    def retrieve(self, name: str, ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]: ...

    def iter_ids(self, name: str, batch: int = 1000) -> Iterator[str]: ...

    def search(
        self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None = None, exact: bool = False,
        text: str | None = None,
    ) -> list[ScoredHit]:
        """The ``limit`` best points passing ``flt``.

        Without ``text`` (or when it has no lexical token), a dense search.
        With it, one hybrid query: the dense side and the lexical side each
        take their best :data:`HYBRID_PREFETCH` (at least ``limit``) under
        ``flt``, fused by RRF; a point the filter excludes is never a
        candidate on either side.  A collection written before it had a
        lexical vector is searched dense only.  ``exact`` searches the dense
        side without its index.
        """

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

    def optimize(self, name: str) -> bool:
        """Build ``name``'s search structures after its bulk writes; call it before verifying and swapping.

        Blocking.  Embedded (Edge): freezes and quantises the written
        segments and builds the sparse index, so queries on the new version
        are 5-10x faster than on the raw segments.  Server: waits until the
        server's own optimizer has finished (status green).  Local mode: a
        no-op.  Returns whether anything was changed or waited for.
        """

    def export_collection(self, name: str, dest: Path) -> None:
        """Write ``name`` to one file (an archive the matching import reads back)."""

    def import_collection(self, name: str, source: Path | str) -> None:
        """Create ``name`` from an export: a local file, or (server) a URL it can fetch."""

    def release(self, name: str | None = None) -> None:
        """Close open handles (file handles and mapped memory of embedded collections)."""

    def close(self) -> None: ...


# -- optional abilities ----------------------------------------------------------
# ``isinstance`` checks only that the method is there (and not set to None, as
# ``QdrantStore.rename_collection`` is without ``renames``), not its signature:
# the type checker does that where a store is passed.


@runtime_checkable
class LexicalStats(Protocol):
    """A store that reports its engine's IDF per token: both Qdrant adapters.

    The refusal weighs a question's terms by it and calibration picks
    distinctive words with it; without it every term weighs the same.
    """

    def lexical_idf(self, name: str, tokens: Sequence[str], *, flt: Filter | None = None) -> dict[str, float]:
        """IDF per token of ``tokens`` present in ``name`` under ``flt``; absent tokens are left out."""
        ...


@runtime_checkable
class Renames(Protocol):
    """A store that renames a collection in place: Edge, and the server with ``renames``.

    The blue/green builder recycles a retired side only through it; a store
    without it builds every version by copy.
    """

    def rename_collection(self, name: str, new_name: str) -> None:
        """Give ``name`` the name ``new_name``; raises :class:`core.errors.StoreBusyError` while a reader holds it."""
        ...


@runtime_checkable
class ReaderTracking(Protocol):
    """A store that knows whether any process holds a collection open: Edge (its flocks)."""

    def in_use(self, name: str) -> bool:
        """Whether a handle in any process has ``name`` open."""
        ...
