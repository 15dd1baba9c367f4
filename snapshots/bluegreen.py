"""Blue/green builds: recycle a retained version (the standby) instead of copying the active one.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from freshindex.core.enums import SERVING_SNAPSHOTS, ChunkState, SnapshotStatus
from freshindex.core.errors import FreshIndexError, StoreBusyError
from freshindex.registry import SnapshotInfo
from freshindex.snapshots.builder_base import BuilderBase
from freshindex.snapshots.lineage import lineage_path
from freshindex.vectorstore.base import ReaderTracking, Renames

log = logging.getLogger("freshindex.build")


@dataclass(frozen=True)
class Recycle:
    """A planned blue/green build: ``side`` owns the collection to recycle, which holds ``base``
    (plus, for a side a dead builder left, whatever of ``replay`` it applied)."""

    side: SnapshotInfo
    base: SnapshotInfo
    replay: tuple[int, ...]


class BlueGreen(BuilderBase):
    """Plans, takes and settles recycled sides (a mixin of :class:`snapshots.builder.Builder`)."""

    #: How the builder waits for readers to close the standby (tests replace it).
    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def _plan_recycle(self, kb: str, active: SnapshotInfo) -> Recycle | None:
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
            path = lineage_path(by_id, base, active) if base is not None else None
            if base is not None and path is not None:
                replay = {c for p in path for c in p.changeset_ids} | set(side.get("replay") or ())
                if not self._side_free(kb, s):
                    return None
                return Recycle(side=s, base=base, replay=tuple(sorted(replay)))
            log.warning("dropping standby %s: it cannot be replayed up to %s", s.collection, active.id)
            self.store.drop_collection(s.collection)
        serving = [s for s in snaps if s.status in SERVING_SNAPSHOTS and s.collection in existing]
        if len(serving) < self.keep_versions:
            return None  # the ring is not full yet: this build copies
        # The active version's parent may go (with blue/green it is the standby):
        # after this build the active version is the new one's parent.
        for s in reversed(serving):  # oldest first
            path = lineage_path(by_id, s, active) if s.id != active.id else None
            if path is not None:
                if not self._side_free(kb, s):
                    return None
                return Recycle(side=s, base=s, replay=tuple(sorted({c for p in path for c in p.changeset_ids})))
        return None

    def _take_side(self, kb: str, plan: Recycle, snapshot_id: str, collection: str, staged: Sequence[int],
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
                self.observer.standby_busy(kb, side.collection)
                return False
            self.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return True

    def _replay_set(self, plan: Recycle, active: SnapshotInfo, staged: set[str]) -> tuple[list[str], list[str]]:
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

__all__ = ["BlueGreen", "Recycle"]
