"""Build a new collection version from staged changesets, verify it, swap it in.

The order of a build, under the knowledge base's writer lock:

1. reconcile: finish the record of a swap whose builder died right after
   swapping; fail versions left half-built by a builder that died (drop
   them, or keep a recycled one as the standby to repair, see below);
2. take every ``staged`` changeset and resolve the final operation per chunk;
3. write the new collection, one of three ways (``BuildResult.strategy``):

   * *full*: every live chunk written afresh (the first build, a changed
     embedding model or pipeline, or on request), into a new collection
     beside the live one;
   * *incremental* (``snapshots.strategy = "copy"``, and ``bluegreen`` while
     fewer than ``keep_versions`` versions exist): a sparse copy of the active
     collection plus the changes.  Cost: the whole collection (21 MB per 10k
     chunks on Qdrant Edge, a snapshot and recover on a server);
   * *bluegreen*: recycle a retained version (the standby) and replay onto it
     what it has not seen.  Cost: proportional to the change;

4. verify it (see :meth:`Builder.verify_collection`), then release its handle
   so reader processes can open it;
5. swap the alias, then record the snapshot as active in one registry
   transaction guarded by the lock's fencing token.

A failure before step 5 leaves the alias where it was: the last good
snapshot keeps serving and the changesets stay staged for the next build.

Blue/green (a ring of ``keep_versions`` physical collections; with
``keep_versions = 2`` exactly blue and green).  Once the ring is full, a
build takes the oldest retained version other than the active one (with
two, the active one's parent: the standby), and:

a. records in the registry (:meth:`record_side`) the side it is about to
   modify: its ``base`` (the snapshot whose exact state the collection
   holds) and the changesets it will replay, then marks the base
   ``pruned`` (it will no longer hold that version);
b. renames the collection to the new version's name (Qdrant Edge: one
   directory rename; collection names are never reused);
c. replays: every chunk any changeset on the lineage path between base and
   the active snapshot touched (both ways through their common ancestor, so
   rollbacks are covered) is written as the active version holds it, which
   the registry's chunk state says without opening the active collection
   (``live``: rewritten from the registry row and the vector cache; else
   deleted), then the staged operations.  Writing a chunk's final state is
   idempotent, so a partial replay can be replayed again;
d. verifies and swaps as above.  The version that served until now becomes
   the standby that the next build recycles (with ``keep_versions = 2``).

A builder SIGKILLed at any step: before (b) nothing was modified (the
rename is completed by the next reconcile if the base was already marked
pruned, before it fails the dead version's record; when a reader still
holds the base the rename is refused and the base, untouched, is made
``retired`` again instead); after (b) the collection is kept, marked failed with its side
record, and the next build repairs it by replaying from ``base`` again
(plus everything the dead attempt may have applied) instead of copying or
rebuilding.  A recycled side that fails verification is dropped; the next
build copies the active one (the ring refills).  A lineage path that crosses
a full build (model change) cannot be replayed: that build copies.

Readers (Qdrant Edge is in-process per reader, the old objection to
recycling).  Measured: closing, even dropping, an Edge shard writes its
trackers back into the files it mapped, so a reader that still had a
version open when a builder modified it would corrupt it on close.  Hence
every handle holds a shared ``flock`` on ``<collection>/.readers.lock``
(:meth:`EdgeStore.in_use`); a reader lets go of a version on its first query
after the alias moved away.  The builder recycles a side only when no handle
in any process has it open: it waits up to ``reader_grace`` seconds, then
copies the active version instead (``freshindex_standby_busy_total``), so an
idle reader costs a copy, never a torn version.  The rename takes the lock
exclusively, so no reader opens the side while it changes; one that resolved
the alias before the swaps finds the directory gone and resolves it again,
and :meth:`EdgeStore.search` re-checks the directory after each query.

Rollback reaches, instantly (an alias swap, no copy), every retained version
(``keep_versions - 1`` versions behind the active one, with blue/green the
previous version, which the standby holds until the next build recycles
it); older ones are restored from their archive (:meth:`SnapshotOps.restore`,
a full import), since the ring has reused their collection.  Disk: one full
copy per retained version either way; blue/green stops paying a full copy
per *build*.  A store that is not :class:`vectorstore.base.Renames` (the Qdrant server path
unless ``vector_store.server_renames`` makes version names aliases) builds
``incremental`` under either setting.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from freshindex.core.enums import SERVING_SNAPSHOTS, BuildStatus, ChunkState, SnapshotStatus
from freshindex.core.errors import ConfigError, FreshIndexError, StoreBusyError, VerificationError
from freshindex.core.naming import Naming
from freshindex.core.payload import PayloadError, PointPayload
from freshindex.core.types import Embedder, embed_text
from freshindex.core.vector_cache import vectors_for
from freshindex.health.metrics import Metrics
from freshindex.registry import ChunkRow, SnapshotInfo
from freshindex.registry.protocols import BuilderRegistry
from freshindex.snapshots.lock import WriterLock
from freshindex.vectorstore.base import PointRecord, ReaderTracking, Renames, VectorStore
from freshindex.vectorstore.lexical import lexical_text

log = logging.getLogger("freshindex.build")

#: Called with the name of each phase as the build reaches it (tests and tracing).
PhaseHook = Callable[[str], None]


@dataclass(frozen=True)
class BuildResult:
    kb: str
    status: BuildStatus  # built | unchanged | failed
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


@dataclass(frozen=True)
class _Recycle:
    """A planned blue/green build: ``side`` owns the collection to recycle, which holds ``base``
    (plus, for a side a dead builder left, whatever of ``replay`` it applied)."""

    side: SnapshotInfo
    base: SnapshotInfo
    replay: tuple[int, ...]


class Builder:
    """Builds snapshots of knowledge bases into a :class:`VectorStore`."""

    #: How the builder waits for readers to close the standby (tests replace it).
    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def __init__(
        self,
        registry: BuilderRegistry,
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
        on_phase: PhaseHook | None = None,
        strategy: str = "bluegreen",
        reader_grace: float = 5.0,
        calibrate: Callable[[str, str], dict[str, Any]] | None = None,
        calibration_refit_share: float = 0.1,
    ) -> None:
        self.registry, self.store, self.embedder, self.metrics = registry, store, embedder, metrics
        self.naming = naming
        self.lock_ttl, self.lock_wait = lock_ttl, lock_wait
        self.verify_sample = verify_sample
        self.keep_versions = max(2, keep_versions)
        self.pipeline_version = pipeline_version
        self.on_phase = on_phase
        if strategy not in ("copy", "bluegreen"):
            raise ValueError(f"unknown build strategy {strategy!r} (copy or bluegreen)")
        self.strategy, self.reader_grace = strategy, reader_grace
        # (collection, snapshot id) -> the refusal calibration of a verified version (injection.calibration)
        self.calibrate = calibrate
        self.calibration_refit_share = calibration_refit_share

    def _inherited_calibration(self, active: SnapshotInfo | None, strategy: str,
                               changed: int) -> dict[str, Any] | None:
        """The parent's refusal calibration, when this build changed too little to move it; else None (refit).

        A calibration costs seconds per thousand sampled questions, which a
        release update touching a few chunks should not pay on every build.
        The parent's record carries on while the points changed since it was
        fitted (summed over inheriting builds) stay under
        ``calibration_refit_share`` of the collection; a full build (a new
        model or pipeline) always refits. What this does not guarantee: that
        the inherited bias is the one a refit would give, only that at most
        that share of the collection differs from the one it was fitted on.
        """
        if self.calibrate is None or active is None or strategy == "full":
            return None
        prior = (active.verification or {}).get("calibration")
        if not isinstance(prior, dict) or prior.get("status") != "calibrated":
            return None
        since = int(prior.get("changed_since", 0)) + changed
        if since > self.calibration_refit_share * max(active.point_count, 1):
            return None
        return {**prior, "changed_since": since, "inherited_from": prior.get("inherited_from") or active.id}

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)

    def lock(self, kb: str) -> WriterLock:
        return WriterLock(self.registry, f"build:{kb}", ttl=self.lock_ttl, wait=self.lock_wait)

    def build(self, kb: str, *, actor: str = "cli", reason: str = "sync", full: bool = False) -> BuildResult:
        started = time.perf_counter()
        with self.lock(kb) as lock:
            self._phase("locked")
            self.reconcile(kb)
            active = self.registry.active_snapshot(kb)
            changesets = self.registry.staged_changesets(kb)
            # A switched embedding model rebuilds in full even with nothing staged: the alias must
            # never serve vectors of a model other than the one that embeds the questions.
            if not changesets and active is not None and not full and active.embedding_model == self.embedder.model_id:
                return BuildResult(kb=kb, status=BuildStatus.UNCHANGED, snapshot_id=active.id, previous_id=active.id)
            ops = self.registry.changeset_ops(changesets)
            strategy = "incremental"
            if (full or active is None or active.embedding_model != self.embedder.model_id
                    or active.parser_version != self.pipeline_version):
                strategy = "full"
            plan = None
            if strategy == "incremental" and self.strategy == "bluegreen" and active is not None:
                plan = self._plan_recycle(kb, active)
                if plan is not None:
                    strategy = "bluegreen"
            if strategy != "full":
                assert active is not None
                self._check_dimensions(plan.side.collection if plan is not None else active.collection)
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
                if plan is not None:
                    assert active is not None
                    self._take_side(kb, plan, snapshot_id, collection, changesets, active)
                embedded, expected, written, removed = self._write(kb, collection, strategy, active, upserts,
                                                                   deletes, snapshot_id, plan)
                self._phase("written")
                verification = self.verify_collection(kb, collection, expected=expected, written=written,
                                                      deletes=removed, full_scan=strategy == "full")
                if plan is not None:
                    verification["replayed"] = len(set(written) | set(removed)) - len(ops)
            except FreshIndexError as exc:
                return self._fail(kb, snapshot_id, collection, active, exc, started)
            inherited = self._inherited_calibration(active, strategy, len(upserts) + len(deletes))
            if inherited is not None:
                verification["calibration"] = inherited
            elif self.calibrate is not None:
                self._phase("calibrating")
                try:
                    verification["calibration"] = self.calibrate(collection, snapshot_id)
                except Exception as exc:  # a version that verified still serves, with the shipped refusal bias
                    log.warning("refusal calibration of %s failed: %s", snapshot_id, exc, exc_info=True)
                    verification["calibration"] = {"status": "failed", "bias": None, "error": str(exc)[:300]}
            seconds = time.perf_counter() - started
            self.registry.mark_verified(snapshot_id, point_count=verification["point_count"],
                                        verification=verification, seconds=seconds)
            self._phase("verified")
            # Let go of the new version before readers are pointed at it.
            self.store.release(collection)
            previous = self.store.swap_alias(self.naming.alias(kb), collection)
            self._phase("swapped")
            self.registry.activate_snapshot(snapshot_id, ops=ops, actor=actor, reason=reason,
                                            lock=(lock.name, lock.token or 0))
            self.metrics.alias_swaps.labels(kb).inc()
            self.metrics.builds.labels(kb, BuildStatus.BUILT).inc()
            self.metrics.build_seconds.labels(kb).observe(seconds)
            self.retain(kb)
            log.info("snapshot active", extra={"event": "snapshot_active", "kb": kb, "snapshot": snapshot_id,
                                               "previous_collection": previous, "seconds": round(seconds, 3)})
            return BuildResult(
                kb=kb, status=BuildStatus.BUILT, snapshot_id=snapshot_id, previous_id=active.id if active else None,
                strategy=strategy, upserts=len(upserts), deletes=len(deletes),
                point_count=verification["point_count"], vectors_embedded=embedded, seconds=seconds,
                verification=verification,
            )

    # -- steps ----------------------------------------------------------------

    def _check_dimensions(self, collection: str) -> None:
        """A build that writes into an existing collection (a copy or a recycled side) needs it to hold
        vectors of the model's size: a :class:`ConfigError` before anything is created or written.

        A changed model id already makes the build full (a new collection of the
        model's size); this catches a model whose id stayed while its size did not,
        or a collection made elsewhere.  Stores without ``vector_size`` are not checked."""
        size_of = getattr(self.store, "vector_size", None)
        if not callable(size_of):
            return
        size, dim = size_of(collection), self.embedder.dimension
        if size != dim:
            raise ConfigError(
                f"collection {collection} holds {size}-dimensional vectors but the embedding model "
                f"{self.embedder.model_id} makes {dim}-dimensional ones: nothing was written; fix "
                "embedding.dimensions or rebuild in full (freshindex snapshots build --full)")

    def _write(self, kb: str, collection: str, strategy: str, active: SnapshotInfo | None,
               upserts: Sequence[str], deletes: Sequence[str], snapshot_id: str,
               plan: _Recycle | None = None) -> tuple[int, int, list[str], list[str]]:
        """Write the new version; returns (vectors embedded, expected count, ids written, ids removed)."""
        delete_set = set(deletes)
        if strategy == "full":
            ids = sorted((set(self.registry.live_chunk_ids_for_kb(kb)) - delete_set) | set(upserts))
            self.store.create_collection(collection, self.embedder.dimension)
            embedded = self._upsert(collection, ids, snapshot_id)
            self.store.flush(collection)
            self._optimize(kb, collection)
            return embedded, len(ids), ids, list(deletes)
        assert active is not None
        states = self.registry.chunk_states(list(upserts) + list(deletes))
        expected = (
            self.registry.count_live(kb)
            + sum(1 for u in upserts if states.get(u) != "live")
            - sum(1 for d in deletes if states.get(d) == "live")
        )
        written, removed = list(upserts), list(deletes)
        if plan is None:
            self.store.create_collection(collection, self.embedder.dimension, clone_from=active.collection)
        else:
            again, gone = self._replay_set(plan, active, set(upserts) | delete_set)
            written, removed = sorted(set(upserts) | set(again)), sorted(delete_set | set(gone))
        embedded = self._upsert(collection, written, snapshot_id)
        self.store.delete(collection, removed)
        self.store.flush(collection)
        self._optimize(kb, collection)
        return embedded, expected, written, removed

    def _optimize(self, kb: str, collection: str) -> None:
        """Build the new version's search structures before it is verified and served.

        Every full build is optimised, so a copy or a recycled side starts
        optimised and pays only for what this build wrote (0.4 s after 500
        upserts at 100k; a full 100k build about 70 s on 2 busy cores, and
        queries 5-10x faster after it, ``bench/results/query.md``).  Small
        collections are left as written by the engine (a cheap no-op).  A
        failure is logged, not fatal: an unoptimised version answers the same
        hits, only slower.
        """
        self._phase("optimize")
        t0 = time.perf_counter()
        try:
            changed = self.store.optimize(collection)
        except FreshIndexError as exc:
            log.warning("optimize failed; the version serves unoptimised",
                        extra={"event": "optimize_failed", "kb": kb, "collection": collection, "error": str(exc)})
            return
        log.info("optimized", extra={"event": "optimized", "kb": kb, "collection": collection, "changed": changed,
                                     "seconds": round(time.perf_counter() - t0, 3)})

    # -- blue/green -------------------------------------------------------------

    def _plan_recycle(self, kb: str, active: SnapshotInfo) -> _Recycle | None:
        """The side a blue/green build recycles, or None to copy the active version.

        First a side a dead builder left (repair by replay); then, once
        ``keep_versions`` versions are retained, the oldest one but the
        active version."""
        if not isinstance(self.store, Renames):
            return None
        snaps = self.registry.list_snapshots(kb)  # newest first
        by_id = {s.id: s for s in snaps}
        existing = set(self.store.list_collections())
        for s in snaps:
            side = s.verification.get("side") or {}
            if s.status != SnapshotStatus.FAILED or s.strategy != "bluegreen" or s.collection not in existing:
                continue
            base = by_id.get(side.get("base", ""))
            path = _lineage_path(by_id, base, active) if base is not None else None
            if base is not None and path is not None:
                replay = {c for p in path for c in p.changeset_ids} | set(side.get("replay") or ())
                if not self._side_free(kb, s):
                    return None
                return _Recycle(side=s, base=base, replay=tuple(sorted(replay)))
            log.warning("dropping standby %s: it cannot be replayed up to %s", s.collection, active.id)
            self.store.drop_collection(s.collection)
        serving = [s for s in snaps if s.status in SERVING_SNAPSHOTS and s.collection in existing]
        if len(serving) < self.keep_versions:
            return None  # the ring is not full yet: this build copies
        # The active version's parent may go (with blue/green it is the standby):
        # after this build the active version is the new one's parent.
        for s in reversed(serving):  # oldest first
            path = _lineage_path(by_id, s, active) if s.id != active.id else None
            if path is not None:
                if not self._side_free(kb, s):
                    return None
                return _Recycle(side=s, base=s, replay=tuple(sorted({c for p in path for c in p.changeset_ids})))
        return None

    def _take_side(self, kb: str, plan: _Recycle, snapshot_id: str, collection: str, staged: Sequence[int],
                   active: SnapshotInfo) -> None:
        """Record, retire and rename the side (steps a and b of the module doc)."""
        self.registry.record_side(snapshot_id, {"base": plan.base.id, "from": plan.side.id,
                                                "replay": sorted(set(plan.replay) | set(staged))})
        if plan.side.status in SERVING_SNAPSHOTS:
            self.registry.set_snapshot_status(plan.side.id, SnapshotStatus.PRUNED)
        self._phase("recycling")
        assert isinstance(self.store, Renames), "a side is recycled only on a store that renames (_plan_recycle)"
        try:
            self.store.rename_collection(plan.side.collection, collection)
        except FreshIndexError:
            if plan.side.status in SERVING_SNAPSHOTS:  # untouched: it still holds its version
                self.registry.set_snapshot_status(plan.side.id, plan.side.status)
            raise
        self._phase("recycled")
        log.info("recycling %s as %s", plan.side.collection, collection,
                 extra={"event": "standby_recycled", "kb": kb, "snapshot": snapshot_id, "base": plan.base.id,
                        "active": active.id, "changesets": len(plan.replay)})

    def _side_free(self, kb: str, side: SnapshotInfo) -> bool:
        """Whether no handle (in any reader process) has ``side`` open, waiting up to
        ``reader_grace`` seconds for readers to let go (they do on their next
        query once the alias moved)."""
        if not isinstance(self.store, ReaderTracking):
            return True
        deadline = time.monotonic() + self.reader_grace
        while self.store.in_use(side.collection):
            if time.monotonic() >= deadline:
                self.metrics.standby_busy.labels(kb).inc()
                log.warning("a reader still has %s open: copying the active version instead of recycling it",
                            side.collection, extra={"event": "standby_busy", "kb": kb})
                return False
            self.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return True

    def _replay_set(self, plan: _Recycle, active: SnapshotInfo, staged: set[str]) -> tuple[list[str], list[str]]:
        """Chunks the recycled side must take from the active version: (rewrite, delete).

        Every chunk the replayed changesets touched and no staged operation
        decides, set to what the active version holds.  The registry says
        what that is: a chunk is ``live`` exactly when it is in the active
        version (``activate_snapshot`` and rollback set the states under this
        lock, and staging only moves a chunk between the two states outside
        it).  Asking the registry, not the active collection, spares opening
        the active shard for a lookup (most of a small build's time at 1M
        chunks, ``bench/results/scale.md``).  Should the two ever disagree,
        the side follows the registry, which is what verification checks.
        """
        touched = sorted(self.registry.changeset_chunk_ids(list(plan.replay)) - staged)
        states = self.registry.chunk_states(touched)
        live = [c for c in touched if states.get(c) == ChunkState.LIVE]
        return live, [c for c in touched if states.get(c) != ChunkState.LIVE]

    def _upsert(self, collection: str, ids: Sequence[str], snapshot_id: str, batch: int = 1000) -> int:
        embedded = 0
        for i in range(0, len(ids), batch):
            rows = self.registry.chunk_rows(ids[i : i + batch])
            # Only a model change (or a wiped cache) embeds here: the pipeline
            # filled the cache; the same rule refills it for the next build.
            result = vectors_for({r.content_hash: embed_text(r.heading_path, r.text, title=r.title) for r in rows},
                                 self.embedder, self.registry)
            embedded += result.embedded
            self.store.upsert(
                collection,
                [PointRecord(id=r.id, vector=np.asarray(result.vectors[r.content_hash]).tolist(),
                             payload=point_payload(r, snapshot_id).to_dict(),
                             lexical=lexical_text(text=r.text, title=r.title, heading_path=r.heading_path, key=r.key,
                                                  meta=r.meta))
                 for r in rows],
            )
        self.store.flush(collection)
        return embedded

    def verify_collection(self, kb: str, collection: str, *, expected: int, written: Sequence[str] = (),
                          deletes: Sequence[str] = (), full_scan: bool = False) -> dict[str, Any]:
        """Checks before a swap; raises :class:`VerificationError` naming the failed check.

        * count: the collection holds exactly the number of points the
          registry says should be live;
        * written: every point this build wrote is there with the registry's
          content hash (all of them, the cost grows with the change);
        * sample: a sample of written points carries the registry's snapshot
          id, ACL and source;
        * removed: every chunk this build removed is gone;
        * orphans (full builds and ``snapshots verify``): the ids in the
          collection are exactly the registry's live ids, both ways;
        * canaries: each canary question of the knowledge base finds its
          expected document in the top results.

        What passing does not prove: that unsampled payload fields of points
        carried over from the parent are right (the parent passed the same
        checks when it was built), or that answers got better.
        """
        self._phase("verifying")
        count = self.store.count(collection)
        checks: dict[str, Any] = {"point_count": count, "expected_count": expected}
        if count != expected:
            raise _Held("count", f"{collection} holds {count} points, the registry expects {expected}", checks)
        rows = {r.id: r for r in self.registry.chunk_rows(list(written))} if written else {}
        if written:
            points = {}
            for i in range(0, len(written), 1000):
                points.update({p.id: p for p in self.store.retrieve(collection, written[i : i + 1000])})
            missing = [cid for cid in written if cid not in points]
            payloads = {cid: _read_payload(p.payload) for cid, p in points.items()}
            wrong = [cid for cid in written if cid in points and cid in rows
                     and ((pl := payloads[cid]) is None or pl.content_hash != rows[cid].content_hash)]
            checks["written_checked"] = len(written)
            if missing or wrong:
                raise _Held("written", f"{len(missing)} written points missing and {len(wrong)} with the wrong "
                                       f"content hash in {collection} (e.g. {(missing + wrong)[:3]})", checks)
            rng = random.Random(collection)
            sample = rng.sample(list(written), min(self.verify_sample, len(written)))
            bad = []
            for cid in sample:
                p, r = payloads[cid], rows.get(cid)
                if r is None:
                    bad.append((cid, "no registry row"))
                elif p is None:
                    bad.append((cid, "payload"))
                elif p.acl != tuple(r.acl):
                    bad.append((cid, "acl"))
                elif p.tenant != r.tenant or p.acl_version != r.acl_version:
                    bad.append((cid, "acl_version"))
                elif p.source_id != r.source_id or p.document_id != r.document_id:
                    bad.append((cid, "source"))
                elif not p.snapshot_id:
                    bad.append((cid, "snapshot_id"))
            checks["sampled"] = len(sample)
            if bad:
                raise _Held("sample", f"{len(bad)} of {len(sample)} sampled points disagree with the registry: "
                                      f"{bad[:3]}", checks)
        if deletes:
            still = []
            for i in range(0, len(deletes), 1000):
                still.extend(self.store.retrieve(collection, deletes[i : i + 1000]))
            checks["removed_checked"] = len(deletes)
            if still:
                raise _Held("removed", f"{len(still)} removed chunks are still in {collection}", checks)
        if full_scan:
            in_store = set(self.store.iter_ids(collection))
            live = set(self.registry.live_chunk_ids_for_kb(kb)) | set(written)
            live -= set(deletes)
            orphans, absent = in_store - live, live - in_store
            checks["orphans"], checks["absent"] = len(orphans), len(absent)
            if orphans or absent:
                raise _Held("orphans", f"{len(orphans)} points without a live registry row and {len(absent)} live "
                                       f"chunks missing from {collection}", checks)
        self._run_canaries(kb, collection, checks)
        return checks

    def _run_canaries(self, kb: str, collection: str, checks: dict[str, Any]) -> None:
        canaries = self.registry.list_canaries(kb)
        if not canaries:
            return
        vectors = self.embedder.embed([c.question for c in canaries])
        failed = []
        for canary, vector in zip(canaries, vectors, strict=True):
            hits = self.store.search(collection, vector.tolist(), limit=canary.top_k)
            if not any((p := _read_payload(h.payload)) is not None and p.key == canary.expected_key for h in hits):
                failed.append(canary.question)
        checks["canaries"] = {"run": len(canaries), "failed": failed}
        if failed:
            raise _Held("canary", f"{len(failed)} of {len(canaries)} canary queries missed their document: "
                                  f"{failed[:3]}", checks)

    def _fail(self, kb: str, snapshot_id: str, collection: str, active: SnapshotInfo | None, exc: FreshIndexError,
              started: float) -> BuildResult:
        check = exc.check if isinstance(exc, _Held) else type(exc).__name__
        details = exc.checks if isinstance(exc, _Held) else {"reason": str(exc)}
        self.registry.fail_snapshot(snapshot_id, str(exc), details)
        self.metrics.builds.labels(kb, BuildStatus.FAILED).inc()
        self.metrics.verification_failures.labels(kb, check).inc()
        try:
            self.store.drop_collection(collection)
        except FreshIndexError:
            log.warning("could not drop failed collection %s", collection, exc_info=True)
        log.error("build held", extra={"event": "build_failed", "kb": kb, "snapshot": snapshot_id,
                                       "check": check, "reason": str(exc)})
        return BuildResult(
            kb=kb, status=BuildStatus.FAILED, snapshot_id=active.id if active else None, previous_id=active.id if active else None,
            seconds=time.perf_counter() - started, reason=str(exc), verification=details,
        )

    def reconcile(self, kb: str) -> None:
        """Repair what a builder that died mid-build left behind (needs the lock).

        * the alias points at a ``verified`` snapshot: the builder swapped and
          died before recording it; finish the record;
        * any other ``building`` or ``verified`` snapshot never served: mark it
          failed and drop its collection, so nothing half-built lingers.
        """
        target = self.store.get_alias(self.naming.alias(kb))
        for snap in self.registry.abandoned_snapshots(kb):
            if snap.collection == target and snap.status == SnapshotStatus.VERIFIED:
                ops = self.registry.changeset_ops(list(snap.changeset_ids))
                self.registry.activate_snapshot(snap.id, ops=ops, actor="reconcile",
                                                reason="alias already swapped; completing the record")
                log.warning("reconciled %s: the alias pointed at it but the registry had not recorded it", snap.id)
                continue
            # Settle the side before failing the record: a reconcile killed in
            # between then finds the version still abandoned and settles again.
            settled = snap.strategy == "bluegreen" and self._settle_side(snap)
            self.registry.fail_snapshot(snap.id, f"abandoned while {snap.status}: its builder died",
                                        {"failed_check": "abandoned"})
            self.metrics.builds.labels(kb, "abandoned").inc()
            if settled and self.strategy == "bluegreen":
                log.warning("kept %s, abandoned while %s, as the standby: the next build replays it from %s",
                            snap.collection, snap.status, (snap.verification.get("side") or {}).get("base"))
                continue
            self.store.drop_collection(snap.collection)
            log.warning("dropped %s, abandoned while %s", snap.id, snap.status)
        self._settle_failed_sides(kb)
        if self.strategy != "bluegreen":
            existing = set(self.store.list_collections())
            for snap in self.registry.list_snapshots(kb):  # standbys kept for repair, strategy since changed
                if snap.status == SnapshotStatus.FAILED and snap.strategy == "bluegreen" and snap.collection in existing:
                    self.store.drop_collection(snap.collection)

    def _settle_failed_sides(self, kb: str) -> None:
        """Settle failed sides whose rename was never completed: the rename was busy, or a
        reconcile (of a release that failed the record first) died before it."""
        snaps = self.registry.list_snapshots(kb)
        by_id = {s.id: s for s in snaps}
        existing = set(self.store.list_collections())
        for snap in snaps:
            origin = by_id.get((snap.verification.get("side") or {}).get("from", ""))
            if (snap.status == SnapshotStatus.FAILED and snap.strategy == "bluegreen" and origin is not None
                    and snap.collection not in existing and origin.status == SnapshotStatus.PRUNED
                    and origin.collection in existing):
                self._settle_side(snap)

    def _settle_side(self, snap: SnapshotInfo) -> bool:
        """Finish the rename of a recycled side whose builder died between pruning its
        base and renaming it; True when ``snap``'s collection now exists as a standby.

        The origin's collection was not modified before the rename, so when
        the rename cannot be completed (a reader in another process has it
        open: :class:`StoreBusyError`; or the strategy is no longer
        blue/green) the origin is made ``retired`` again: it still holds its
        version exactly, so it serves as a retained version (rollback, the
        next recycle) instead of lingering ``pruned`` on disk, where no build
        would ever recycle or drop it.  What this does not check: that the
        origin's files are intact beyond its point count.
        """
        side = snap.verification.get("side") or {}
        existing = set(self.store.list_collections())
        if snap.collection in existing:
            return True
        try:
            origin = self.registry.get_snapshot(side.get("from", ""))
        except FreshIndexError:
            return False
        if origin.status != SnapshotStatus.PRUNED or origin.collection not in existing:
            return False  # the base was never touched: it still serves as a retained version
        if self.strategy == "bluegreen" and isinstance(self.store, Renames):
            try:
                self.store.rename_collection(origin.collection, snap.collection)
                return True
            except StoreBusyError as exc:
                log.warning("could not settle %s as %s (%s): %s serves as a retained version again",
                            origin.collection, snap.collection, exc, origin.id,
                            extra={"event": "standby_unsettled", "kb": snap.kb, "snapshot": snap.id})
        try:
            intact = self.store.count(origin.collection) == origin.point_count
        except FreshIndexError:
            intact = False
        finally:
            self.store.release(origin.collection)
        if intact:
            self.registry.set_snapshot_status(origin.id, SnapshotStatus.RETIRED)
        else:
            log.warning("dropping %s: it does not hold the %d points of %s", origin.collection, origin.point_count,
                        origin.id)
            self.store.drop_collection(origin.collection)
        return False

    def retain(self, kb: str) -> list[str]:
        """Keep the newest ``keep_versions`` built versions; never the active one
        or its parent.  Returns the pruned snapshot ids."""
        snaps = [s for s in self.registry.list_snapshots(kb) if s.status in SERVING_SNAPSHOTS]
        active = next((s for s in snaps if s.status == SnapshotStatus.ACTIVE), None)
        protected = {active.id, active.parent_id} if active else set()
        keep = [s.id for s in snaps if s.id in protected]
        for s in snaps:
            if len(keep) >= self.keep_versions:
                break
            if s.id not in keep:
                keep.append(s.id)
        pruned = []
        for s in snaps:
            if s.id in keep:
                continue
            self.store.drop_collection(s.collection)
            self.registry.set_snapshot_status(s.id, SnapshotStatus.PRUNED)
            pruned.append(s.id)
        return pruned


def tree_path(by_id: dict[str, SnapshotInfo], a: SnapshotInfo,
              b: SnapshotInfo) -> tuple[list[SnapshotInfo], list[SnapshotInfo]] | None:
    """The snapshots from ``a`` and from ``b`` up to their common ancestor in the
    parent tree (each list nearest first, the ancestor left out), or None when
    they share none.  Their changesets are every chunk that can differ between
    the two versions: ``a``'s side undone, then ``b``'s side applied."""

    def chain(s: SnapshotInfo | None) -> list[SnapshotInfo]:
        out: list[SnapshotInfo] = []
        while s is not None and s.id not in {o.id for o in out}:
            out.append(s)
            s = by_id.get(s.parent_id) if s.parent_id else None
        return out

    up_a, up_b = chain(a), chain(b)
    ids_b = [s.id for s in up_b]
    common = next((s for s in up_a if s.id in ids_b), None)
    if common is None:
        return None
    return up_a[: up_a.index(common)], up_b[: ids_b.index(common.id)]


def _lineage_path(by_id: dict[str, SnapshotInfo], a: SnapshotInfo, b: SnapshotInfo) -> list[SnapshotInfo] | None:
    """The snapshots between ``a`` and ``b`` in the parent tree (:func:`tree_path`,
    both sides): their changesets are every difference between the two
    collections.  None when there is no common ancestor or a full build (new
    model or pipeline: every vector differs) lies on the path."""
    sides = tree_path(by_id, a, b)
    if sides is None:
        return None
    path = sides[0] + sides[1]
    if any(s.strategy == "full" for s in path):
        return None
    return path


class _Held(VerificationError):
    def __init__(self, check: str, message: str, checks: dict[str, Any]) -> None:
        super().__init__(message)
        self.check = check
        self.checks = {**checks, "failed_check": check, "reason": message}


def _read_payload(payload: dict[str, Any]) -> PointPayload | None:
    """A stored payload read back, or None when it is not one the builder wrote."""
    try:
        return PointPayload.from_dict(payload)
    except PayloadError:
        return None


def point_payload(row: ChunkRow, snapshot_id: str) -> PointPayload:
    """The payload of the point for ``row`` as written by ``snapshot_id`` (see :class:`core.payload.PointPayload`)."""
    return PointPayload(
        chunk_id=row.id, document_id=row.document_id, source_id=row.source_id, kb=row.kb, key=row.key,
        title=row.title, heading_path=tuple(row.heading_path), anchor=row.anchor, page=row.page, kind=row.kind,
        text=row.text, content_hash=row.content_hash, doc_version=row.doc_version, acl=tuple(row.acl),
        snapshot_id=snapshot_id, meta=row.meta, tenant=row.tenant, acl_version=row.acl_version,
        sensitivity=row.sensitivity, page_end=max(row.meta.get("pages") or [0]) or None,
        ocr_confidence=row.meta.get("ocr_confidence"),
    )


__all__ = ["BuildResult", "Builder", "PhaseHook", "point_payload"]
