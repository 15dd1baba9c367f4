"""Qdrant through ``qdrant-client``: a server by URL, or the client's local mode.

Local mode (``QdrantClient(path=...)``) is pure Python and slow, but it speaks
the same API as the server (aliases included), so tests run the server code
path on it.  The client is passed in, so tests and callers choose it.

Server notes (from Qdrant's documentation and our measurements): one
``update_collection_aliases`` call is isolated from readers but not
all-or-nothing, so :meth:`swap_alias` reads the alias back and restores the
previous target on a mismatch.  Payload indexes on the filter fields matter
on a server and are a no-op in local mode.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from core.errors import NotFoundError, StoreError
from vectorstore.base import DENSE, Filter, PointRecord, ScoredHit

_BATCH = 256
#: Payload fields that filters use; indexed on servers.
INDEXED_FIELDS = {"acl": qm.PayloadSchemaType.KEYWORD, "document_id": qm.PayloadSchemaType.KEYWORD,
                  "source_id": qm.PayloadSchemaType.KEYWORD}


class QdrantStore:
    """A :class:`vectorstore.base.VectorStore` on ``qdrant-client``."""

    def __init__(self, client: QdrantClient, *, local: bool = False) -> None:
        """``local`` marks the client's local mode, which ignores payload
        indexes and search parameters (it always searches exactly)."""
        self.client = client
        self.local = local

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (UnexpectedResponse, ResponseHandlingException) as exc:
            if getattr(exc, "status_code", None) == 404:
                raise NotFoundError(f"{what}: not found") from exc
            raise StoreError(f"{what} failed: {exc}") from exc
        except ValueError as exc:  # local mode raises ValueError for missing collections
            if "not found" in str(exc).lower():
                raise NotFoundError(f"{what}: {exc}") from exc
            raise StoreError(f"{what} failed: {exc}") from exc

    # -- collections --------------------------------------------------------

    def create_collection(self, name: str, dim: int, *, clone_from: str | None = None) -> None:
        if self.client.collection_exists(name):
            raise StoreError(f"collection {name!r} already exists")
        self._call(
            f"create collection {name}",
            self.client.create_collection,
            collection_name=name,
            vectors_config={DENSE: qm.VectorParams(size=dim, distance=qm.Distance.COSINE)},
        )
        if not self.local:
            for field, schema in INDEXED_FIELDS.items():
                self._call(f"index {field}", self.client.create_payload_index, name, field, schema)
        if clone_from is not None:
            if not self.client.collection_exists(clone_from):
                self.drop_collection(name)
                raise NotFoundError(f"collection {clone_from!r} does not exist")
            offset: Any = None
            while True:
                records, offset = self._call(
                    f"scroll {clone_from}", self.client.scroll, clone_from, limit=_BATCH, offset=offset,
                    with_payload=True, with_vectors=[DENSE],
                )
                if records:
                    self._call(
                        f"upsert {name}",
                        self.client.upsert,
                        name,
                        points=[qm.PointStruct(id=r.id, vector=r.vector, payload=r.payload) for r in records],
                        wait=True,
                    )
                if offset is None:
                    break

    def drop_collection(self, name: str) -> None:
        if self.client.collection_exists(name):
            self._call(f"delete collection {name}", self.client.delete_collection, name)

    def list_collections(self) -> list[str]:
        return sorted(c.name for c in self._call("list collections", self.client.get_collections).collections)

    # -- points -------------------------------------------------------------

    def upsert(self, name: str, points: Sequence[PointRecord]) -> None:
        for i in range(0, len(points), _BATCH):
            batch = [
                qm.PointStruct(id=p.id, vector={DENSE: [float(x) for x in p.vector]}, payload=p.payload)
                for p in points[i : i + _BATCH]
                if p.vector is not None
            ]
            self._call(f"upsert {name}", self.client.upsert, name, points=batch, wait=True)

    def delete(self, name: str, ids: Sequence[str]) -> None:
        if ids:
            self._call(
                f"delete from {name}", self.client.delete, name,
                points_selector=qm.PointIdsList(points=list(ids)), wait=True,
            )

    def count(self, name: str) -> int:
        return int(self._call(f"count {name}", self.client.count, name, exact=True).count)

    def retrieve(self, name: str, ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        if not ids:
            return []
        records = self._call(
            f"retrieve from {name}", self.client.retrieve, name, ids=list(ids), with_payload=True,
            with_vectors=[DENSE] if with_vectors else False,
        )
        return [
            PointRecord(
                id=str(r.id),
                vector=(r.vector or {}).get(DENSE) if with_vectors and isinstance(r.vector, dict) else None,
                payload=dict(r.payload or {}),
            )
            for r in records
        ]

    def iter_ids(self, name: str, batch: int = 1000) -> Iterator[str]:
        offset: Any = None
        while True:
            records, offset = self._call(
                f"scroll {name}", self.client.scroll, name, limit=batch, offset=offset, with_payload=False,
                with_vectors=False,
            )
            for r in records:
                yield str(r.id)
            if offset is None:
                return

    def search(
        self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None = None, exact: bool = False
    ) -> list[ScoredHit]:
        response = self._call(
            f"query {name}",
            self.client.query_points,
            name,
            query=[float(x) for x in vector],
            using=DENSE,
            query_filter=_client_filter(flt),
            limit=limit,
            with_payload=True,
            search_params=qm.SearchParams(exact=True) if exact and not self.local else None,
        )
        return [ScoredHit(id=str(p.id), score=float(p.score), payload=dict(p.payload or {})) for p in response.points]

    def flush(self, name: str) -> None:
        """Writes use ``wait=True``; nothing is buffered client-side."""

    def release(self, name: str | None = None) -> None:
        """Handles are per client, not per collection: nothing to release."""

    def close(self) -> None:
        self.client.close()

    # -- aliases ------------------------------------------------------------

    def get_alias(self, alias: str) -> str | None:
        for a in self._call("list aliases", self.client.get_aliases).aliases:
            if a.alias_name == alias:
                return a.collection_name
        return None

    def swap_alias(self, alias: str, collection: str) -> str | None:
        if not self.client.collection_exists(collection):
            raise NotFoundError(f"collection {collection!r} does not exist")
        previous = self.get_alias(alias)
        self._set_alias(alias, collection, previous)
        if self.get_alias(alias) != collection:
            if previous is not None:
                self._set_alias(alias, previous, self.get_alias(alias))
            raise StoreError(f"alias {alias!r} did not take the new target {collection!r}; restored {previous!r}")
        return previous

    def _set_alias(self, alias: str, collection: str, current: str | None) -> None:
        ops: list[Any] = []
        if current is not None:
            ops.append(qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias)))
        ops.append(
            qm.CreateAliasOperation(create_alias=qm.CreateAlias(collection_name=collection, alias_name=alias))
        )
        self._call(f"swap alias {alias}", self.client.update_collection_aliases, change_aliases_operations=ops)


def _client_filter(flt: Filter | None) -> qm.Filter | None:
    if flt is None or (not flt.must and not flt.must_not):
        return None

    def cond(m: Any) -> qm.FieldCondition:
        return qm.FieldCondition(key=m.key, match=qm.MatchAny(any=list(m.any)))

    return qm.Filter(must=[cond(m) for m in flt.must] or None, must_not=[cond(m) for m in flt.must_not] or None)
