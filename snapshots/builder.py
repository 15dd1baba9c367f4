"""Build a new collection version from staged changesets, verify it, swap it in.

The order of a build, under the knowledge base's writer lock:

1. reconcile: if a previous builder swapped the alias but died before
   recording it, finish that record first;
2. take every ``staged`` changeset and resolve the final operation per chunk;
3. create the new collection: a copy of the active one plus the changes
   (*incremental*), or every live chunk written afresh (*full*: the first
   build, a changed embedding model, or on request);
4. verify it (point count against the registry, a sample of payloads, the
   removed chunks gone);
5. swap the alias, then record the snapshot as active in one registry
   transaction guarded by the lock's fencing token.

A failure before step 5 leaves the alias where it was: the last good
snapshot keeps serving and the changesets stay staged for the next build.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import FreshIndexError, VerificationError
from core.types import Embedder, embed_text
from health.metrics import Metrics
from registry import ChunkRow, Registry, SnapshotInfo
from snapshots.lock import WriterLock
from snapshots.naming import Naming
from vectorstore.base import PointRecord, VectorStore

log = logging.getLogger("freshindex.build")


@dataclass(frozen=True)
class BuildResult:
    kb: str
    status: str  # built | unchanged | failed
    snapshot_id: str | None  # the snapshot serving after this call
    previous_id: str | None = None
    strategy: str | None = None
    upserts: int = 0
    deletes: int = 0
    point_count: int = 0
    vectors_embedded: int = 0
    seconds: float = 0.0
    reason: str | None = None
    verification: dict[str, Any] = field(default_factory=dict)


class Builder:
    """Builds snapshots of knowledge bases into a :class:`VectorStore`."""

    def __init__(
        self,
        registry: Registry,
        store: VectorStore,
        embedder: Embedder,
        metrics: Metrics,
        *,
        naming: Naming = Naming(),
        lock_ttl: float = 120.0,
        lock_wait: float = 0.0,
        verify_sample: int = 64,
        keep_versions: int = 3,
        pipeline_version: str = "",
    ) -> None:
        self.registry, self.store, self.embedder, self.metrics = registry, store, embedder, metrics
        self.naming = naming
        self.lock_ttl, self.lock_wait = lock_ttl, lock_wait
        self.verify_sample = verify_sample
        self.keep_versions = max(2, keep_versions)
        self.pipeline_version = pipeline_version

    def build(self, kb: str, *, actor: str = "cli", reason: str = "sync", full: bool = False) -> BuildResult:
        started = time.perf_counter()
        with WriterLock(self.registry, f"build:{kb}", ttl=self.lock_ttl, wait=self.lock_wait) as lock:
            self._reconcile(kb)
            active = self.registry.active_snapshot(kb)
            changesets = self.registry.staged_changesets(kb)
            if not changesets and active is not None and not full:
                return BuildResult(kb=kb, status="unchanged", snapshot_id=active.id, previous_id=active.id)
            ops = self.registry.changeset_ops(changesets)
            strategy = "incremental"
            if full or active is None or active.embedding_model != self.embedder.model_id:
                strategy = "full"
            version = self.registry.next_snapshot_version(kb)
            snapshot_id = self.naming.snapshot_id(kb, version)
            collection = self.naming.collection(snapshot_id)
            upserts = sorted(cid for cid, op in ops.items() if op == "upsert")
            deletes = sorted(cid for cid, op in ops.items() if op == "delete")
            self.registry.create_snapshot(
                snapshot_id=snapshot_id, kb=kb, version=version, parent_id=active.id if active else None,
                collection=collection, strategy=strategy, embedding_model=self.embedder.model_id,
                parser_version=self.pipeline_version, changeset_ids=changesets, upserts=len(upserts),
                deletes=len(deletes),
            )
            log.info("build started", extra={"event": "build_started", "kb": kb, "snapshot": snapshot_id,
                                              "strategy": strategy, "upserts": len(upserts), "deletes": len(deletes)})
            try:
                embedded, expected, written = self._write(kb, collection, strategy, active, upserts, deletes,
                                                          snapshot_id)
                verification = self._verify(collection, expected, written, deletes)
            except FreshIndexError as exc:
                return self._fail(kb, snapshot_id, collection, active, exc, started)
            seconds = time.perf_counter() - started
            self.registry.mark_verified(snapshot_id, point_count=verification["point_count"],
                                        verification=verification, seconds=seconds)
            previous = self.store.swap_alias(self.naming.alias(kb), collection)
            self.registry.activate_snapshot(snapshot_id, ops=ops, actor=actor, reason=reason,
                                            lock=(lock.name, lock.token or 0))
            self.metrics.alias_swaps.labels(kb).inc()
            self.metrics.builds.labels(kb, "built").inc()
            self.metrics.build_seconds.labels(kb).observe(seconds)
            self._retain(kb)
            log.info("snapshot active", extra={"event": "snapshot_active", "kb": kb, "snapshot": snapshot_id,
                                               "previous_collection": previous, "seconds": round(seconds, 3)})
            return BuildResult(
                kb=kb, status="built", snapshot_id=snapshot_id, previous_id=active.id if active else None,
                strategy=strategy, upserts=len(upserts), deletes=len(deletes),
                point_count=verification["point_count"], vectors_embedded=embedded, seconds=seconds,
                verification=verification,
            )

    # -- steps ----------------------------------------------------------------

    def _write(self, kb: str, collection: str, strategy: str, active: SnapshotInfo | None,
               upserts: Sequence[str], deletes: Sequence[str], snapshot_id: str) -> tuple[int, int, list[str]]:
        """Write the new version; returns (vectors embedded, expected count, ids written)."""
        delete_set = set(deletes)
        if strategy == "full":
            ids = sorted((set(self.registry.live_chunk_ids_for_kb(kb)) - delete_set) | set(upserts))
            self.store.create_collection(collection, self.embedder.dimension)
            embedded = self._upsert(collection, ids, snapshot_id)
            return embedded, len(ids), ids
        assert active is not None
        states = self.registry.chunk_states(list(upserts) + list(deletes))
        expected = (
            self.registry.count_live(kb)
            + sum(1 for u in upserts if states.get(u) != "live")
            - sum(1 for d in deletes if states.get(d) == "live")
        )
        self.store.create_collection(collection, self.embedder.dimension, clone_from=active.collection)
        embedded = self._upsert(collection, upserts, snapshot_id)
        self.store.delete(collection, list(deletes))
        return embedded, expected, list(upserts)

    def _upsert(self, collection: str, ids: Sequence[str], snapshot_id: str, batch: int = 1000) -> int:
        embedded = 0
        for i in range(0, len(ids), batch):
            rows = self.registry.chunk_rows(ids[i : i + batch])
            vectors = self.registry.cached_vectors(self.embedder.model_id, [r.content_hash for r in rows])
            missing = [r for r in rows if r.content_hash not in vectors]
            if missing:
                # Only a model change (or a wiped cache) gets here: fill the
                # cache so the next build reuses these vectors.
                fresh = self.embedder.embed([embed_text(r.heading_path, r.text) for r in missing])
                new = {r.content_hash: fresh[n] for n, r in enumerate(missing)}
                self.registry.cache_vectors(self.embedder.model_id, new)
                vectors.update(new)
                embedded += len(missing)
            self.store.upsert(
                collection,
                [PointRecord(id=r.id, vector=np.asarray(vectors[r.content_hash]).tolist(),
                             payload=point_payload(r, snapshot_id)) for r in rows],
            )
        self.store.flush(collection)
        return embedded

    def _verify(self, collection: str, expected: int, written: Sequence[str], deletes: Sequence[str]) -> dict[str, Any]:
        """Checks before the swap.  What passing proves: the version holds
        exactly as many points as the registry says should be live, the sampled
        written points carry the registry's text hash and ACL, and the sampled
        removed chunks are gone.  It does not prove every unsampled payload is
        right or that retrieval quality is unchanged (canary queries do that)."""
        count = self.store.count(collection)
        checks: dict[str, Any] = {"point_count": count, "expected_count": expected}
        if count != expected:
            raise _Held("count", f"{collection} holds {count} points, the registry expects {expected}", checks)
        rng = random.Random(collection)
        sample = rng.sample(list(written), min(self.verify_sample, len(written)))
        if sample:
            rows = {r.id: r for r in self.registry.chunk_rows(sample)}
            points = {p.id: p for p in self.store.retrieve(collection, sample)}
            bad = []
            for cid in sample:
                p, r = points.get(cid), rows.get(cid)
                if p is None or r is None:
                    bad.append((cid, "missing"))
                elif p.payload.get("content_hash") != r.content_hash:
                    bad.append((cid, "content_hash"))
                elif list(p.payload.get("acl", [])) != list(r.acl):
                    bad.append((cid, "acl"))
                elif not p.payload.get("snapshot_id"):
                    bad.append((cid, "snapshot_id"))
            checks["sampled"] = len(sample)
            if bad:
                raise _Held("sample", f"{len(bad)} of {len(sample)} sampled points disagree with the registry: "
                                      f"{bad[:5]}", checks)
        gone = rng.sample(list(deletes), min(self.verify_sample, len(deletes)))
        if gone:
            still = self.store.retrieve(collection, gone)
            checks["removed_sampled"] = len(gone)
            if still:
                raise _Held("tombstones", f"{len(still)} removed chunks are still in {collection}", checks)
        return checks

    def _fail(self, kb: str, snapshot_id: str, collection: str, active: SnapshotInfo | None, exc: FreshIndexError,
              started: float) -> BuildResult:
        check = exc.check if isinstance(exc, _Held) else type(exc).__name__
        details = exc.checks if isinstance(exc, _Held) else {}
        self.registry.fail_snapshot(snapshot_id, str(exc), details)
        self.metrics.builds.labels(kb, "failed").inc()
        self.metrics.verification_failures.labels(kb, check).inc()
        try:
            self.store.drop_collection(collection)
        except FreshIndexError:
            log.warning("could not drop failed collection %s", collection, exc_info=True)
        log.error("build held", extra={"event": "build_failed", "kb": kb, "snapshot": snapshot_id,
                                       "check": check, "reason": str(exc)})
        return BuildResult(
            kb=kb, status="failed", snapshot_id=active.id if active else None, previous_id=active.id if active else None,
            seconds=time.perf_counter() - started, reason=str(exc), verification=details,
        )

    def _reconcile(self, kb: str) -> None:
        """Finish the record of a swap whose builder died right after swapping."""
        target = self.store.get_alias(self.naming.alias(kb))
        if target is None:
            return
        snap = self.registry.snapshot_for_collection(target)
        if snap is not None and snap.status == "verified":
            ops = self.registry.changeset_ops(list(snap.changeset_ids))
            self.registry.activate_snapshot(snap.id, ops=ops, actor="reconcile",
                                            reason="alias already swapped; completing the record")
            log.warning("reconciled %s: alias pointed at it but the registry had not recorded it", snap.id)

    def _retain(self, kb: str) -> None:
        """Keep the newest ``keep_versions`` built collections, never the active one."""
        snaps = [s for s in self.registry.list_snapshots(kb) if s.status in ("active", "retired")]
        for s in snaps[self.keep_versions:]:
            if s.status == "active":
                continue
            self.store.drop_collection(s.collection)
            self.registry.set_snapshot_status(s.id, "pruned")


class _Held(VerificationError):
    def __init__(self, check: str, message: str, checks: dict[str, Any]) -> None:
        super().__init__(message)
        self.check = check
        self.checks = {**checks, "failed_check": check, "reason": message}


def point_payload(row: ChunkRow, snapshot_id: str) -> dict[str, Any]:
    """The payload of a point: enough to cite and filter without the registry."""
    return {
        "chunk_id": row.id,
        "document_id": row.document_id,
        "source_id": row.source_id,
        "kb": row.kb,
        "key": row.key,
        "title": row.title,
        "heading_path": list(row.heading_path),
        "anchor": row.anchor,
        "page": row.page,
        "kind": row.kind,
        "text": row.text,
        "content_hash": row.content_hash,
        "doc_version": row.doc_version,
        "acl": list(row.acl),
        "snapshot_id": snapshot_id,
        "meta": row.meta,
    }

