"""Qdrant through ``qdrant-client``: a server by URL, or the client's local mode.

Local mode (``QdrantClient(path=...)``) is pure Python and slow, but it speaks
the same API as the server (aliases included), so tests run the server code
path on it.  The client is passed in, so tests and callers choose it.

Server notes (from Qdrant's documentation and our measurements): one
``update_collection_aliases`` call is isolated from readers but not
all-or-nothing, so :meth:`swap_alias` reads the alias back and restores the
previous target on a mismatch.  Payload indexes on the filter fields
(:data:`vectorstore.base.INDEXED_FIELDS`, ``tenant`` with ``is_tenant``)
matter on a server and are a no-op in local mode.  Hybrid search needs a
server with ``RrfQuery`` (Qdrant 1.16 or later); the lexical vector is
computed here (:mod:`vectorstore.lexical`), the server applies the IDF.

Renames (``renames=True``, ``vector_store.server_renames``): Qdrant cannot
rename a collection, so every version name (``fi_kb-v5``) is an alias over a
physical collection with a neutral name (``fi_kb--p<12 hex>``), and
:meth:`rename_collection` is one ``update_collection_aliases`` call (delete
the old version alias, create the new one on the same physical collection):
the blue/green builder recycles the standby without copying it.  Qdrant
refuses an alias of an alias, so the knowledge base's alias points at the
physical collection directly; :meth:`get_alias` and :meth:`swap_alias` speak
version names and translate.  Version aliases are told from knowledge-base
aliases by :class:`core.naming.Naming` (``<prefix><kb>-v<digits>``).  Point
operations go to the version name (the server resolves aliases);
collection-level ones (describe, optimise, snapshot, drop) resolve it here.
A collection created before the setting was turned on keeps its own name
until it is first renamed (then only its version alias names it).  No
knowledge base name ends in ``-v<digits>`` (:func:`core.ids.validate_kb_name`
refuses it), so a knowledge base's alias never reads as a version name.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from freshindex.core.errors import NotFoundError, StoreError
from freshindex.core.naming import Naming
from freshindex.vectorstore import lexical, qdrant_archive, qdrant_query
from freshindex.vectorstore.base import DENSE, INDEXED_FIELDS, LEXICAL, Filter, PointRecord, ScoredHit, fuse_hits
from freshindex.vectorstore.qdrant_layout import CollectionLayout, collection_params, index_schema, search_params

_BATCH = 256
#: The tail of a physical collection's neutral name when versions are aliases (``renames``).
_PHYSICAL_TAIL = re.compile(r"--p[0-9a-f]{12}$")


class QdrantStore:
    """A :class:`vectorstore.base.VectorStore` on ``qdrant-client``."""

    #: Set (to :meth:`_rename`) only with ``renames``: the builder recycles a side only when it is callable.
    rename_collection: Callable[[str, str], None] | None = None

    def __init__(self, client: QdrantClient, *, local: bool = False, layout: CollectionLayout | None = None,
                 renames: bool = False, naming: Naming | None = None) -> None:
        """``local`` marks the client's local mode, which ignores payload
        indexes and search parameters (it always searches exactly) and the
        cluster ``layout`` (shards, replicas, quantization).  ``renames``
        makes every version name an alias over a neutral physical collection
        (see the module docstring); ``naming`` tells version names apart."""
        self.client = client
        self.local = local
        self.layout = layout or CollectionLayout()
        self.renames = renames
        self.naming = naming or Naming()
        self._has_lexical: dict[str, bool] = {}
        if renames:
            self.rename_collection = self._rename

    # -- version names over physical collections (renames) ---------------------

    def _is_version(self, name: str) -> bool:
        return self.naming.kb_of_collection(name) is not None and name.rsplit("-v", 1)[1].isdigit()

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self._call("list aliases", self.client.get_aliases).aliases}

    def _physicals(self) -> set[str]:
        return {c.name for c in self._call("list collections", self.client.get_collections).collections}

    def _versions_of(self, physical: str, aliases: dict[str, str]) -> list[str]:
        """The version names over ``physical``, oldest first (normally one)."""
        names = [a for a, t in aliases.items() if t == physical and self._is_version(a)]
        return sorted(names, key=lambda a: int(a.rsplit("-v", 1)[1]))

    def _resolve(self, name: str, aliases: dict[str, str] | None = None,
                 physicals: set[str] | None = None) -> str | None:
        """The physical collection behind ``name``, or None when no collection goes by that name.

        A physical collection that version aliases point at goes only by them
        (a collection created before ``renames`` and renamed since)."""
        aliases = self._aliases() if aliases is None else aliases
        physicals = self._physicals() if physicals is None else physicals
        if name in aliases:
            return aliases[name] if aliases[name] in physicals else None
        if name in physicals and not self._versions_of(name, aliases):
            return name
        return None

    def _physical(self, name: str) -> str:
        """The name to give collection-level calls: the physical collection (renames) or ``name``."""
        if not self.renames:
            return name
        physical = self._resolve(name)
        if physical is None:
            raise NotFoundError(f"collection {name!r} does not exist")
        return physical

    def _new_physical(self, name: str, aliases: dict[str, str], physicals: set[str]) -> str:
        """A fresh neutral name for the physical collection of ``name``; first drops the
        physical collections of the same knowledge base that no alias names (left by a
        process that died between creating one and naming it: callers hold the build lock)."""
        kb = self.naming.kb_of_collection(name) if self._is_version(name) else None
        stem = self.naming.alias(kb) if kb is not None else name
        named = set(aliases.values())
        for p in sorted(physicals):
            if p.startswith(f"{stem}--p") and _PHYSICAL_TAIL.search(p) and p not in named:
                self._call(f"delete orphan collection {p}", self.client.delete_collection, p)
        return f"{stem}--p{uuid.uuid4().hex[:12]}"

    def _name(self, alias: str, physical: str) -> None:
        op = qm.CreateAliasOperation(create_alias=qm.CreateAlias(collection_name=physical, alias_name=alias))
        self._call(f"name {physical} {alias}", self.client.update_collection_aliases, change_aliases_operations=[op])

    def _taken(self, name: str, aliases: dict[str, str], physicals: set[str]) -> bool:
        return name in physicals or (name in aliases and aliases[name] in physicals)

    def _rename(self, name: str, new_name: str) -> None:
        """Give the version ``name`` the name ``new_name``: one alias update, nothing copied.

        Readers that resolved the knowledge base's alias to ``name`` before
        get NotFoundError and resolve it again.  The update is read back; a
        half-applied one is undone (the old name restored) and raises
        StoreError, so the builder finds its side untouched."""
        aliases, physicals = self._aliases(), self._physicals()
        if self._taken(new_name, aliases, physicals):
            raise StoreError(f"collection {new_name!r} already exists")
        physical = self._resolve(name, aliases, physicals)
        if physical is None:
            raise NotFoundError(f"collection {name!r} does not exist")
        ops: list[Any] = []
        if name in aliases:
            ops.append(qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=name)))
        ops.append(qm.CreateAliasOperation(create_alias=qm.CreateAlias(collection_name=physical, alias_name=new_name)))
        self._call(f"rename {name} to {new_name}", self.client.update_collection_aliases,
                   change_aliases_operations=ops)
        self._has_lexical.pop(name, None)
        self._has_lexical.pop(new_name, None)
        after = self._aliases()
        if after.get(new_name) != physical or (name in aliases and name in after):
            if name in aliases and name not in after:
                self._name(name, physical)
            if after.get(new_name) == physical and name in after:
                self._call(f"undo rename to {new_name}", self.client.update_collection_aliases,
                           change_aliases_operations=[qm.DeleteAliasOperation(
                               delete_alias=qm.DeleteAlias(alias_name=new_name))])
            raise StoreError(f"renaming {name!r} to {new_name!r} did not take; {name!r} kept")

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
        if self.renames and self._is_version(name):
            self._create_named(name, dim, clone_from)
            return
        if self.renames and clone_from is not None:
            clone_from = self._physical(clone_from)
        if self.client.collection_exists(name):
            raise StoreError(f"collection {name!r} already exists")
        params = collection_params(self.layout, dim)
        if self.local:  # local mode has no shards, replicas, disk or quantization settings: vectors only
            params = {k: params[k] for k in ("vectors_config", "sparse_vectors_config")}
        self._call(f"create collection {name}", self.client.create_collection, collection_name=name, **params)
        self._has_lexical.pop(name, None)
        if not self.local:
            for field, kind in INDEXED_FIELDS.items():
                self._call(f"index {field}", self.client.create_payload_index, name, field, index_schema(kind))
        if clone_from is not None:
            if not self.client.collection_exists(clone_from):
                self.drop_collection(name)
                raise NotFoundError(f"collection {clone_from!r} does not exist")
            if not self.local:
                self._clone_on_server(name, clone_from)
                return
            self._copy_points(name, clone_from)

    def _copy_points(self, name: str, source: str) -> None:
        """Client-side copy (local mode): every point of ``source`` into ``name``."""
        offset: Any = None
        while True:
            records, offset = self._call(
                f"scroll {source}", self.client.scroll, source, limit=_BATCH, offset=offset,
                with_payload=True, with_vectors=True,
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

    def _create_named(self, name: str, dim: int, clone_from: str | None) -> None:
        """``create_collection`` with renames: a neutral physical collection, then the version alias.

        The alias is created right after the physical collection (before its
        indexes and points), so a process that dies later leaves a version
        the builder's reconcile drops; one that dies in between leaves an
        unnamed physical collection, dropped by the next creation for the same
        knowledge base.  A server clone recovers the source's snapshot into the
        new physical collection before naming it (a recovery replaces a
        collection, aliases included)."""
        aliases, physicals = self._aliases(), self._physicals()
        if self._taken(name, aliases, physicals):
            raise StoreError(f"collection {name!r} already exists")
        source = None
        if clone_from is not None:
            source = self._resolve(clone_from, aliases, physicals)
            if source is None:
                raise NotFoundError(f"collection {clone_from!r} does not exist")
        physical = self._new_physical(name, aliases, physicals)
        self._has_lexical.pop(name, None)
        if source is not None and not self.local:
            self._recover_copy(physical, source)
            self._name(name, physical)
            return
        params = collection_params(self.layout, dim)
        if self.local:
            params = {k: params[k] for k in ("vectors_config", "sparse_vectors_config")}
        self._call(f"create collection {physical}", self.client.create_collection, collection_name=physical, **params)
        self._name(name, physical)
        if not self.local:
            for field, kind in INDEXED_FIELDS.items():
                self._call(f"index {field}", self.client.create_payload_index, physical, field, index_schema(kind))
        if source is not None:
            self._copy_points(name, source)

    def _clone_on_server(self, name: str, source: str) -> None:
        """Server-side copy: snapshot ``source`` and recover it under ``name``
        from the server's own snapshot URL, so no vector crosses to this
        process.  A source without the lexical vector gives a clone without
        it (searched dense only until a full build).  (Untested here: no
        Qdrant server runs on this machine.)"""
        self.drop_collection(name)
        self._has_lexical.pop(name, None)
        self._recover_copy(name, source)

    def _recover_copy(self, name: str, source: str) -> None:
        """Snapshot the physical collection ``source`` and recover it as ``name`` on the server."""
        desc = self._call(f"snapshot {source}", self.client.create_snapshot, source, wait=True)
        try:
            self._call(f"recover {name}", self.client.recover_snapshot, name,
                       location=f"{qdrant_archive.rest_url(self.client)}/collections/{source}/snapshots/{desc.name}",
                       priority=qm.SnapshotPriority.SNAPSHOT, wait=True)
        finally:
            self._call(f"delete snapshot of {source}", self.client.delete_snapshot, source, desc.name)

    def drop_collection(self, name: str) -> None:
        """With renames: drop the version alias ``name``, and its physical collection with its last
        version alias (the collection first: a process dying in between leaves a dangling alias,
        which no listing shows, not an unnamed collection)."""
        if not self.renames:
            if self.client.collection_exists(name):
                self._call(f"delete collection {name}", self.client.delete_collection, name)
            return
        aliases, physicals = self._aliases(), self._physicals()
        physical = self._resolve(name, aliases, physicals)
        self._has_lexical.pop(name, None)
        if name not in aliases:
            if physical is not None:  # a collection that was never renamed goes by its own name
                self._call(f"delete collection {name}", self.client.delete_collection, name)
            return
        if physical is not None and self._versions_of(physical, aliases) == [name]:
            self._call(f"delete collection {physical}", self.client.delete_collection, physical)
        if name in self._aliases():
            self._call(f"delete alias {name}", self.client.update_collection_aliases, change_aliases_operations=[
                qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=name))])

    def list_collections(self) -> list[str]:
        """Collection (version) names; with renames the version aliases, never the physical
        collections behind them nor the knowledge bases' aliases."""
        if not self.renames:
            return sorted(self._physicals())
        aliases, physicals = self._aliases(), self._physicals()
        names = {a for a, t in aliases.items() if t in physicals and self._is_version(a)}
        names |= {p for p in physicals if not self._versions_of(p, aliases) and not _PHYSICAL_TAIL.search(p)}
        return sorted(names)

    # -- points -------------------------------------------------------------

    def upsert(self, name: str, points: Sequence[PointRecord]) -> None:
        for i in range(0, len(points), _BATCH):
            batch = [
                qm.PointStruct(id=p.id, vector=qdrant_query.point_vectors(p), payload=p.payload)
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

    def vector_size(self, name: str) -> int:
        """The dense vector size ``name`` was created with."""
        info = self._call(f"describe {name}", self.client.get_collection, name)
        vectors = info.config.params.vectors
        params = vectors.get(DENSE) if isinstance(vectors, dict) else vectors
        if params is None:
            raise StoreError(f"collection {name!r} has no {DENSE!r} vector")
        return int(params.size)

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
        self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None = None, exact: bool = False,
        text: str | None = None,
    ) -> list[ScoredHit]:
        query = lexical.query_vector(text) if text else None
        if query and self._lexical_configured(name):
            return self._hybrid(name, vector, query, limit=limit, flt=flt, exact=exact)
        response = self._call(
            f"query {name}",
            self.client.query_points,
            name,
            query=[float(x) for x in vector],
            using=DENSE,
            query_filter=qdrant_query.client_filter(flt),
            limit=limit,
            with_payload=True,
            search_params=None if self.local else search_params(self.layout, exact=exact),
        )
        return [ScoredHit(id=str(p.id), score=float(p.score), payload=dict(p.payload or {})) for p in response.points]

    def _lexical_configured(self, name: str) -> bool:
        known = self._has_lexical.get(name)
        if known is None:
            info = self._call(f"describe {name}", self.client.get_collection, self._physical(name))
            known = LEXICAL in (info.config.params.sparse_vectors or {})
            self._has_lexical[name] = known
        return known

    def _hybrid(self, name: str, vector: Sequence[float], query: lexical.SparseVector, *, limit: int,
                flt: Filter | None, exact: bool) -> list[ScoredHit]:
        """One batch of two queries: the fused one (dense and lexical prefetch, both
        filtered, RRF) and the lexical ranking alone, for its scores."""
        params = None if self.local else search_params(self.layout, exact=exact)
        requests = qdrant_query.hybrid_requests(vector, query, limit=limit, flt=flt, params=params)
        hits, lexical_hits = self._call(f"hybrid query {name}", self.client.query_batch_points, name,
                                        requests=requests)
        return fuse_hits(vector, hits.points, [(str(p.id), float(p.score)) for p in lexical_hits.points],
                         dense_of=qdrant_query.dense_of)

    def lexical_idf(self, name: str, tokens: Sequence[str], *, flt: Filter | None = None) -> dict[str, float]:
        """The engine's IDF per token present under ``flt`` (see :meth:`EdgeStore.lexical_idf`): one batch."""
        unique = list(dict.fromkeys(tokens))
        if not unique or not self._lexical_configured(name):
            return {}
        indices = [lexical.token_index(t) for t in unique]
        requests = qdrant_query.idf_requests(indices, flt)
        answers = self._call(f"lexical statistics {name}", self.client.query_batch_points, name, requests=requests)
        return lexical.idf_from_hits(unique, indices, [a.points for a in answers],
                              lambda v: v.get(LEXICAL) if isinstance(v, dict) else None)

    def flush(self, name: str) -> None:
        """Writes use ``wait=True``; nothing is buffered client-side."""

    def optimize(self, name: str, *, timeout_s: float = 600.0, poll_s: float = 0.5) -> bool:
        """Wait until the server's optimizer has indexed ``name`` (status green); True if it had to wait.

        The server builds its indexes in the background by itself; waiting
        before the swap keeps a freshly built version from serving from
        unindexed segments; a grey one (optimisation pending until an
        update) is nudged with an empty optimizer update.  Local mode has no
        optimizer: False at once.  A red status (an optimizer error) or ``timeout_s`` raises StoreError.
        """
        import time

        name = self._physical(name)
        if self.local:
            self._call(f"get collection {name}", self.client.get_collection, name)  # NotFoundError if missing
            return False
        deadline, waited, nudged = time.monotonic() + timeout_s, False, False
        while True:
            info = self._call(f"get collection {name}", self.client.get_collection, name)
            status = info.status
            if status == qm.CollectionStatus.GREEN:
                return waited
            if status == qm.CollectionStatus.GREY and not nudged:  # pending until an update triggers it
                self._call(f"trigger optimizer {name}", self.client.update_collection, name,
                           optimizer_config=qm.OptimizersConfigDiff())
                nudged = True
            if status == qm.CollectionStatus.RED:
                raise StoreError(f"collection {name!r} is red: its optimizer failed ({info.optimizer_status})")
            if time.monotonic() >= deadline:
                raise StoreError(f"collection {name!r} still {status} after {timeout_s:.0f} s of optimisation")
            waited = True
            time.sleep(poll_s)

    def release(self, name: str | None = None) -> None:
        """Handles are per client, not per collection: nothing to release."""

    def close(self) -> None:
        self.client.close()

    # -- archives -------------------------------------------------------------

    def export_collection(self, name: str, dest: Path) -> None:
        """Server: Qdrant's native snapshot, downloaded.  Local mode (no
        snapshots): every point as JSON lines, gzip-compressed.  With renames, of the physical collection."""
        name = self._physical(name)
        if not self.local:
            desc = self._call(f"snapshot {name}", self.client.create_snapshot, name, wait=True)
            try:
                qdrant_archive.download_snapshot(self.client, name, desc.name, dest)
            finally:
                self._call(f"delete snapshot of {name}", self.client.delete_snapshot, name, desc.name)
            return
        info = self._call(f"describe {name}", self.client.get_collection, name)
        qdrant_archive.write_lines(dest, info.config.params.vectors[DENSE].size, self._pages(name))

    def _pages(self, name: str) -> Iterator[list[Any]]:
        """Every point of ``name`` with payload and vectors, a scroll page at a time."""
        offset: Any = None
        while True:
            records, offset = self._call(f"scroll {name}", self.client.scroll, name, limit=_BATCH, offset=offset,
                                         with_payload=True, with_vectors=True)
            yield records
            if offset is None:
                return

    def import_collection(self, name: str, source: Path | str) -> None:
        """Server: recover from a URL the server can fetch (a presigned S3 URL)
        with ``priority=snapshot``, or upload a local snapshot file.  With renames, into a new
        physical collection, then named ``name``."""
        version = name
        if self.renames and self._is_version(name):
            aliases, physicals = self._aliases(), self._physicals()
            if self._taken(name, aliases, physicals):
                raise StoreError(f"collection {name!r} already exists")
            if not self.local:
                name = self._new_physical(version, aliases, physicals)
        elif self.client.collection_exists(name):
            raise StoreError(f"collection {name!r} already exists")
        if not self.local:
            self._import_snapshot(name, source)
            if name != version:
                self._name(version, name)
            return
        self._import_lines(name, source)

    def _import_snapshot(self, name: str, source: Path | str) -> None:
        """Recover ``name`` from a URL the server fetches, or upload a local snapshot file."""
        if isinstance(source, str) and source.startswith(("http://", "https://", "file://")):
            self._call(f"recover {name}", self.client.recover_snapshot, name, location=source,
                       priority=qm.SnapshotPriority.SNAPSHOT, wait=True)
            return
        qdrant_archive.upload_snapshot(self.client, name, source)

    def _import_lines(self, name: str, source: Path | str) -> None:
        qdrant_archive.read_lines(
            source, create=lambda dim: self.create_collection(name, dim), batch=_BATCH,
            write=lambda points: self._call(f"upsert {name}", self.client.upsert, name, points=points, wait=True))

    # -- aliases ------------------------------------------------------------

    def get_alias(self, alias: str) -> str | None:
        """The collection ``alias`` names; with renames the version name of its physical collection."""
        aliases = self._aliases()
        target = aliases.get(alias)
        if target is None or not self.renames:
            return target
        versions = self._versions_of(target, aliases)
        return versions[-1] if versions else target

    def swap_alias(self, alias: str, collection: str) -> str | None:
        """Point ``alias`` at ``collection`` (with renames: at its physical collection, as Qdrant
        refuses an alias of an alias); returns the previous target by its collection name."""
        if self.renames:
            target = self._resolve(collection)
            if target is None:
                raise NotFoundError(f"collection {collection!r} does not exist")
            previous_raw = self._aliases().get(alias)
            previous = self.get_alias(alias)
        else:
            if not self.client.collection_exists(collection):
                raise NotFoundError(f"collection {collection!r} does not exist")
            target = collection
            previous_raw = previous = self.get_alias(alias)
        self._set_alias(alias, target, previous_raw)
        now = self._aliases().get(alias)
        if now != target:
            if previous_raw is not None:
                self._set_alias(alias, previous_raw, now)
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

