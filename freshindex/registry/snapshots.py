"""Snapshot records: build, verify, activate, realign (swap, rollback), and canaries.

The registry records which snapshot serves; it does not move the vector
store's alias (the caller does, before or after, as :mod:`snapshots.lifecycle`
documents).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from freshindex.core.enums import (
    FINAL_TOMBSTONE_REASONS,
    ChangesetStatus,
    ChunkState,
    DocumentState,
    SnapshotStatus,
    TombstoneReason,
)
from freshindex.core.errors import NotFoundError, RetryableError
from freshindex.core.ids import validate_kb_name
from freshindex.registry.audit import record_alias_move
from freshindex.registry.base import _Base, _batches, _snap_info
from freshindex.registry.db import affected_rows
from freshindex.registry.records import CanaryInfo, NewSnapshot, SnapshotInfo
from freshindex.registry.schema import (
    Canary,
    Changeset,
    ChangesetEntry,
    Chunk,
    Document,
    Lock,
    Snapshot,
    Tombstone,
    utcnow,
)


class SnapshotStore(_Base):
    """Create and move snapshot records; keep the canaries that gate a swap."""

    def next_snapshot_version(self, kb: str) -> int:
        with self.session() as s:
            return (s.scalar(select(func.max(Snapshot.version)).where(Snapshot.kb == kb)) or 0) + 1

    def create_snapshot(self, new: NewSnapshot) -> SnapshotInfo:
        with self.session() as s:
            row = Snapshot(
                id=new.snapshot_id, kb=new.kb, version=new.version, parent_id=new.parent_id,
                collection=new.collection, status=SnapshotStatus.BUILDING,
                strategy=new.strategy, embedding_model=new.embedding_model, parser_version=new.parser_version,
                changeset_ids=list(new.changeset_ids), upserts=new.upserts, deletes=new.deletes,
            )
            s.add(row)
            s.flush()
            return _snap_info(row)

    def fail_snapshot(self, snapshot_id: str, reason: str, verification: dict[str, Any] | None = None) -> None:
        with self.session() as s:
            s.execute(
                update(Snapshot)
                .where(Snapshot.id == snapshot_id)
                .values(status=SnapshotStatus.FAILED, failure_reason=reason,
                        verification=_keep_side(s, snapshot_id, verification or {}))
            )

    def mark_verified(self, snapshot_id: str, *, point_count: int, verification: dict[str, Any], seconds: float) -> None:
        with self.session() as s:
            s.execute(
                update(Snapshot)
                .where(Snapshot.id == snapshot_id)
                .values(status=SnapshotStatus.VERIFIED, point_count=point_count,
                        verification=_keep_side(s, snapshot_id, verification), build_seconds=seconds)
            )

    def record_side(self, snapshot_id: str, side: dict[str, Any]) -> None:
        """Record what the physical collection of ``snapshot_id`` holds while it is built.

        The blue/green builder writes this before it renames and modifies a
        recycled collection: ``{"base": <the snapshot whose exact state the
        collection held>, "replay": [changeset ids being applied]}``.  It
        stays in ``verification["side"]`` through :meth:`mark_verified` and
        :meth:`fail_snapshot`, so a builder killed at any step leaves a
        collection the next build can repair by replaying from ``base``.
        """
        with self.session() as s:
            row = s.get(Snapshot, snapshot_id)
            if row is None:
                raise NotFoundError(f"no snapshot {snapshot_id!r}")
            row.verification = {**dict(row.verification or {}), "side": dict(side)}

    def record_calibration(self, snapshot_id: str, calibration: dict[str, Any]) -> None:
        """Keep ``calibration`` (:mod:`injection.calibration`) in ``verification["calibration"]`` of ``snapshot_id``.

        The builder writes it with the rest of the verification; this is for a
        snapshot calibrated after it was built (``freshindex snapshots calibrate``).
        """
        with self.session() as s:
            row = s.get(Snapshot, snapshot_id)
            if row is None:
                raise NotFoundError(f"no snapshot {snapshot_id!r}")
            row.verification = {**dict(row.verification or {}), "calibration": dict(calibration)}

    def snapshot_calibration(self, snapshot_id: str) -> dict[str, Any] | None:
        """The refusal calibration recorded for ``snapshot_id``; None for none (or no such snapshot)."""
        with self.session() as s:
            verification = s.scalar(select(Snapshot.verification).where(Snapshot.id == snapshot_id)) or {}
            found = verification.get("calibration")
            return dict(found) if isinstance(found, dict) else None

    def activate_snapshot(
        self, snapshot_id: str, *, ops: dict[str, str], actor: str, reason: str, lock: tuple[str, int] | None = None,
    ) -> None:
        """Record that ``snapshot_id`` serves: one transaction for every state flip.

        With ``lock`` (name, fencing token) the transaction first checks the
        lock is still ours; a builder whose lease expired and was taken over
        must not overwrite the newer builder's record.
        """
        now = utcnow()
        with self.session() as s:
            if lock is not None:
                holder = s.get(Lock, lock[0])
                if holder is None or holder.token != lock[1]:
                    raise RetryableError(f"lost the writer lock {lock[0]} (fencing token {lock[1]} is stale)")
            snap = s.get(Snapshot, snapshot_id)
            if snap is None:
                raise NotFoundError(f"no snapshot {snapshot_id}")
            previous = _retire_active(s, snap.kb, keep=snapshot_id)
            upserts = [cid for cid, op in ops.items() if op == "upsert"]
            deletes = [cid for cid, op in ops.items() if op == "delete"]
            for batch in _batches(upserts):
                # snapshot_id records the build that last wrote the point.
                s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(state=ChunkState.LIVE, snapshot_id=snapshot_id))
            for batch in _batches(deletes):
                s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(state=ChunkState.REMOVED))
            cs_ids = list(snap.changeset_ids or [])
            if cs_ids:
                s.execute(
                    update(Changeset)
                    .where(Changeset.id.in_(cs_ids))
                    .values(status=ChangesetStatus.APPLIED, applied_at=now, snapshot_id=snapshot_id)
                )
                s.execute(
                    update(Tombstone)
                    .where(Tombstone.changeset_id.in_(cs_ids), Tombstone.applied_snapshot_id.is_(None))
                    .values(applied_snapshot_id=snapshot_id)
                )
            record_alias_move(s, snap.kb, previous[0].id if previous else None, snapshot_id, actor=actor, reason=reason)
            snap.status, snap.activated_at = SnapshotStatus.ACTIVE, now

    def get_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        with self.session() as s:
            row = s.get(Snapshot, snapshot_id)
            if row is None:
                raise NotFoundError(f"no snapshot {snapshot_id!r}")
            return _snap_info(row)

    def active_snapshot(self, kb: str) -> SnapshotInfo | None:
        with self.session() as s:
            row = s.scalars(select(Snapshot).where(Snapshot.kb == kb, Snapshot.status == SnapshotStatus.ACTIVE)).first()
            return _snap_info(row) if row is not None else None

    def list_snapshots(self, kb: str | None = None) -> list[SnapshotInfo]:
        with self.session() as s:
            q = select(Snapshot).order_by(Snapshot.kb, Snapshot.version.desc())
            if kb is not None:
                q = q.where(Snapshot.kb == kb)
            return [_snap_info(r) for r in s.scalars(q)]

    def set_snapshot_status(self, snapshot_id: str, status: str) -> None:
        with self.session() as s:
            s.execute(update(Snapshot).where(Snapshot.id == snapshot_id).values(status=status))

    def set_archive(self, snapshot_id: str, uri: str, sha256: str) -> None:
        with self.session() as s:
            s.execute(update(Snapshot).where(Snapshot.id == snapshot_id).values(archive_uri=uri, archive_sha256=sha256))

    def abandoned_snapshots(self, kb: str) -> list[SnapshotInfo]:
        """Snapshots left ``building`` or ``verified`` by a builder that died.

        Only meaningful while holding the knowledge base's writer lock: then
        no other builder can be working on them.
        """
        with self.session() as s:
            unfinished = (SnapshotStatus.BUILDING, SnapshotStatus.VERIFIED)
            q = select(Snapshot).where(Snapshot.kb == kb, Snapshot.status.in_(unfinished))
            return [_snap_info(r) for r in s.scalars(q)]

    def realign_to_snapshot(
        self, target_id: str, *, present: set[str], touched: set[str], changesets_reverted: Sequence[int],
        changesets_reapplied: Sequence[int], actor: str, reason: str,
    ) -> int:
        """Make the registry describe ``target_id`` as the serving snapshot.

        Returns how many chunks the target holds that stay withheld: chunks
        of documents deleted since (or whose tombstone is otherwise final)
        are never made servable by a swap; they stay tombstoned, so the query
        path drops them, and are staged for deletion by the next build.

        Used by swap and rollback.  ``touched`` are the chunks whose state may
        differ between the current and the target snapshot, ``present`` those
        of them the target collection holds.  Present chunks become live and
        servable again; absent ones removed and tombstoned.  The documents
        they belong to lose their etag and content hash, so the next sync
        compares them with the source afresh instead of trusting a record of
        a version that no longer serves.
        """
        now = utcnow()
        with self.session() as s:
            target = s.get(Snapshot, target_id)
            if target is None:
                raise NotFoundError(f"no snapshot {target_id!r}")
            current = _retire_active(s, target.kb, keep=target_id)
            ids = sorted(touched)
            docs: set[str] = set()
            withheld: dict[str, tuple[str, str, str]] = {}  # chunk id -> (document, source, reason)
            for batch in _batches(ids):
                docs.update(s.scalars(select(Chunk.document_id).where(Chunk.id.in_(batch))))
                live = [i for i in batch if i in present]
                gone = [i for i in batch if i not in present]
                if gone:
                    # A pending chunk (an upsert staged, not yet built) is in neither version:
                    # it stays pending and servable once built; tombstoning it here would hide
                    # the point the next build writes.
                    pending = set(s.scalars(select(Chunk.id).where(Chunk.id.in_(gone),
                                                                   Chunk.state == ChunkState.PENDING)))
                    gone = [i for i in gone if i not in pending]
                final = self._final_tombstones(s, live)
                withheld.update(final)
                live = [i for i in live if i not in final]
                if live:
                    s.execute(update(Chunk).where(Chunk.id.in_(live)).values(state=ChunkState.LIVE, tombstoned=False))
                if final:
                    # Physically in the target collection, never servable again:
                    # tombstoned (the query path drops them at once) and staged for
                    # deletion, so the next build removes the points.
                    s.execute(update(Chunk).where(Chunk.id.in_(list(final))).values(state=ChunkState.LIVE, tombstoned=True))
                if gone:
                    s.execute(update(Chunk).where(Chunk.id.in_(gone)).values(state=ChunkState.REMOVED, tombstoned=True))
            # A document deleted at its source stays deleted: only documents that
            # still exist are re-compared with the source on the next sync.
            for batch in _batches(sorted(docs)):
                s.execute(
                    update(Document)
                    .where(Document.id.in_(batch), Document.state != DocumentState.DELETED)
                    .values(etag=None, content_hash=None)
                )
            if withheld:
                self._stage_withheld(s, target.kb, withheld)
            if changesets_reverted:
                s.execute(update(Changeset).where(Changeset.id.in_(list(changesets_reverted)))
                          .values(status=ChangesetStatus.ROLLED_BACK))
            if changesets_reapplied:
                s.execute(update(Changeset).where(Changeset.id.in_(list(changesets_reapplied)))
                          .values(status=ChangesetStatus.APPLIED, applied_at=now))
            record_alias_move(s, target.kb, current[0].id if current else None, target_id, actor=actor, reason=reason)
            target.status, target.activated_at = SnapshotStatus.ACTIVE, now
            return len(withheld)

    def _final_tombstones(self, s: Session, ids: Sequence[str]) -> dict[str, tuple[str, str, str]]:
        """Of ``ids``, the chunks a rollback must not bring back, with their document, source and reason.

        Those of documents deleted at their source, and those whose newest
        tombstone is final (deleted, expired, revoked).  A ``superseded``
        chunk of a live document comes back: it is the older version of text
        that still exists, which is what a rollback is for.
        """
        if not ids:
            return {}
        rows = s.execute(
            select(Chunk.id, Chunk.document_id, Chunk.source_id, Chunk.tombstoned, Document.state)
            .join(Document, Document.id == Chunk.document_id)
            .where(Chunk.id.in_(list(ids)))
        ).all()
        tombstoned = [r.id for r in rows if r.tombstoned]
        newest: dict[str, str] = {}
        if tombstoned:
            for cid, reason in s.execute(
                select(Tombstone.chunk_id, Tombstone.reason).where(Tombstone.chunk_id.in_(tombstoned))
                .order_by(Tombstone.id)
            ):
                newest[cid] = reason
        out: dict[str, tuple[str, str, str]] = {}
        for r in rows:
            if r.state == DocumentState.DELETED:
                out[r.id] = (r.document_id, r.source_id, TombstoneReason.DELETED)
            elif r.tombstoned and newest.get(r.id) in FINAL_TOMBSTONE_REASONS:
                out[r.id] = (r.document_id, r.source_id, newest[r.id])
        return out

    def _stage_withheld(self, s: Session, kb: str, withheld: dict[str, tuple[str, str, str]]) -> None:
        """Stage deletes (and keep tombstones) for chunks a rollback brought back physically."""
        by_source: dict[str, list[str]] = {}
        for cid, (_doc, source_id, _reason) in withheld.items():
            by_source.setdefault(source_id, []).append(cid)
        for source_id, chunk_ids in sorted(by_source.items()):
            cs = Changeset(kb=kb, source_id=source_id, sync_run_id=None, status=ChangesetStatus.STAGED, staged_at=utcnow())
            s.add(cs)
            s.flush()
            for cid in sorted(chunk_ids):
                doc_id, _src, reason = withheld[cid]
                s.add(ChangesetEntry(changeset_id=cs.id, chunk_id=cid, document_id=doc_id, op="delete"))
                s.add(Tombstone(chunk_id=cid, document_id=doc_id, kb=kb, reason=reason, changeset_id=cs.id))

    def set_snapshot_active(self, snapshot_id: str, *, actor: str, reason: str) -> None:
        """Activate a snapshot whose chunk states are already right (restore)."""
        with self.session() as s:
            snap = s.get(Snapshot, snapshot_id)
            if snap is None:
                raise NotFoundError(f"no snapshot {snapshot_id!r}")
            previous = _retire_active(s, snap.kb, keep=snapshot_id)
            record_alias_move(s, snap.kb, previous[0].id if previous else None, snapshot_id, actor=actor, reason=reason)
            snap.status, snap.activated_at = SnapshotStatus.ACTIVE, utcnow()

    def add_canary(self, kb: str, question: str, expected_key: str, top_k: int = 5) -> CanaryInfo:
        validate_kb_name(kb)
        with self.session() as s:
            row = s.scalars(select(Canary).where(Canary.kb == kb, Canary.question == question)).first()
            if row is None:
                row = Canary(kb=kb, question=question)
                s.add(row)
            row.expected_key, row.top_k = expected_key, top_k
            s.flush()
            return CanaryInfo(row.id, row.kb, row.question, row.expected_key, row.top_k)

    def list_canaries(self, kb: str | None = None) -> list[CanaryInfo]:
        with self.session() as s:
            q = select(Canary).order_by(Canary.id)
            if kb is not None:
                q = q.where(Canary.kb == kb)
            return [CanaryInfo(r.id, r.kb, r.question, r.expected_key, r.top_k) for r in s.scalars(q)]

    def remove_canary(self, canary_id: int) -> None:
        with self.session() as s:
            if affected_rows(s.execute(delete(Canary).where(Canary.id == canary_id))) == 0:
                raise NotFoundError(f"no canary {canary_id}")


def _keep_side(s: Session, snapshot_id: str, verification: dict[str, Any]) -> dict[str, Any]:
    """``verification`` with the ``side`` record :meth:`SnapshotStore.record_side` wrote, if any."""
    current = s.scalar(select(Snapshot.verification).where(Snapshot.id == snapshot_id)) or {}
    if "side" in current and "side" not in verification:
        return {**verification, "side": current["side"]}
    return verification


def _retire_active(s: Session, kb: str, *, keep: str) -> list[Snapshot]:
    """Retire every active snapshot of ``kb`` but ``keep``; returns the ones that were active (``keep`` too)."""
    active = list(s.scalars(select(Snapshot).where(Snapshot.kb == kb, Snapshot.status == SnapshotStatus.ACTIVE)))
    for snap in active:
        if snap.id != keep:
            snap.status = SnapshotStatus.RETIRED
    return active
