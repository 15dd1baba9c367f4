"""Qdrant Edge (``qdrant-edge-py``): Qdrant's engine inside this process.

The embedded default.  Layout under the store root::

    collections/<name>/    one edge shard directory per collection version
    aliases.json           {alias: collection}, replaced atomically

Qdrant Edge has no aliases, so they live in ``aliases.json`` and a swap is an
``os.replace`` of a fully written temporary file: a reader opens either the
old file or the new one.

Shards are created without a write-ahead log.  A collection is written once,
by the builder holding its knowledge base's lock, and flushed before it is
verified; without a WAL a shard takes no file lock (with one, a directory
admits a single opener in any process), so reader processes can open a
serving version while a builder process writes the next one.  Handles are
opened on demand and cached; a reader closes a collection once the alias it
resolved has moved on and its last query finished.  Cloning copies a flushed
shard's data extents (the files are sparse), safe while readers have it open.
A blue/green build recycles a retired version in place (renames, then
writes it): closing an Edge shard writes into the files it mapped, so every
handle holds a shared ``flock`` on ``.readers.lock`` and the rename needs
it exclusively (:meth:`EdgeStore.in_use`, :meth:`EdgeStore.rename_collection`).

Processes on one host may share a store root: many readers, one writer per
collection (the builder, under its registry lock), alias swaps serialised
(:mod:`core.flock`); not across hosts (docs/operations.md).

Every collection has a dense vector and a sparse lexical one (IDF applied by
the engine), and a payload index on each field in
:data:`vectorstore.base.INDEXED_FIELDS`, so filters are evaluated from the
index instead of each point's stored payload.  A clone of a version written
before either existed gets them added (its old points have no lexical
vector until a full build writes them again).

The dense side has no HNSW graph by default (``hnsw_m=0``) and int8 scalar
quantisation (kept in RAM, rescored with the original vectors).  Why: at the
embedded engine's scale an int8 scan of every vector answers in a few ms
with exact recall on a payload-index plan for selective ACL filters, and
:meth:`EdgeStore.optimize` is then a conversion (freeze the written
segments, quantise, build the sparse inverted index), not a graph build:
48 s against 772 s for 100k chunks with the default graph, and queries
5-10x faster than on the unoptimised shard (``bench/results/query.md``).
Pass ``hnsw_m=16`` for collections far larger than the embedded default.
Why the original vectors are cold: :mod:`vectorstore.edge_schema`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from freshindex.core import flock
from freshindex.core.errors import NotFoundError, StoreBusyError, StoreError
from freshindex.vectorstore import edge_files, edge_query, edge_schema, edge_space, lexical
from freshindex.vectorstore.base import DENSE, INDEXED_FIELDS, LEXICAL, Filter, PointRecord, ScoredHit, fuse_hits

_UPSERT_BATCH = 512

log = logging.getLogger("freshindex.edge")


class EdgeStore:
    """A :class:`vectorstore.base.VectorStore` on Qdrant Edge shards."""

    def __init__(self, root: str | Path, *, open_timeout: float = 30.0, hnsw_m: int = 0,
                 indexing_threshold_kb: int | None = None) -> None:
        if hnsw_m < 0:
            raise ValueError(f"hnsw_m must be 0 (no graph) or positive, not {hnsw_m}")
        self.hnsw_m, self.indexing_threshold_kb = hnsw_m, indexing_threshold_kb
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "collections").mkdir(exist_ok=True)
        self._open: dict[str, qe.EdgeShard] = {}
        self._lock = threading.RLock()
        self._open_timeout = open_timeout
        # Readers: queries in flight per collection, and the alias targets this
        # process last saw, so a collection the aliases moved away from is
        # closed once its last query finishes.
        self._inflight: dict[str, int] = {}
        self._seen: dict[str, str] = {}
        self._retiring: set[str] = set()
        # Whether each collection has the lexical vector (read from its config once).
        self._has_lexical: dict[str, bool] = {}
        # A shared flock per open handle (see :meth:`in_use`), released with it.
        self._holds: dict[str, int] = {}

    # -- handles ------------------------------------------------------------

    def _dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise StoreError(f"invalid collection name {name!r}")
        return self.root / "collections" / name

    def _shard(self, name: str) -> qe.EdgeShard:
        with self._lock:
            shard = self._open.get(name)
            if shard is not None:
                return shard
            path = self._dir(name)
            if not (path / "edge_config.json").exists():
                raise NotFoundError(f"collection {name!r} does not exist")
            # Mapping a shard whose holes the file system cannot back ends in SIGBUS, not an error (edge_space).
            edge_space.check_readable(path, name)
            self._hold(name)
            deadline = time.monotonic() + self._open_timeout
            delay = 0.05
            while True:
                try:
                    shard = qe.EdgeShard.load(str(path))
                    break
                except Exception as exc:  # qdrant_edge raises plain Exception
                    if "WouldBlock" not in str(exc):
                        self._unhold(name)
                        raise StoreError(f"cannot open collection {name!r}: {exc}") from exc
                    if time.monotonic() >= deadline:
                        self._unhold(name)
                        raise StoreBusyError(
                            f"collection {name!r} is locked by another process (it was written with a "
                            "write-ahead log, which admits one process at a time; rebuild it with "
                            "`freshindex snapshots build --full` to drop the log)"
                        ) from exc
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
            self._open[name] = shard
            return shard

    def release(self, name: str | None = None) -> None:
        with self._lock:
            names = [name] if name is not None else list(self._open)
            for n in names:
                shard = self._open.pop(n, None)
                self._retiring.discard(n)
                self._has_lexical.pop(n, None)
                if shard is None:
                    self._unhold(n)
                    continue
                try:
                    shard.flush()
                    shard.close()
                except Exception:  # the directory may be gone (pruned); the handle is dropped either way
                    log.debug("closing %s failed", n, exc_info=True)
                del shard
                self._unhold(n)

    def _hold(self, name: str) -> None:
        """Take the shared lock every handle holds on ``<collection>/.readers.lock``.

        Closing (even dropping) an Edge shard writes its trackers back into
        the files it mapped, so no handle may be open on a collection a
        builder is about to modify: the builder takes the lock exclusively
        first (:meth:`rename_collection`).  The kernel drops the lock of a
        killed process.  Refused while a builder holds it: the collection
        is being recycled, the caller resolves the alias again."""
        if name in self._holds:
            return
        try:
            fd = os.open(self._dir(name) / ".readers.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError as exc:
            raise NotFoundError(f"collection {name!r} does not exist") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise NotFoundError(f"collection {name!r} is being recycled") from exc
        self._holds[name] = fd

    def _unhold(self, name: str) -> None:
        fd = self._holds.pop(name, None)
        if fd is not None:
            os.close(fd)

    def in_use(self, name: str) -> bool:
        """Whether a query of this store or a handle in another process has ``name`` open
        (this store's own idle handle is closed: the caller is about to recycle it)."""
        with self._lock:
            if self._inflight.get(name):
                return True
            self.release(name)
        path = self._dir(name) / ".readers.lock"
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def close(self) -> None:
        self.release()

    # -- collections --------------------------------------------------------

    def create_collection(self, name: str, dim: int, *, clone_from: str | None = None) -> None:
        path = self._dir(name)
        with self._lock:
            if path.exists():
                raise StoreError(f"collection {name!r} already exists")
            if clone_from is not None:
                source = self._dir(clone_from)
                if not source.exists():
                    raise NotFoundError(f"collection {clone_from!r} does not exist")
                if clone_from in self._open:
                    self._open[clone_from].flush()
                edge_space.check_writable(self.root, name, incoming=self.disk_bytes(clone_from))
                try:
                    edge_files.copy_shard(source, path)  # removes its temporary copy when it fails
                except OSError as exc:  # shutil.Error lists every file that failed: name the first cause only
                    cause = "no space left on device" if edge_space.out_of_space(exc) else str(exc)[:200]
                    raise StoreError(f"cannot copy collection {clone_from!r} to {name!r}: {cause}") from exc
                self._complete_schema(name)
                return
            edge_space.check_writable(self.root, name)
            config = edge_schema.new_config(dim, self.hnsw_m, self.indexing_threshold_kb)  # no WAL: see there
            try:
                self._open[name] = qe.EdgeShard.create(str(path), config)
            except Exception as exc:
                raise StoreError(f"cannot create collection {name!r}: {exc}") from exc
            self._complete_schema(name)

    def _complete_schema(self, name: str) -> None:
        """Add the lexical vector and the payload indexes a (cloned) collection lacks."""
        shard = self._shard(name)
        try:
            if not self._lexical_configured(name):
                log.warning("collection %s was cloned from a version without a lexical vector: its old points "
                            "are found by the dense side only until a full build", name)
                shard.update(qe.UpdateOperation.create_sparse_vector(LEXICAL, modifier=qe.Modifier.Idf))
                self._has_lexical.pop(name, None)
            present = set(shard.info().payload_schema)
            for field, kind in INDEXED_FIELDS.items():
                if field not in present:
                    shard.update(qe.UpdateOperation.create_field_index(field, edge_schema.payload_index(kind)))
        except Exception as exc:
            raise StoreError(f"cannot complete the schema of collection {name!r}: {exc}") from exc

    def _lexical_configured(self, name: str) -> bool:
        known = self._has_lexical.get(name)
        if known is None:
            try:
                config = json.loads((self._dir(name) / "edge_config.json").read_text())
            except (OSError, ValueError):
                config = {}
            known = LEXICAL in (config.get("sparse_vectors") or {})
            self._has_lexical[name] = known
        return known

    def payload_indexes(self, name: str) -> dict[str, str]:
        """Indexed payload fields and their type (as the engine names it), for checks and tests."""
        return {k: str(v.data_type).rsplit(".", 1)[-1].lower() for k, v in self._shard(name).info().payload_schema.items()}

    def drop_collection(self, name: str) -> None:
        """Remove ``name``'s shard and any temporary copy of it a clone or an import left (a full disk)."""
        with self._lock:
            self.release(name)
            path = self._dir(name)
            shutil.rmtree(path, ignore_errors=True)
            for leftover in (f".{name}.tmp", f".{name}.import"):
                shutil.rmtree(path.with_name(leftover), ignore_errors=True)

    def rename_collection(self, name: str, new_name: str) -> None:
        """Give the shard of ``name`` the name ``new_name`` (one directory rename).

        The blue/green builder recycles a retired version this way before it
        modifies it (see :mod:`snapshots.builder`).  Refused with
        :class:`StoreBusyError` while any handle has it open (:meth:`_hold`).
        """
        src, dst = self._dir(name), self._dir(new_name)
        with self._lock:
            if dst.exists():
                raise StoreError(f"collection {new_name!r} already exists")
            if not (src / "edge_config.json").exists():
                raise NotFoundError(f"collection {name!r} does not exist")
            if self._inflight.get(name):
                raise StoreBusyError(f"collection {name!r} is being queried; not recycling it")
            self.release(name)
            fd = os.open(src / ".readers.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                # Exclusive while renaming: no handle is open anywhere, and none opens
                # until the old name is gone (a late reader finds no directory).
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                os.close(fd)
                raise StoreBusyError(f"collection {name!r} is open in another process; not recycling it") from exc
            try:
                os.rename(src, dst)
                edge_files.fsync_dir(src.parent)
            finally:
                os.close(fd)

    def disk_bytes(self, name: str) -> int:
        """Bytes the shard of ``name`` occupies on disk (allocated blocks: its files are sparse)."""
        path = self._dir(name)
        return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file()) if path.exists() else 0

    def list_collections(self) -> list[str]:
        base = self.root / "collections"
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))

    # -- points -------------------------------------------------------------

    def upsert(self, name: str, points: Sequence[PointRecord]) -> None:
        shard = self._shard(name)
        for i in range(0, len(points), _UPSERT_BATCH):
            edge_space.check_writable(self.root, name, self._dir(name))
            batch = [
                qe.Point(p.id, edge_query.point_vectors(p), p.payload)
                for p in points[i : i + _UPSERT_BATCH] if p.vector is not None
            ]
            try:
                shard.update(qe.UpdateOperation.upsert_points(batch))
            except Exception as exc:
                raise StoreError(f"upsert into {name!r} failed: {exc}") from exc

    def delete(self, name: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        shard = self._shard(name)
        edge_space.check_writable(self.root, name, self._dir(name))
        try:
            shard.update(qe.UpdateOperation.delete_points(list(ids)))
        except Exception as exc:
            raise StoreError(f"delete from {name!r} failed: {exc}") from exc

    def vector_size(self, name: str) -> int:
        """The dense vector size ``name`` was created with (read from its config file, no shard opened)."""
        try:
            persisted = json.loads((self._dir(name) / "edge_config.json").read_text())
            return int(persisted["vectors"][DENSE]["size"])
        except FileNotFoundError:
            raise NotFoundError(f"collection {name!r} does not exist") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"cannot read the vector size of collection {name!r}: {exc}") from exc

    def count(self, name: str) -> int:
        with self._reading(name):
            return int(self._shard(name).count(qe.CountRequest(exact=True)))

    def retrieve(self, name: str, ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        if not ids:
            return []
        with self._reading(name):  # a read in flight: no re-index or release closes the shard under it
            records = self._shard(name).retrieve(list(ids), True, [DENSE] if with_vectors else False)
        return [
            PointRecord(id=str(r.id), vector=edge_query.dense_of(r.vector) if with_vectors else None,
                        payload=dict(r.payload or {}))
            for r in records
        ]

    def iter_ids(self, name: str, batch: int = 1000) -> Iterator[str]:
        offset: Any = None
        while True:
            # In flight per page, not for the generator's life: a caller that
            # abandons the iterator must not leave the collection "being read".
            with self._reading(name):
                records, offset = self._shard(name).scroll(
                    qe.ScrollRequest(offset=offset, limit=batch, with_payload=False))
            for r in records:
                yield str(r.id)
            if offset is None:
                return

    def search(
        self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None = None, exact: bool = False,
        text: str | None = None,
    ) -> list[ScoredHit]:
        with self._reading(name):
            query = lexical.query_vector(text) if text else None
            if query and self._lexical_configured(name):
                hits = self._hybrid(name, vector, query, limit=limit, flt=flt, exact=exact)
            else:
                hits = self._search(name, vector, limit=limit, flt=flt, exact=exact)
            self._still_there(name)
            return hits

    @contextlib.contextmanager
    def _reading(self, name: str) -> Iterator[None]:
        """A query in flight on ``name``: its handle is not closed under it (an alias resolution in
        another thread retires it only when the last reader leaves)."""
        with self._lock:
            self._inflight[name] = self._inflight.get(name, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._inflight[name] -= 1
                if not self._inflight[name]:
                    del self._inflight[name]
                    if name in self._retiring:
                        self.release(name)

    def _still_there(self, name: str) -> None:
        """The generation check of a query: a builder recycling a version
        renames its directory before writing to it, so a directory gone
        after the query means what was read may be torn; the handle is
        dropped and :class:`NotFoundError` makes the caller resolve the alias
        again (a collection's name is never reused)."""
        if not (self._dir(name) / "edge_config.json").exists():
            with self._lock:
                self._retiring.add(name)
            raise NotFoundError(f"collection {name!r} was recycled or dropped during the query")

    def _search(
        self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None, exact: bool
    ) -> list[ScoredHit]:
        request = edge_query.dense_request(vector, limit=limit, flt=flt, exact=exact)
        try:
            hits = self._shard(name).query(request)
        except (NotFoundError, StoreError):  # ours (a busy or full store) pass as they are
            raise
        except Exception as exc:
            raise StoreError(f"query on {name!r} failed: {exc}") from exc
        return [ScoredHit(id=str(h.id), score=float(h.score), payload=dict(h.payload or {})) for h in hits]

    def _hybrid(self, name: str, vector: Sequence[float], query: lexical.SparseVector, *, limit: int,
                flt: Filter | None, exact: bool) -> list[ScoredHit]:
        """One batch: the fused query (dense and lexical prefetch, both filtered, RRF) and the
        lexical ranking alone (its scores; the fused query exposes only the fused score).
        The dense score comes from each hit's stored, normalised vector."""
        batch = edge_query.hybrid_requests(vector, query, limit=limit, flt=flt, exact=exact)
        try:
            hits, lexical_hits = self._shard(name).query_batch(batch)
        except (NotFoundError, StoreError):  # ours (a busy or full store) pass as they are
            raise
        except Exception as exc:
            raise StoreError(f"hybrid query on {name!r} failed: {exc}") from exc
        return fuse_hits(vector, hits, [(str(h.id), float(h.score)) for h in lexical_hits],
                         dense_of=edge_query.dense_of)

    def lexical_idf(self, name: str, tokens: Sequence[str], *, flt: Filter | None = None) -> dict[str, float]:
        """The engine's IDF of each token some point under ``flt`` has; tokens no such point has are left out.

        One batch of single-token lexical queries (limit 1, the hit's lexical
        vector returned): the engine scores a hit ``idf * weight`` and the
        stored weight is in the vector, so their ratio is the IDF the engine
        itself applies, exact as points come and go.  The IDF counts every
        point of the collection; ``flt`` only decides whether a token is
        present for the caller, so a token only denied points have reads
        as absent.
        """
        unique = list(dict.fromkeys(tokens))
        if not unique or not self._lexical_configured(name):
            return {}
        indices = [lexical.token_index(t) for t in unique]
        with self._reading(name):
            try:
                answers = self._shard(name).query_batch(edge_query.idf_requests(indices, flt))
            except (NotFoundError, StoreError):  # ours (a busy or full store) pass as they are
                raise
            except Exception as exc:
                raise StoreError(f"lexical statistics of {name!r} failed: {exc}") from exc
            self._still_there(name)
        return lexical.idf_from_hits(unique, indices, answers, lambda v: (v or {}).get(LEXICAL))

    def flush(self, name: str) -> None:
        """Write ``name``'s pending changes, then check that a reader could map it here (:mod:`edge_space`):
        a builder flushes before it verifies, so a version no reader could open fails its build."""
        self._shard(name).flush()
        edge_space.check_readable(self._dir(name), name)

    def optimize(self, name: str) -> bool:
        """Build the search structures of ``name`` after its bulk writes (before it is verified and served).

        Blocks the calling thread while the engine freezes the written
        segments, quantises the vectors and builds the sparse index (about
        48 s for 100k chunks on 2 busy cores with ``hnsw_m=0``; a changeset
        applied to an optimised clone costs in proportion to what it wrote).
        A collection whose persisted index settings differ from this store's
        (a clone of a version built with an HNSW graph) is reopened with this
        store's settings first, which needs no read of this process in flight
        and no handle open in another process (:class:`StoreBusyError`
        otherwise, see :meth:`_reopen_reindexed`).  Returns whether any segment
        changed (False: already optimal, and the call was cheap).  Queries may
        run meanwhile; the store lock is not held during the work.
        """
        path = self._dir(name)
        with self._lock:
            try:
                persisted = json.loads((path / "edge_config.json").read_text())
            except FileNotFoundError:
                raise NotFoundError(f"collection {name!r} does not exist") from None
            except (OSError, ValueError) as exc:
                raise StoreError(f"cannot read the config of collection {name!r}: {exc}") from exc
            if not edge_schema.index_current(persisted, self.hnsw_m, self.indexing_threshold_kb):
                self._reopen_reindexed(name, persisted)
        with self._reading(name):  # in use while the engine works: no release closes it under the work
            shard = self._shard(name)
            # Optimising writes new segments beside the old ones: room for as much again as it holds.
            edge_space.check_writable(self.root, name, path, incoming=self.disk_bytes(name))
            try:
                changed = bool(shard.optimize())
                shard.flush()
            except Exception as exc:
                raise StoreError(f"optimizing collection {name!r} failed: {exc}") from exc
        return changed

    def _reopen_reindexed(self, name: str, persisted: dict[str, Any]) -> None:
        """Close ``name`` and open it again with this store's index settings (caller holds ``_lock``).

        The same rules as :meth:`rename_collection`: no read of this process
        in flight, and no handle open in any process (the exclusive
        ``flock``), since closing a handle writes into the files it mapped.
        The new handle then keeps the shared lock every handle holds
        (:meth:`_hold`), so another process's builder sees it in use.
        """
        if self._inflight.get(name):
            raise StoreBusyError(f"collection {name!r} is being read; optimise it before it serves")
        self.release(name)
        fd = os.open(self._dir(name) / ".readers.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise StoreBusyError(f"collection {name!r} is open in another process; not re-indexing it") from exc
            try:
                shard = qe.EdgeShard.load(str(self._dir(name)),
                                          edge_schema.config_like(persisted, self.hnsw_m, self.indexing_threshold_kb))
            except StoreError:
                raise
            except Exception as exc:
                raise StoreError(f"cannot re-index collection {name!r}: {exc}") from exc
            try:
                # Down to the shared hold of an ordinary handle (not atomic: a
                # builder that took the lock in between wins, and this handle goes).
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                shard.close()
                raise StoreBusyError(f"collection {name!r} was taken by a builder while re-indexing") from exc
        except BaseException:
            os.close(fd)
            raise
        self._holds[name] = fd
        self._open[name] = shard

    # -- archives -------------------------------------------------------------

    def export_collection(self, name: str, dest: Path) -> None:
        """A tar of the flushed and closed shard directory."""
        path = self._dir(name)
        if not path.exists():
            raise NotFoundError(f"collection {name!r} does not exist")
        self.release(name)
        edge_files.pack_shard(path, dest)

    def import_collection(self, name: str, source: Path | str) -> None:
        edge_files.unpack_shard(self._dir(name), source)

    # -- aliases ------------------------------------------------------------

    def _aliases(self) -> dict[str, str]:
        return edge_files.read_aliases(self.root)

    def get_alias(self, alias: str) -> str | None:
        target = self._aliases().get(alias)
        previous = self._seen.get(alias)
        if target is not None and previous is not None and previous != target:
            with self._lock:
                if previous not in [t for a, t in self._seen.items() if a != alias]:
                    # No alias this process resolved points there any more.
                    if self._inflight.get(previous):
                        self._retiring.add(previous)
                    else:
                        self.release(previous)
        if target is not None:
            self._seen[alias] = target
        return target

    def swap_alias(self, alias: str, collection: str) -> str | None:
        if not self._dir(collection).exists():
            raise NotFoundError(f"collection {collection!r} does not exist")
        # Across processes too: two knowledge bases' builders may swap at once (core.flock). The file lock is
        # waited for before the process lock, so a wait on another process never blocks this one's readers.
        with flock.exclusive(self.root / ".aliases.lock", timeout=self._open_timeout,
                             what=f"the aliases of {self.root}"), self._lock:
            aliases = self._aliases()
            previous = aliases.get(alias)
            aliases[alias] = collection
            edge_files.write_aliases(self.root, aliases)
            if self.get_alias(alias) != collection:
                raise StoreError(f"alias {alias!r} did not take the new target {collection!r}")
            return previous

