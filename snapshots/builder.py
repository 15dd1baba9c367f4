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

Blue/green recycling of a retained version is :mod:`snapshots.bluegreen`
(its docstring: the ring, crash repair, readers, rollback and disk); the
checks before a swap are :mod:`snapshots.verify`; where two versions meet in
the parent tree is :mod:`snapshots.lineage`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from freshindex.core.enums import SERVING_SNAPSHOTS, BuildStatus, SnapshotStatus
from freshindex.core.errors import ConfigError, FreshIndexError
from freshindex.core.memory import trim_heap
from freshindex.core.naming import Naming
from freshindex.core.payload import PointPayload, served_meta
from freshindex.core.types import Embedder, Releasable, embed_text
from freshindex.core.vector_cache import vectors_for
from freshindex.health.metrics import Metrics
from freshindex.health.observer import MetricsObserver, SyncObserver
from freshindex.registry import ChunkRow, NewSnapshot, SnapshotInfo
from freshindex.registry.protocols import BuilderRegistry
from freshindex.snapshots.bluegreen import BlueGreen, Recycle
from freshindex.snapshots.builder_base import PhaseHook
from freshindex.snapshots.lock import WriterLock
from freshindex.snapshots.sparse_ahead import Pending, SparseAhead
from freshindex.snapshots.verify import Held, Verification
from freshindex.vectorstore.base import PointRecord, VectorStore
from freshindex.vectorstore.lexical import lexical_text

log = logging.getLogger("freshindex.build")


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


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """How a :class:`Builder` builds (the ``snapshots`` settings' values) and what it calls back.

    ``lock_ttl``/``lock_wait``: the writer lock's lease and how long to wait for it; ``verify_sample``: points
    compared with the registry before a swap; ``keep_versions``: built versions kept (at least 2);
    ``pipeline_version``: recorded on each snapshot (a change makes the next build a full one);
    ``strategy``: ``bluegreen`` or ``copy``; ``reader_grace``: seconds readers of a recycled collection get;
    ``calibrate``: (collection, snapshot id) -> its refusal calibration, None: not calibrated;
    ``calibration_refit_share``: the share of changed chunks above which a parent's calibration is refitted
    (negative: never inherited); ``calibration_fits``: whether a record was fitted for the serving refusal
    weights; ``on_phase``: hears each phase's name (tests); ``observer``: hears the build's events (None: one
    writing into the builder's metrics).
    """

    naming: Naming = field(default_factory=Naming)
    lock_ttl: float = 120.0
    lock_wait: float = 0.0
    verify_sample: int = 64
    keep_versions: int = 3
    pipeline_version: str = ""
    on_phase: PhaseHook | None = None
    strategy: str = "bluegreen"
    reader_grace: float = 5.0
    calibrate: Callable[[str, str], dict[str, Any]] | None = None
    calibration_refit_share: float = 0.1
    calibration_fits: Callable[[Any], bool] | None = None
    observer: SyncObserver | None = None


class Builder(BlueGreen, Verification):
    """Builds snapshots of knowledge bases into a :class:`VectorStore`.

    The build itself (clone, apply, full write, swap, retain) is here; blue/green
    recycling comes from :class:`snapshots.bluegreen.BlueGreen`, the checks before
    a swap from :class:`snapshots.verify.Verification`."""

    #: Worker processes computing sparse vectors ahead (:class:`snapshots.sparse_ahead.SparseAhead`);
    #: None: one on a large build with a second core, 0: none.
    sparse_processes: int | None = None

    def __init__(self, registry: BuilderRegistry, store: VectorStore, embedder: Embedder, metrics: Metrics,
                 options: BuildOptions | None = None) -> None:
        o = options or BuildOptions()
        self.registry, self.store, self.embedder, self.metrics = registry, store, embedder, metrics
        # Hears the build's events (metrics and log lines are written there); by default into ``metrics``.
        self.observer = o.observer if o.observer is not None else MetricsObserver(metrics)
        self.naming = o.naming
        self.lock_ttl, self.lock_wait = o.lock_ttl, o.lock_wait
        self.verify_sample = o.verify_sample
        self.keep_versions = max(2, o.keep_versions)
        self.pipeline_version = o.pipeline_version
        self.on_phase = o.on_phase
        if o.strategy not in ("copy", "bluegreen"):
            raise ValueError(f"unknown build strategy {o.strategy!r} (copy or bluegreen)")
        self.strategy, self.reader_grace = o.strategy, o.reader_grace
        # (collection, snapshot id) -> the refusal calibration of a verified version (injection.calibration)
        self.calibrate = o.calibrate
        self.calibration_refit_share = o.calibration_refit_share
        # whether a calibration record was fitted for the serving refusal weights (RefusalPolicy.fits)
        self.calibration_fits = o.calibration_fits

    def _inherited_calibration(self, active: SnapshotInfo | None, strategy: str,
                               changed: int) -> dict[str, Any] | None:
        """The parent's refusal calibration, when this build changed too little to move it; else None (refit).

        A calibration costs seconds per thousand sampled questions, which a
        release update touching a few chunks should not pay on every build.
        The parent's record carries on while the points changed since it was
        fitted (summed over inheriting builds) stay under
        ``calibration_refit_share`` of the collection and it was fitted for
        the same refusal weights; a full build (a new model or pipeline)
        always refits. What this does not guarantee: that
        the inherited bias is the one a refit would give, only that at most
        that share of the collection differs from the one it was fitted on.
        """
        if self.calibrate is None or active is None or strategy == "full":
            return None
        prior = (active.verification or {}).get("calibration")
        if not isinstance(prior, dict) or prior.get("status") != "calibrated":
            return None
        if self.calibration_fits is not None and not self.calibration_fits(prior.get("policy")):
            return None  # fitted for other refusal weights: its bias is no threshold of these
        since = int(prior.get("changed_since", 0)) + changed
        if since > self.calibration_refit_share * max(active.point_count, 1):
            return None
        return {**prior, "changed_since": since, "inherited_from": prior.get("inherited_from") or active.id}


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
            self._let_go_of_model()
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
            self.registry.create_snapshot(NewSnapshot(
                snapshot_id=snapshot_id, kb=kb, version=version, parent_id=active.id if active else None,
                collection=collection, strategy=strategy, embedding_model=self.embedder.model_id,
                parser_version=self.pipeline_version, changeset_ids=changesets, upserts=len(upserts),
                deletes=len(deletes),
            ))
            self.observer.build_started(kb, snapshot_id, strategy, len(upserts), len(deletes))
            try:
                if plan is not None:
                    assert active is not None
                    self._take_side(kb, plan, snapshot_id, collection, changesets, active)
                embedded, expected, written, removed = self._write(kb, collection, strategy, active, upserts,
                                                                   deletes, snapshot_id, plan)
                self._phase("written")
                trim_heap()  # the batches' freed pages, before verification and calibration allocate their own
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
            if revisions := self.registry.source_revisions(kb):  # cited for every chunk of those sources
                verification["revisions"] = revisions
            seconds = time.perf_counter() - started
            self.registry.mark_verified(snapshot_id, point_count=verification["point_count"],
                                        verification=verification, seconds=seconds)
            self._phase("verified")
            # Let go of the new version before readers are pointed at it.
            self.store.release(collection)
            trim_heap()  # the closed shard's memory: otherwise the next sync's build starts on top of it
            previous = self.store.swap_alias(self.naming.alias(kb), collection)
            self._phase("swapped")
            self.registry.activate_snapshot(snapshot_id, ops=ops, actor=actor, reason=reason,
                                            lock=(lock.name, lock.token or 0))
            self.observer.swapped(kb)
            self.observer.build_finished(kb, snapshot_id, previous, seconds)
            self.retain(kb)
            return BuildResult(
                kb=kb, status=BuildStatus.BUILT, snapshot_id=snapshot_id, previous_id=active.id if active else None,
                strategy=strategy, upserts=len(upserts), deletes=len(deletes),
                point_count=verification["point_count"], vectors_embedded=embedded, seconds=seconds,
                verification=verification,
            )

    # -- steps ----------------------------------------------------------------

    def _let_go_of_model(self) -> None:
        """Unload the embedding model (:class:`Releasable`) and return the heap's free pages before the store work.

        Writing and optimising a collection needs no model unless the cache
        misses (a model switch), and the verification's canaries and the
        refusal calibration load it again (0.2 s for the bundled one).  Without
        this, a process that embeds and builds held the model's 230 MB beside
        the engine's optimisation: a full build of a 1,167-page manual peaked
        at 677 MB (``bench/results/throughput.md``).
        """
        released = False
        if isinstance(self.embedder, Releasable):
            self.embedder.release()
            released = True
        log.debug("model let go before the store work", extra={"event": "model_released", "released": released,
                                                               "heap_trimmed": trim_heap()})

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
               plan: Recycle | None = None) -> tuple[int, int, list[str], list[str]]:
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

    def _upsert(self, collection: str, ids: Sequence[str], snapshot_id: str, batch: int = 1000) -> int:
        """Write the points of ``ids``, ``batch`` at a time; returns how many vectors were embedded.

        The next batch's rows are read and its sparse vectors started in a worker process
        (:mod:`snapshots.sparse_ahead`) before this batch's points are made and written, so on a large build
        the tokenizing runs on another core beside the engine's writes; the points are the same either way.
        """
        embedded = 0
        batches = [ids[i : i + batch] for i in range(0, len(ids), batch)]
        with SparseAhead(len(ids), processes=self.sparse_processes) as sparse:
            ahead = self._read_ahead(batches[0], sparse) if batches else None
            for n in range(len(batches)):
                assert ahead is not None
                rows, texts, pending = ahead
                ahead = self._read_ahead(batches[n + 1], sparse) if n + 1 < len(batches) else None
                # Only a model change (or a wiped cache) embeds here: the pipeline
                # filled the cache; the same rule refills it for the next build.
                result = vectors_for({r.content_hash: embed_text(r.heading_path, r.text, title=r.title) for r in rows},
                                     self.embedder, self.registry)
                embedded += result.embedded
                self.store.upsert(
                    collection,
                    [PointRecord(id=r.id, vector=np.asarray(result.vectors[r.content_hash]).tolist(),
                                 payload=point_payload(r, snapshot_id).to_dict(), lexical=text, sparse=sv)
                     for r, text, sv in zip(rows, texts, pending.vectors(), strict=True)],
                )
        self.store.flush(collection)
        return embedded

    def _read_ahead(self, ids: Sequence[str], sparse: SparseAhead) -> tuple[list[ChunkRow], list[str], Pending]:
        """The rows of ``ids``, their lexical texts, and their sparse vectors under way."""
        rows = self.registry.chunk_rows(ids)
        texts = [lexical_text(text=r.text, title=r.title, heading_path=r.heading_path, key=r.key, meta=r.meta)
                 for r in rows]
        return rows, texts, sparse.submit(texts)

    def _fail(self, kb: str, snapshot_id: str, collection: str, active: SnapshotInfo | None, exc: FreshIndexError,
              started: float) -> BuildResult:
        check = exc.check if isinstance(exc, Held) else type(exc).__name__
        details = exc.checks if isinstance(exc, Held) else {"reason": str(exc)}
        # The space first (the version and any temporary copy of it): on a full disk the registry write
        # below may fail too, and the next build's reconcile then finds the record still `building`.
        try:
            self.store.drop_collection(collection)
        except FreshIndexError:
            log.warning("could not drop failed collection %s", collection, exc_info=True)
        self.registry.fail_snapshot(snapshot_id, str(exc), details)
        self.observer.build_failed(kb, snapshot_id, check, str(exc))
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
            self.observer.build_abandoned(kb)
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


def point_payload(row: ChunkRow, snapshot_id: str) -> PointPayload:
    """The payload of the point for ``row`` as written by ``snapshot_id`` (see :class:`core.payload.PointPayload`)."""
    return PointPayload(
        chunk_id=row.id, document_id=row.document_id, source_id=row.source_id, kb=row.kb, key=row.key,
        title=row.title, heading_path=tuple(row.heading_path), anchor=row.anchor, page=row.page, kind=row.kind,
        text=row.text, content_hash=row.content_hash, doc_version=row.doc_version, acl=tuple(row.acl),
        snapshot_id=snapshot_id, meta=served_meta(row.meta), tenant=row.tenant, acl_version=row.acl_version,
        sensitivity=row.sensitivity, page_end=max(row.meta.get("pages") or [0]) or None,
        ocr_confidence=row.meta.get("ocr_confidence"),
    )


__all__ = ["BuildOptions", "BuildResult", "Builder", "PhaseHook", "point_payload"]
