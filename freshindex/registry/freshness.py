"""Freshness in the registry: source policies, pause/resume/remove, stale labels, withdrawals, lag.

A source's *freshness* is read from its run history: it was last *verified*
when a run last listed it (a run that ended ``succeeded``, ``partial`` or
``held``: the listing worked, so every listed document was compared with the
source), and it is *stale* when its latest run could not list it
(unreachable) or its last verification is older than ``stale_after_s``.
A stale source keeps serving what its last good snapshot holds; the query
path labels that evidence with ``last_verified_at``
(:meth:`FreshnessStore.source_freshness`).

*Withdrawal* takes a document out of retrieval before any build: its chunks
are tombstoned at once (the query path drops tombstoned hits) and their
deletion is staged in a run-less changeset, so the next build removes the
points.  Three reasons (:data:`registry.withdrawals.WithdrawReason`):

* ``expired``: its ``valid_until`` has passed;
* ``unverified``: its source has not been verified for ``hard_expiry_s``
  (the document could have changed or vanished without us knowing).  Its
  etag and content hash are forgotten, so the first sync that reaches the
  source again re-reads and re-serves it;
* ``superseded``: a document that names it in ``supersedes`` has become
  valid (its ``valid_from``, or when it was first seen).

What it does not guarantee: that a withdrawal happens the moment a time
passes: the sweep runs on beat (``freshindex.sweep_freshness``), so between
the deadline and the next sweep :meth:`chunk_status` reports
``expired``/``superseded`` for the query path to drop the hit itself.

Canonical documents and mirrors (identical content indexed once) are
:mod:`registry.twins`; the withdrawal write itself is :mod:`registry.withdrawals`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from freshindex.core.clock import as_utc
from freshindex.core.enums import ChangesetStatus, ChunkState, DocumentState, RunStatus
from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.registry.base import _batches
from freshindex.registry.db import affected_rows, plain_rows
from freshindex.registry.schema import (
    Changeset,
    ChangesetEntry,
    Chunk,
    Document,
    Snapshot,
    Source,
    SyncRun,
    Tombstone,
    utcnow,
)
from freshindex.registry.twins import refresh_mirrors
from freshindex.registry.withdrawals import WithdrawalStore, Withdrawn, WithdrawReason

#: Runs whose listing worked: the source was reachable and every listed document compared.
VERIFIED_RUNS = (RunStatus.SUCCEEDED, RunStatus.PARTIAL, RunStatus.HELD)

_UNSET: Any = object()


@dataclass(frozen=True)
class SourceFreshness:
    """One source's freshness policy and state (``freshindex sources show``, health, the query label)."""

    source_id: str
    kb: str
    paused: bool
    removed: bool
    poll_interval_s: int | None
    stale_after_s: int | None
    hard_expiry_s: int | None
    last_verified_at: dt.datetime | None
    last_successful_sync_at: dt.datetime | None
    last_error: str | None
    #: Unreachable (latest run failed) or not verified within ``stale_after_s``.
    stale: bool
    #: Why it is stale: ``unreachable`` or ``unverified`` (None when fresh).
    stale_reason: str | None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for k in ("last_verified_at", "last_successful_sync_at"):
            data[k] = data[k].isoformat() if data[k] is not None else None
        return data



@dataclass(frozen=True)
class Provenance:
    """Where a document came from and when it is valid: :meth:`FreshnessStore.record_provenance`'s fields."""

    source_uri: str | None = None
    source_version: str | None = None
    valid_from: dt.datetime | None = None
    valid_until: dt.datetime | None = None
    supersedes: str | None = None
    fetched_at: dt.datetime | None = None
    error: str | None = None


def apply_provenance(s: Session, doc: Document, prov: Provenance) -> None:
    """:meth:`FreshnessStore.record_provenance` on a loaded document, in the caller's transaction
    (``stage_document`` records it with the document's new version)."""
    doc.source_uri, doc.source_version = prov.source_uri or doc.source_uri, prov.source_version
    doc.valid_from, doc.valid_until, doc.supersedes = prov.valid_from, prov.valid_until, prov.supersedes
    doc.last_fetched_at = prov.fetched_at or utcnow()
    doc.last_error = prov.error
    if doc.canonical_id is not None:  # staged with chunks of its own: no longer a mirror
        previous, doc.canonical_id = doc.canonical_id, None
        s.flush()
        refresh_mirrors(s, previous)


class FreshnessStore(WithdrawalStore):
    """Operator controls on sources, freshness state, withdrawals, tombstone GC and sync lag."""

    # -- operator controls -------------------------------------------------------------------

    def _source_row(self, s: Session, source_id: str, *, lock: bool = False) -> Source:
        q = select(Source).where(Source.id == source_id)
        if lock:
            q = self._for_update(q)
        row = s.scalars(q).first()
        if row is None:
            raise NotFoundError(f"no source {source_id!r} (see `freshindex sources list`)")
        return row

    def set_source_paused(self, source_id: str, paused: bool) -> SourceFreshness:
        """Pause (no scheduled polls, webhook tickets wait) or resume a source.

        ``enabled`` follows (the poll planner skips disabled sources); a
        removed source cannot be resumed.  Explicit ``freshindex sync`` still
        runs a paused source: pausing stops automation, not the operator.
        """
        with self.session() as s:
            self._write_lock(s)
            row = self._source_row(s, source_id, lock=True)
            if not paused and row.removed_at is not None:
                raise ConfigError(f"source {source_id!r} was removed; add it again with `freshindex sources add --replace`")
            row.paused, row.enabled = paused, not paused
        return self.source_freshness(source_id=source_id)[0]

    def set_freshness_policy(self, source_id: str, *, poll_interval_s: int | None = _UNSET,
                             stale_after_s: int | None = _UNSET, hard_expiry_s: int | None = _UNSET) -> SourceFreshness:
        """Change a source's poll interval, stale threshold or hard expiry (seconds; None clears one)."""
        with self.session() as s:
            row = self._source_row(s, source_id)
            for name, value in (("poll_interval_s", poll_interval_s), ("stale_after_s", stale_after_s),
                                ("hard_expiry_s", hard_expiry_s)):
                if value is _UNSET:
                    continue
                if value is not None and int(value) <= 0:
                    raise ConfigError(f"{name} must be a positive number of seconds (or unset)")
                setattr(row, name, None if value is None else int(value))
        return self.source_freshness(source_id=source_id)[0]

    def remove_source(self, source_id: str) -> list[Withdrawn]:
        """Withdraw every document of a source and retire it (no polls, no webhooks, no resume).

        Its chunks are tombstoned at once and their deletion staged for the
        next build; the source row and its run history stay for audit.
        Refused while one of its runs is running (pause it and wait, or let
        the reaper close a dead one).
        """
        now = utcnow()
        with self.session() as s:
            self._write_lock(s)
            row = self._source_row(s, source_id, lock=True)
            running = s.scalar(select(SyncRun.id).where(SyncRun.source_id == source_id,
                                                        SyncRun.status == RunStatus.RUNNING).limit(1))
            if running is not None:
                raise ConfigError(f"source {source_id!r} has run {running} running; pause the source and let it "
                                  "finish (or be reaped), then remove it")
            docs = s.scalars(select(Document).where(Document.source_id == source_id,
                                                    Document.state != DocumentState.DELETED)).all()
            out = self._withdraw(s, row, docs, WithdrawReason.REMOVED, now)
            for d in docs:
                d.state, d.deleted_at, d.etag, d.content_hash, d.chunk_count = DocumentState.DELETED, now, None, None, 0
            row.paused, row.enabled, row.removed_at = True, False, now
            return out

    # -- freshness -------------------------------------------------------------------------

    def _verified(self, s: Session, source_ids: Iterable[str] | None = None) -> dict[str, tuple[Any, Any, Any]]:
        """source -> (last verified, last successful sync, latest run's error if it failed).

        One row per source, each figure a correlated subquery over that
        source's runs alone (``ix_sync_runs_source_status_finished`` and
        ``ix_sync_runs_source_id_id``, migration 0011): the cost follows the
        number of sources asked for, not the run history (which was four
        aggregates over every run of every source).
        """
        def last_finished(statuses: Iterable[str]) -> Any:
            return (select(func.max(SyncRun.finished_at))
                    .where(SyncRun.source_id == Source.id, SyncRun.status.in_(list(statuses)))
                    .correlate(Source).scalar_subquery())

        latest = (select(SyncRun.id).where(SyncRun.source_id == Source.id, SyncRun.status != RunStatus.RUNNING)
                  .order_by(SyncRun.id.desc()).limit(1).correlate(Source).scalar_subquery())
        q = select(Source.id, last_finished(VERIFIED_RUNS),
                   last_finished((RunStatus.SUCCEEDED, RunStatus.PARTIAL)), latest)
        if source_ids is not None:
            ids = sorted(set(source_ids))
            if not ids:
                return {}
            q = q.where(Source.id.in_(ids))
        rows = list(plain_rows(s.execute(q)))
        last_ids = {sid: last for sid, _v, _ok, last in rows if last is not None}
        errors: dict[str, str | None] = {}
        if last_ids:
            for sid, status, error in s.execute(select(SyncRun.source_id, SyncRun.status, SyncRun.error)
                                                .where(SyncRun.id.in_(list(last_ids.values())))):
                errors[sid] = (error or "failed") if status == RunStatus.FAILED else None
        out: dict[str, tuple[dt.datetime | None, dt.datetime | None, str | None]] = {
            sid: (v, ok, errors.get(sid)) for sid, v, ok, _last in rows}
        for sid in source_ids or ():  # a source id not (or no longer) in the registry: never verified
            out.setdefault(sid, (None, None, None))
        return out

    def source_freshness(self, kb: str | None = None, *, source_id: str | None = None,
                         now: dt.datetime | None = None) -> list[SourceFreshness]:
        """Freshness of each source (of ``kb``, or one source), computed from its runs now.

        ``stale`` with ``stale_reason`` ``unreachable`` (its latest run could
        not list it; ``last_error`` says why) or ``unverified`` (last verified
        longer than ``stale_after_s`` ago).  A source never verified is not
        stale: it serves nothing yet.
        """
        now = now or utcnow()
        with self.session() as s:
            q = select(Source).order_by(Source.id)
            if kb is not None:
                q = q.where(Source.kb == kb)
            if source_id is not None:
                q = q.where(Source.id == source_id)
            rows = s.scalars(q).all()
            if source_id is not None and not rows:
                raise NotFoundError(f"no source {source_id!r} (see `freshindex sources list`)")
            state = self._verified(s, [r.id for r in rows])
            return [_freshness(r, *state[r.id], now) for r in rows]

    def stale_sources(self, kb: str, now: dt.datetime | None = None) -> dict[str, SourceFreshness]:
        """The stale sources of ``kb`` by id: what the query path labels as stale evidence."""
        return {f.source_id: f for f in self.source_freshness(kb, now=now) if f.stale and not f.removed}

    def refresh_source_freshness(self, now: dt.datetime | None = None) -> list[SourceFreshness]:
        """Write each source's last verified / last successful sync / last error onto its row."""
        now = now or utcnow()
        with self.session() as s:
            rows = s.scalars(select(Source).order_by(Source.id)).all()
            state = self._verified(s, [r.id for r in rows])
            out = []
            for r in rows:
                verified, ok, error = state[r.id]
                r.last_verified_at, r.last_successful_sync_at, r.last_error = verified, ok, error
                out.append(_freshness(r, verified, ok, error, now))
            return out

    def withdraw_due_documents(self, now: dt.datetime | None = None) -> list[Withdrawn]:
        """Withdraw every document past its validity, its source's hard expiry, or superseded.

        One transaction (a writer: SQLite's lock, source rows ``FOR UPDATE``
        on PostgreSQL), so two sweeps never stage a withdrawal twice.  Also
        clears ``withdrawn_reason`` on documents that are servable again (a
        sync re-staged them).
        """
        now = now or utcnow()
        with self.session() as s:
            self._write_lock(s)
            servable = select(Chunk.document_id).where(Chunk.tombstoned.is_(False),
                                                       Chunk.state.in_((ChunkState.LIVE, ChunkState.PENDING)))
            s.execute(update(Document).where(Document.withdrawn_reason.is_not(None), Document.id.in_(servable))
                      .values(withdrawn_reason=None))
            sources = {r.id: r for r in s.scalars(select(Source).where(Source.removed_at.is_(None)))}
            state = self._verified(s, list(sources))
            live = [Document.state != DocumentState.DELETED, Document.withdrawn_reason.is_(None)]
            due: dict[str, dict[WithdrawReason, list[Document]]] = {}

            def add(doc: Document, reason: WithdrawReason) -> None:
                due.setdefault(doc.source_id, {}).setdefault(reason, [])
                if not any(doc is d for group in due[doc.source_id].values() for d in group):
                    due[doc.source_id][reason].append(doc)

            for doc in s.scalars(select(Document).where(*live, Document.valid_until.is_not(None),
                                                        Document.valid_until <= now)):
                if doc.source_id in sources:
                    add(doc, WithdrawReason.EXPIRED)
            for sid, src in sources.items():
                verified = state[sid][0]
                if src.hard_expiry_s and verified is not None and (now - verified).total_seconds() >= src.hard_expiry_s:
                    for doc in s.scalars(select(Document).where(Document.source_id == sid, *live)):
                        add(doc, WithdrawReason.UNVERIFIED)
            newer = s.execute(select(Document.supersedes, Document.source_id, Document.valid_from,
                                     Document.first_seen_at)
                              .where(Document.supersedes.is_not(None), Document.state != DocumentState.DELETED,
                                     Document.withdrawn_reason.is_(None))).all()
            for target, sid, valid_from, first_seen in newer:
                start = valid_from or first_seen
                if start is None or start > now:
                    continue
                old = s.scalars(select(Document).where(
                    *live, (Document.id == target) | ((Document.source_id == sid) & (Document.key == target)))).first()
                if old is not None and old.source_id in sources:
                    add(old, WithdrawReason.SUPERSEDED)
            out: list[Withdrawn] = []
            for sid, by_reason in sorted(due.items()):
                for reason, docs in by_reason.items():
                    out.extend(self._withdraw(s, sources[sid], docs, reason, now))
            return out

    # -- provenance and validity (written by the pipeline) -----------------------------------

    def record_provenance(self, document_id: str, *, source_uri: str | None = None, source_version: str | None = None,
                          valid_from: dt.datetime | None = None, valid_until: dt.datetime | None = None,
                          supersedes: str | None = None, fetched_at: dt.datetime | None = None,
                          error: str | None = None) -> None:
        """Record where a document came from and when it is valid (after each fetch).

        ``supersedes`` is the id or the key (in the same source) of the
        document it replaces.  Validity fields are overwritten each time (a
        document whose front matter lost ``valid_until`` is valid again).
        """
        with self.session() as s:
            doc = s.get(Document, document_id)
            if doc is not None:
                apply_provenance(s, doc, Provenance(
                    source_uri=source_uri, source_version=source_version, valid_from=valid_from,
                    valid_until=valid_until, supersedes=supersedes, fetched_at=fetched_at, error=error))

    def document_provenance(self, document_id: str) -> dict[str, Any] | None:
        with self.session() as s:
            d = s.get(Document, document_id)
            if d is None:
                return None
            iso = lambda t: t.isoformat() if t is not None else None  # noqa: E731
            owner = s.scalar(select(Source.owner).where(Source.id == d.source_id))
            return {"document_id": d.id, "source_id": d.source_id, "key": d.key, "canonical_id": d.canonical_id or d.id,
                    "source_uri": d.source_uri, "mirrors": list(d.mirrors or []), "owner": owner,
                    "content_hash": d.content_hash, "source_version": d.source_version,
                    "valid_from": iso(d.valid_from), "valid_until": iso(d.valid_until), "supersedes": d.supersedes,
                    "last_fetched_at": iso(d.last_fetched_at), "last_error": d.last_error or d.error_detail,
                    "withdrawn_reason": d.withdrawn_reason, "state": d.state}


    # -- reconciliation: registry and index -------------------------------------------------------

    def reconcile_index(self, kb: str, point_ids: Iterable[str]) -> dict[str, Any]:
        """Compare the active collection's point ids with the registry; withdraw the orphans both ways.

        Run it under the knowledge base's writer lock (no build may swap
        meanwhile).  Index orphans (a point whose chunk row is missing, or not
        ``live``, or whose document is deleted) get a delete staged in a
        run-less changeset, so the next build removes them; the query path
        already drops a hit without a servable registry row.  Registry orphans
        (``live`` untombstoned chunks missing from the index) cannot be served:
        their documents lose their etag and content hash, so the next sync
        re-reads and re-stages them.  Returns counts and the ids involved.
        """
        in_store = set(point_ids)
        now = utcnow()
        with self.session() as s:
            self._write_lock(s)
            rows = {}
            for batch in _batches(sorted(in_store)):
                rows.update({cid: (state, doc_state, source_id, doc_id) for cid, state, doc_state, source_id, doc_id in
                             s.execute(select(Chunk.id, Chunk.state, Document.state, Chunk.source_id, Chunk.document_id)
                                       .join(Document, Document.id == Chunk.document_id).where(Chunk.id.in_(batch)))})
            pending_delete = set(s.scalars(
                select(ChangesetEntry.chunk_id).join(Changeset, Changeset.id == ChangesetEntry.changeset_id)
                .where(Changeset.kb == kb, Changeset.status.in_((ChangesetStatus.OPEN, ChangesetStatus.STAGED)),
                       ChangesetEntry.op == "delete")))
            orphans = sorted(cid for cid in in_store - pending_delete
                             if cid not in rows or rows[cid][0] != ChunkState.LIVE or rows[cid][1] == DocumentState.DELETED)
            live = dict(s.execute(select(Chunk.id, Chunk.document_id).where(
                Chunk.kb == kb, Chunk.state == ChunkState.LIVE, Chunk.tombstoned.is_(False))).all())
            absent = sorted(set(live) - in_store)
            if orphans:
                cs = Changeset(kb=kb, source_id=rows[orphans[0]][2] if orphans[0] in rows else "", sync_run_id=None,
                               status=ChangesetStatus.STAGED, staged_at=now)
                s.add(cs)
                s.flush()
                s.add_all(ChangesetEntry(changeset_id=cs.id, chunk_id=cid, document_id=rows[cid][3] if cid in rows else "",
                                         op="delete") for cid in orphans)
                for batch in _batches([c for c in orphans if c in rows]):
                    s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(tombstoned=True, updated_at=now))
            docs = sorted({live[c] for c in absent})
            for batch in _batches(docs):
                s.execute(update(Document).where(Document.id.in_(batch)).values(etag=None, content_hash=None,
                                                                                updated_at=now))
            return {"kb": kb, "points": len(in_store), "index_orphans": len(orphans), "registry_orphans": len(absent),
                    "orphan_ids": orphans[:100], "absent_ids": absent[:100], "documents_to_reread": len(docs)}

    # -- tombstone garbage collection ----------------------------------------------------------

    def collect_tombstones(self, kb: str, *, older_than: dt.datetime) -> int:
        """Delete tombstones no retained snapshot can need any more; returns how many.

        A tombstone applied by snapshot version V matters while a version
        below V still exists (a rollback to it must keep the chunk
        withdrawn).  So only tombstones applied at or below the oldest
        version still serving or retained (``active``/``retired``), and
        written before ``older_than``, are deleted, with their ``removed``
        chunk rows' tombstones only (the chunk rows stay for citations of
        audit).  Archived snapshots carry their own registry rows.
        """
        with self.session() as s:
            self._write_lock(s)
            oldest = s.scalar(select(func.min(Snapshot.version)).where(
                Snapshot.kb == kb, Snapshot.status.in_(("active", "retired"))))
            if oldest is None:
                return 0
            safe = select(Snapshot.id).where(Snapshot.kb == kb, Snapshot.version <= oldest)
            return affected_rows(s.execute(delete(Tombstone).where(
                Tombstone.kb == kb, Tombstone.applied_snapshot_id.in_(safe), Tombstone.created_at < older_than)))

    # -- sync lag --------------------------------------------------------------------------

    def record_run_lag(self, run_id: int, *, observed_at: dt.datetime | None = None) -> float | None:
        """Record how long the run's earliest observed change took to become visible.

        Visible: its snapshot's ``activated_at`` (the run must have built);
        observed: ``observed_at`` if given, else the earliest webhook event of
        the tickets bound to the run, else the run's start.  Returns the lag in
        seconds (None when the run's changes are not visible yet).
        """
        from freshindex.registry.schema import SyncTicket

        with self.session() as s:
            run = s.get(SyncRun, run_id)
            if run is None or run.snapshot_id is None:
                return None
            snap = s.get(Snapshot, run.snapshot_id)
            if snap is None or snap.activated_at is None:
                return None
            event = s.scalar(select(func.min(SyncTicket.created_at)).where(SyncTicket.run_id == run_id))
            candidates = [t for t in (as_utc(observed_at), run.observed_at, event) if t is not None]
            seen = min(candidates) if candidates else run.started_at
            visible = snap.activated_at
            run.observed_at, run.visible_at = seen, visible
            run.lag_s = max(0.0, (visible - seen).total_seconds())
            return run.lag_s

    def note_observed(self, run_id: int, observed_at: dt.datetime) -> None:
        """Lower the run's ``observed_at`` to ``observed_at`` (a changed object's modification time)."""
        with self.session() as s:
            run = s.get(SyncRun, run_id)
            if run is not None and (run.observed_at is None or run.observed_at > observed_at):
                run.observed_at = observed_at

    def run_lags(self, *, kb: str | None = None, source_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Recorded lags, newest first."""
        with self.session() as s:
            q = select(SyncRun).where(SyncRun.lag_s.is_not(None)).order_by(SyncRun.id.desc()).limit(limit)
            if kb is not None:
                q = q.where(SyncRun.kb == kb)
            if source_id is not None:
                q = q.where(SyncRun.source_id == source_id)
            return [{"run": r.id, "source": r.source_id, "kb": r.kb, "trigger": r.trigger, "lag_s": r.lag_s,
                     "observed_at": r.observed_at.isoformat() if r.observed_at else None,
                     "visible_at": r.visible_at.isoformat() if r.visible_at else None}
                    for r in s.scalars(q)]


def _freshness(r: Source, verified: dt.datetime | None, ok: dt.datetime | None, error: str | None,
               now: dt.datetime) -> SourceFreshness:
    reason = None
    if error is not None and verified is not None:
        reason = "unreachable"
    elif r.stale_after_s and verified is not None and (now - verified).total_seconds() > r.stale_after_s:
        reason = "unverified"
    return SourceFreshness(
        source_id=r.id, kb=r.kb, paused=bool(r.paused), removed=r.removed_at is not None,
        poll_interval_s=r.poll_interval_s, stale_after_s=r.stale_after_s, hard_expiry_s=r.hard_expiry_s,
        last_verified_at=verified, last_successful_sync_at=ok, last_error=error, stale=reason is not None,
        stale_reason=reason,
    )



__all__ = ["VERIFIED_RUNS", "FreshnessStore", "SourceFreshness"]
