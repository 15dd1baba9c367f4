"""Qdrant Edge (``qdrant-edge-py``): Qdrant's engine inside this process.

The embedded default.  Layout under the store root::

    collections/<name>/    one edge shard directory per collection version
    aliases.json           {alias: collection}, replaced atomically

Qdrant Edge has no aliases, so they live in ``aliases.json`` and a swap is an
``os.replace`` of a fully written temporary file: a reader opens either the
old file or the new one.  A shard directory admits one opener at a time
across processes (the WAL takes an exclusive lock), so handles are opened on
demand, cached, and closed by :meth:`EdgeStore.release`; a worker releases
what it wrote when its task ends so the CLI or the server can open it next.
Cloning copies a flushed shard directory, which is safe while readers have
it open because a built version is never written again.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from core.errors import NotFoundError, StoreBusyError, StoreError
from vectorstore.base import DENSE, Filter, PointRecord, ScoredHit

_UPSERT_BATCH = 512


class EdgeStore:
    """A :class:`vectorstore.base.VectorStore` on Qdrant Edge shards."""

    def __init__(self, root: str | Path, *, open_timeout: float = 30.0) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "collections").mkdir(exist_ok=True)
        self._open: dict[str, qe.EdgeShard] = {}
        self._lock = threading.RLock()
        self._open_timeout = open_timeout

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
            deadline = time.monotonic() + self._open_timeout
            delay = 0.05
            while True:
                try:
                    shard = qe.EdgeShard.load(str(path))
                    break
                except Exception as exc:  # qdrant_edge raises plain Exception
                    if "WouldBlock" not in str(exc):
                        raise StoreError(f"cannot open collection {name!r}: {exc}") from exc
                    if time.monotonic() >= deadline:
                        raise StoreBusyError(
                            f"collection {name!r} is open in another process (an embedded store admits one "
                            "process at a time: stop `freshindex serve`/the worker, or use a Qdrant server)"
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
                if shard is not None:
                    try:
                        shard.flush()
                    finally:
                        shard.close()

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
                tmp = path.with_name(f".{name}.tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(source, tmp)
                os.replace(tmp, path)
                return
            config = qe.EdgeConfig(vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)})
            try:
                self._open[name] = qe.EdgeShard.create(str(path), config)
            except Exception as exc:
                raise StoreError(f"cannot create collection {name!r}: {exc}") from exc

    def drop_collection(self, name: str) -> None:
        with self._lock:
            self.release(name)
            shutil.rmtree(self._dir(name), ignore_errors=True)

    def list_collections(self) -> list[str]:
        base = self.root / "collections"
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))

    # -- points -------------------------------------------------------------

    def upsert(self, name: str, points: Sequence[PointRecord]) -> None:
        shard = self._shard(name)
        for i in range(0, len(points), _UPSERT_BATCH):
            batch = [
                qe.Point(p.id, {DENSE: [float(x) for x in p.vector]}, p.payload)
                for p in points[i : i + _UPSERT_BATCH]
                if p.vector is not None
            ]
            try:
                shard.update(qe.UpdateOperation.upsert_points(batch))
            except Exception as exc:
                raise StoreError(f"upsert into {name!r} failed: {exc}") from exc

    def delete(self, name: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        shard = self._shard(name)
        try:
            shard.update(qe.UpdateOperation.delete_points(list(ids)))
        except Exception as exc:
            raise StoreError(f"delete from {name!r} failed: {exc}") from exc

    def count(self, name: str) -> int:
        return int(self._shard(name).count(qe.CountRequest(exact=True)))

    def retrieve(self, name: str, ids: Sequence[str], *, with_vectors: bool = False) -> list[PointRecord]:
        if not ids:
            return []
        records = self._shard(name).retrieve(list(ids), True, [DENSE] if with_vectors else False)
        return [
            PointRecord(id=str(r.id), vector=_dense(r.vector) if with_vectors else None, payload=dict(r.payload or {}))
            for r in records
        ]

    def iter_ids(self, name: str, batch: int = 1000) -> Iterator[str]:
        shard = self._shard(name)
        offset: Any = None
        while True:
            records, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=batch, with_payload=False))
            for r in records:
                yield str(r.id)
            if offset is None:
                return

    def search(
        self, name: str, vector: Sequence[float], *, limit: int, flt: Filter | None = None, exact: bool = False
    ) -> list[ScoredHit]:
        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest([float(x) for x in vector], using=DENSE),
            filter=_edge_filter(flt),
            with_payload=True,
            params=qe.SearchParams(exact=True) if exact else None,
        )
        try:
            hits = self._shard(name).query(request)
        except (NotFoundError, StoreBusyError):
            raise
        except Exception as exc:
            raise StoreError(f"query on {name!r} failed: {exc}") from exc
        return [ScoredHit(id=str(h.id), score=float(h.score), payload=dict(h.payload or {})) for h in hits]

    def flush(self, name: str) -> None:
        self._shard(name).flush()

    # -- aliases ------------------------------------------------------------

    def _aliases(self) -> dict[str, str]:
        try:
            return json.loads((self.root / "aliases.json").read_text())
        except FileNotFoundError:
            return {}

    def get_alias(self, alias: str) -> str | None:
        return self._aliases().get(alias)

    def swap_alias(self, alias: str, collection: str) -> str | None:
        if not self._dir(collection).exists():
            raise NotFoundError(f"collection {collection!r} does not exist")
        with self._lock:
            aliases = self._aliases()
            previous = aliases.get(alias)
            aliases[alias] = collection
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".aliases.", suffix=".json")
            try:
                with os.fdopen(fd, "w") as fh:
                    json.dump(aliases, fh, sort_keys=True)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.root / "aliases.json")
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            _fsync_dir(self.root)
            if self.get_alias(alias) != collection:
                raise StoreError(f"alias {alias!r} did not take the new target {collection!r}")
            return previous


def _dense(vector: Any) -> list[float] | None:
    if isinstance(vector, dict):
        vector = vector.get(DENSE)
    return list(vector) if vector is not None else None


def _edge_filter(flt: Filter | None) -> qe.Filter | None:
    if flt is None or (not flt.must and not flt.must_not):
        return None

    def cond(m: Any) -> qe.FieldCondition:
        return qe.FieldCondition(key=m.key, match=qe.MatchAny(any=list(m.any)))

    return qe.Filter(
        must=[cond(m) for m in flt.must] or None,
        must_not=[cond(m) for m in flt.must_not] or None,
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
