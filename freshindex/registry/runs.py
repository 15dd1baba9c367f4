"""The run ledger: sync runs from open (or join) to finish, their leases, plans and builds.

Writes of a run's documents (staging, failures) are in :mod:`registry.staging`;
both sides are serialised through the run fence (:meth:`registry.base._Base._fence`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session, defer

from freshindex.core.enums import SUCCESSFUL_RUNS, BuildStatus, ChangesetStatus, DocumentOutcomeKind, RunStatus
from freshindex.core.errors import NotFoundError
from freshindex.registry.base import _Base, _refusal, _run_info, process_name
from freshindex.registry.db import affected_rows
from freshindex.registry.records import DocumentErrorInfo, SyncRunInfo
from freshindex.registry.schema import (
    Changeset,
    ChangesetEntry,
    DocumentResult,
    DocumentStart,
    Lock,
    Source,
    SyncRun,
    utcnow,
)


def lease_alive(run: Any, *, now: dt.datetime, lease_s: float) -> bool:
    """The one rule "is this run's lease alive", for a run row or a :class:`SyncRunInfo`.

    A run is renewed by its heartbeat; before its first one, a running run
    counts from its start and a finished run (its build pending) from its
    finish.  Alive while that moment is younger than ``lease_s`` seconds at
    ``now``.  The registry's join and reap decisions, the scheduler's "is
    this source busy" and a CLI following a joined run all call this.
    """
    seen = run.heartbeat_at or (run.started_at if run.status == RunStatus.RUNNING else run.finished_at)
    return seen is not None and (now - seen).total_seconds() < lease_s


@dataclass(frozen=True)
class RunClaim:
    """What :meth:`Registry.open_or_join_run` decided for one sync request."""

    run_id: int
    changeset_id: int | None
    #: True when the request joined a live run another sync had opened.
    joined: bool


class RunsStore(_Base):
    """Open, join, renew, reap and finish sync runs; read their history and errors."""

    def start_sync_run(self, source_id: str, trigger: str) -> tuple[int, int]:
        """Open a run and its changeset, never joining; returns (run id, changeset id).

        Every open changeset of the source is adopted (see
        :meth:`open_or_join_run`), whatever its run is doing: for tests,
        benchmarks and tools that want a run of their own.
        """
        claim = self.open_or_join_run(source_id, trigger, lease_s=None)
        assert claim.changeset_id is not None
        return claim.run_id, claim.changeset_id

    def open_or_join_run(self, source_id: str, trigger: str, *, lease_s: float | None,
                         followup: bool = False) -> RunClaim:
        """The one decision "join the live run of this source, or open one".

        A ``running`` run of the source whose heartbeat (or, before its first
        heartbeat, its start) is younger than ``lease_s`` seconds is alive:
        the caller joins it (``joined=True``) and opens nothing; with
        ``followup`` the run is asked for one more sync after it ends.
        Otherwise a new run and its changeset are opened.  Changesets left
        ``open`` by earlier runs of the source are staged here and their runs,
        if still ``running``, marked failed ("abandoned"): their entries were
        written document by document in complete transactions, so they are
        valid changes, and the documents they touched will not be seen as
        changed again.  A task of an abandoned run that arrives later is
        fenced off (:class:`core.errors.StaleTaskError`).

        Atomic: the source row is locked (``FOR UPDATE`` on PostgreSQL,
        ``BEGIN IMMEDIATE`` on SQLite) before looking, so two concurrent
        callers never both open a run.  ``lease_s=None`` never joins.  What
        it does not guarantee: that the joined run is still alive a moment
        later; a follower must keep watching its heartbeat.
        """
        with self.session() as s:
            self._write_lock(s)
            q = select(Source).where(Source.id == source_id)
            q = self._for_update(q)
            source = s.scalars(q).first()
            if source is None:
                raise NotFoundError(f"no source {source_id!r}")
            now = utcnow()
            if lease_s is not None:
                running = s.scalars(
                    select(SyncRun).where(SyncRun.source_id == source_id, SyncRun.status == RunStatus.RUNNING)
                    .order_by(SyncRun.id.desc())
                ).all()
                for r in running:
                    if lease_alive(r, now=now, lease_s=lease_s):
                        if followup:
                            r.followup_requested = True
                        return RunClaim(run_id=r.id, changeset_id=r.changeset_id, joined=True)
            stale = s.scalars(
                select(Changeset).where(Changeset.source_id == source_id, Changeset.status == ChangesetStatus.OPEN)
            ).all()
            for cs in stale:
                if cs.sync_run_id is not None:
                    # Lock the run before its changeset changes state: staging
                    # writes of its tasks hold the same lock (see _fence).
                    rq = select(SyncRun).where(SyncRun.id == cs.sync_run_id)
                    rq = self._for_update(rq)
                    old = s.scalars(rq).first()
                    if old is not None and old.status == RunStatus.RUNNING:
                        old.status, old.finished_at = RunStatus.FAILED, now
                        old.error = "abandoned: a later run adopted its changes"
                cs.status, cs.staged_at = ChangesetStatus.STAGED, now
            run = SyncRun(source_id=source_id, kb=source.kb, trigger=trigger, status=RunStatus.RUNNING, started_at=now)
            s.add(run)
            s.flush()
            cs = Changeset(kb=source.kb, source_id=source_id, sync_run_id=run.id, status=ChangesetStatus.OPEN)
            s.add(cs)
            s.flush()
            run.changeset_id = cs.id
            return RunClaim(run_id=run.id, changeset_id=cs.id, joined=False)

    def run_refusal(self, run_id: int, changeset_id: int | None = None) -> str | None:
        """Why a task of ``run_id`` would be fenced off now, or None.

        Advisory (no lock): lets a stale task skip its fetch and embedding.
        The staging transaction decides (:meth:`_fence`).
        """
        with self.session() as s:
            # Not the summary: it holds the run's whole plan, and every task asks this before its fetch.
            run = s.get(SyncRun, run_id, options=[defer(SyncRun.summary)])
            cs_status = None
            if run is not None and (changeset_id or run.changeset_id) is not None:
                cs_status = s.scalar(select(Changeset.status).where(Changeset.id == (changeset_id or run.changeset_id)))
            return _refusal(run, changeset_id, cs_status)

    def count_stale_task(self, run_id: int) -> int:
        """Count a fenced-off task against its run; returns the run's total."""
        with self.session() as s:
            s.execute(update(SyncRun).where(SyncRun.id == run_id)
                      .values(stale_tasks=func.coalesce(SyncRun.stale_tasks, 0) + 1))
            return s.scalar(select(SyncRun.stale_tasks).where(SyncRun.id == run_id)) or 0

    def set_run_planned(self, run_id: int, *, listed: int, planned: int,
                        documents: Sequence[tuple[str, str | None, int]
                                            | tuple[str, str | None, int, str | None]] | None = None,
                        skipped: int = 0, moves: Sequence[dict[str, Any]] = (),
                        truncated: str | None = None) -> None:
        """Record the plan; ``documents`` ((key, etag, size) per planned
        document, and its media type as a fourth element where the listing gave one)
        lets the reaper resume the run if its workers die.

        Media types are kept apart from ``planned_keys`` (``planned_media``, key ->
        type, only those not None): a worker of the previous release reads
        ``planned_keys`` as three-element rows during a rolling deploy.

        ``skipped``: listed documents the plan does not process because they
        were skipped before and did not change (counted ``skipped``, not
        ``unchanged``, when the run finishes); ``moves``: ``{"from", "to"}``
        per document whose content reappeared under a new key (kept in the
        run's summary, at most 100); ``truncated``: why the listing was cut short (a crawl's bound
        or deadline: nothing under what it did not reach was deleted), kept as ``listing_truncated``."""
        with self.session() as s:
            values: dict[str, Any] = dict(docs_listed=listed, docs_planned=planned, heartbeat_at=utcnow(),
                                          worker=process_name())
            if documents is not None or skipped or moves or truncated:
                run = s.get(SyncRun, run_id)
                summary = dict(run.summary or {}) if run is not None else {}
                if documents is not None:
                    summary["planned_keys"] = [[d[0], d[1], int(d[2])] for d in documents]
                    media = {d[0]: d[3] for d in documents if len(d) > 3 and d[3] is not None}
                    if media:
                        summary["planned_media"] = media
                    else:
                        summary.pop("planned_media", None)
                if skipped:
                    summary["skipped_listed"] = int(skipped)
                if moves:
                    summary["moves"] = [dict(m) for m in moves][:100]
                if truncated:
                    summary["listing_truncated"] = str(truncated)[:200]
                values["summary"] = summary
            s.execute(update(SyncRun).where(SyncRun.id == run_id).values(**values))

    def heartbeat_run(self, run_id: int, worker: str | None = None, *, now: dt.datetime | None = None) -> None:
        """Renew a run's lease: the process working on it (``worker``,
        default this process's hostname:pid) is alive.  ``now``: a test's clock."""
        with self.session() as s:
            s.execute(update(SyncRun).where(SyncRun.id == run_id)
                      .values(heartbeat_at=now or utcnow(), worker=worker or process_name()))

    def stalled_runs(self, lease_s: float, *, now: dt.datetime | None = None) -> list[SyncRunInfo]:
        """Runs nobody has renewed for ``lease_s`` seconds.

        * ``running`` runs whose heartbeat (or start) is older than the lease;
        * finished runs whose build is still ``pending``, whose heartbeat (or
          finish) is older than the lease, while no builder holds the
          knowledge base's lock (a build in progress renews its lock).

        A held run is treated like any other (its held deletions wait for a
        person; its other changes should not).  A slow worker that renews
        less often than the lease looks dead: keep
        ``sync.heartbeat_interval_s`` well under ``sync.run_lease_s``.
        """
        now = now or utcnow()
        wall = time.time()
        out: list[SyncRunInfo] = []
        with self.session() as s:
            rows = s.scalars(
                select(SyncRun).where(or_(SyncRun.status == RunStatus.RUNNING, SyncRun.build_status == BuildStatus.PENDING))
                .order_by(SyncRun.id)
            ).all()
            locks = {r.name: r for r in s.scalars(select(Lock).where(Lock.name.like("build:%")))}
            for r in rows:
                if lease_alive(r, now=now, lease_s=lease_s):
                    continue
                if r.status != RunStatus.RUNNING:
                    lock = locks.get(f"build:{r.kb}")
                    if lock is not None and lock.owner is not None and lock.expires_at > wall:
                        continue
                out.append(_run_info(r))
        return out

    def unprocessed_documents(self, run_id: int) -> list[tuple[str, str | None, int, str | None]] | None:
        """Planned documents of a run that have no outcome yet, (key, etag, size, media type), or None
        when the run recorded no plan (it cannot be resumed)."""
        with self.session() as s:
            run = s.get(SyncRun, run_id)
            if run is None:
                raise NotFoundError(f"no sync run {run_id}")
            planned = (run.summary or {}).get("planned_keys")
            if planned is None:
                return None
            media = (run.summary or {}).get("planned_media") or {}
            done = set(s.scalars(select(DocumentResult.key).where(DocumentResult.sync_run_id == run_id)))
            return [(k, e, int(z), media.get(k)) for k, e, z in planned if k not in done]

    def _summary_row(self, s: Session, run_id: int) -> SyncRun:
        """The run's row, locked for a read-modify-write of its JSON summary.

        The summary holds the dispatch cursor, the reaper's resumes and the
        deletion guard's hold, written by different processes: without the
        lock (BEGIN IMMEDIATE on SQLite, FOR NO KEY UPDATE on PostgreSQL,
        which lets the FOR KEY SHARE fences of its staging documents through)
        one writer's update overwrites another's.
        """
        self._write_lock(s)
        q = select(SyncRun).where(SyncRun.id == run_id)
        if self._dialect == "postgresql":
            q = q.with_for_update(key_share=True)
        run = s.scalars(q).first()
        if run is None:
            raise NotFoundError(f"no sync run {run_id}")
        return run

    def advance_dispatch(self, run_id: int, start: int, end: int, *, worked: bool = True) -> bool:
        """Move a running run's dispatch cursor (``summary["dispatched"]``, the
        planned documents enqueued so far) from ``start`` to ``end``, and renew
        its lease; False when the run is closed or the cursor is elsewhere.

        Fair dispatch (workers/dispatch.py) calls it before enqueueing a batch
        and its continuation: of two continuations starting at the same
        place (a redelivery, or the reaper's copy) only the first sends its
        batch.  The renewed lease gives the continuation a full lease to
        reach the head of the queue.  A run without a cursor (planned by a
        release without one) accepts any ``start``.  ``worked`` (a parse-queue
        worker sends the batch) makes it evidence for :meth:`worked_runs`; the
        planner sending the first batch passes False.
        """
        with self.session() as s:
            run = self._summary_row(s, run_id)
            if run.status != RunStatus.RUNNING:
                return False
            summary = dict(run.summary or {})
            current = summary.get("dispatched")
            if current is not None and int(current) != start:
                return False
            summary["dispatched"] = int(end)
            run.summary = summary
            run.heartbeat_at, run.worker = utcnow(), process_name()
            if worked:
                run.worked_at = run.heartbeat_at
            return True

    def worked_runs(self, lease_s: float, *, now: dt.datetime | None = None) -> list[int]:
        """Running runs a parse-queue worker took work of within ``lease_s`` seconds
        (a document started, :meth:`mark_document_started`, or a batch sent by a
        continuation, :meth:`advance_dispatch`): evidence that the parse workers
        are alive and the parse queue moves.

        Other renewals of a run's lease are no such evidence: the planner's
        (``set_run_planned``, the first batch), plain heartbeats, the reaper's.
        """
        now = now or utcnow()
        cutoff = now - dt.timedelta(seconds=lease_s)
        with self.session() as s:
            by_batch = set(s.scalars(select(SyncRun.id).where(
                SyncRun.status == RunStatus.RUNNING, SyncRun.worked_at > cutoff)))
            by_start = set(s.scalars(
                select(DocumentStart.sync_run_id).distinct()
                .join(SyncRun, SyncRun.id == DocumentStart.sync_run_id)
                .where(SyncRun.status == RunStatus.RUNNING, DocumentStart.started_at > cutoff)))
        return sorted(by_batch | by_start)

    def mark_document_started(self, run_id: int, key: str, worker: str | None = None) -> None:
        """A ``process_document`` task of a running run begins on ``key`` (a redelivery renews the marker).

        What the reaper tells a lost document by (started, no outcome: its
        worker died) from one still queued (never started).  Nothing is
        written for a closed or unknown run.
        """
        with self.session() as s:
            self._write_lock(s)
            if s.scalar(select(SyncRun.status).where(SyncRun.id == run_id)) != RunStatus.RUNNING:
                return
            values = {"sync_run_id": run_id, "key": key, "started_at": utcnow(), "worker": worker or process_name()}
            stmt = self._insert(DocumentStart).values(**values)
            s.execute(stmt.on_conflict_do_update(index_elements=["sync_run_id", "key"],
                                                 set_={"started_at": values["started_at"], "worker": values["worker"]}))

    def started_documents(self, run_id: int) -> dict[str, dt.datetime]:
        """Keys of the run's documents a task began on (marker still set), with when."""
        with self.session() as s:
            return {k: at for k, at in s.execute(
                select(DocumentStart.key, DocumentStart.started_at).where(DocumentStart.sync_run_id == run_id))}

    def clear_started(self, run_id: int, keys: Sequence[str], *, up_to: dt.datetime) -> int:
        """Drop the start markers of ``keys`` written at or before ``up_to``; returns how many.

        The reaper re-sent these documents: until a worker takes the copy they
        are waiting in the queue, not lost.  A copy that began since (a newer
        marker) keeps its marker.
        """
        if not keys:
            return 0
        with self.session() as s:
            done = 0
            for i in range(0, len(keys), 500):
                done += affected_rows(s.execute(delete(DocumentStart).where(
                    DocumentStart.sync_run_id == run_id, DocumentStart.key.in_(list(keys[i:i + 500])),
                    DocumentStart.started_at <= up_to)))
            return done

    def record_reap(self, run_id: int, action: str, *, worker: str | None = None, **details: Any) -> int:
        """Note that the reaper acted on a run (and renew its lease, so the
        next reaper waits a full lease); returns how often it has been reaped."""
        with self.session() as s:
            run = self._summary_row(s, run_id)
            summary = dict(run.summary or {})
            reaps = list(summary.get("reaps", []))
            reaps.append({"at": utcnow().isoformat(), "action": action, **details})
            summary["reaps"] = reaps
            run.summary = summary
            run.heartbeat_at, run.worker = utcnow(), worker or f"reaper:{process_name()}"
            run.worked_at = None  # the reaper renewed it: no evidence that a worker is alive
            return len(reaps)

    def get_sync_run(self, run_id: int) -> SyncRunInfo:
        with self.session() as s:
            row = s.get(SyncRun, run_id)
            if row is None:
                raise NotFoundError(f"no sync run {run_id}")
            return _run_info(row)

    def sync_runs(self, source_id: str | None = None, limit: int = 20) -> list[SyncRunInfo]:
        with self.session() as s:
            q = select(SyncRun).order_by(SyncRun.id.desc()).limit(limit)
            if source_id:
                q = q.where(SyncRun.source_id == source_id)
            return [_run_info(r) for r in s.scalars(q)]

    def last_successful_sync(self, source_id: str) -> dt.datetime | None:
        with self.session() as s:
            return s.scalar(
                select(func.max(SyncRun.finished_at)).where(
                    SyncRun.source_id == source_id, SyncRun.status.in_(SUCCESSFUL_RUNS)
                )
            )

    def run_progress(self, run_id: int) -> tuple[int, int]:
        """(documents processed, documents planned) for a run."""
        with self.session() as s:
            done = s.scalar(
                select(func.count()).where(DocumentResult.sync_run_id == run_id,
                                           DocumentResult.outcome.not_in((DocumentOutcomeKind.DELETED,
                                                                          DocumentOutcomeKind.MOVED)))
            ) or 0
            planned = s.scalar(select(SyncRun.docs_planned).where(SyncRun.id == run_id)) or 0
            return done, planned

    def finish_sync_run(self, run_id: int, *, error: str | None = None) -> tuple[SyncRunInfo, bool]:
        """Aggregate the run's document outcomes and stage its changeset.

        Only the first call finishes the run and gets ``True`` back; later
        calls (a redelivered task, two workers noticing completion at once)
        get the finished run and ``False``, so exactly one caller goes on to
        trigger the build.
        """
        with self.session() as s:
            self._write_lock(s)  # serialised with staging writes (see _fence)
            q = select(SyncRun).where(SyncRun.id == run_id)
            q = self._for_update(q)
            run = s.scalars(q).first()
            if run is None:
                raise NotFoundError(f"no sync run {run_id}")
            if run.status != RunStatus.RUNNING:
                return _run_info(run), False
            rows = s.scalars(select(DocumentResult).where(DocumentResult.sync_run_id == run_id)).all()
            kinds = (DocumentOutcomeKind.ADDED, DocumentOutcomeKind.MODIFIED, DocumentOutcomeKind.UNCHANGED,
                     DocumentOutcomeKind.DELETED, DocumentOutcomeKind.FAILED, DocumentOutcomeKind.SKIPPED,
                     DocumentOutcomeKind.MOVED)
            counts: dict[str, int] = {k.value: 0 for k in kinds}
            totals = {k: 0 for k in ("chunks_embedded", "chunks_reused", "chunks_kept", "chunks_added",
                                     "chunks_moved", "tombstones")}
            rechunked: dict[str, int] = {}
            for r in rows:
                counts[r.outcome] = counts.get(r.outcome, 0) + 1
                for k in totals:
                    totals[k] += getattr(r, k) or 0
                if r.rechunk_reason:
                    rechunked[r.rechunk_reason] = rechunked.get(r.rechunk_reason, 0) + 1
            # Deleted and moved documents are the keys no longer listed; skipped ones the plan did
            # not process (skipped before, unchanged) are still skips, not unchanged documents.
            processed = sum(counts.values()) - counts[DocumentOutcomeKind.DELETED] - counts[DocumentOutcomeKind.MOVED]
            carried = min(int((run.summary or {}).get("skipped_listed") or 0), max(0, run.docs_listed - processed))
            counts[DocumentOutcomeKind.SKIPPED] += carried
            counts[DocumentOutcomeKind.UNCHANGED] += max(0, run.docs_listed - processed - carried)
            cs = s.get(Changeset, run.changeset_id) if run.changeset_id else None
            entries = 0
            if cs is not None and cs.status == ChangesetStatus.OPEN:
                entries = s.scalar(select(func.count()).where(ChangesetEntry.changeset_id == cs.id)) or 0
                if entries:
                    cs.status, cs.staged_at = ChangesetStatus.STAGED, utcnow()
                else:
                    s.delete(cs)
                    run.changeset_id = None
            added, modified = counts[DocumentOutcomeKind.ADDED], counts[DocumentOutcomeKind.MODIFIED]
            # Skipped documents (excluded, empty, no parser) are neither indexed nor failed: a run
            # whose every listed document was indexed or skipped succeeded.
            indexed = added + modified + counts[DocumentOutcomeKind.UNCHANGED]
            if error is not None or (counts[DocumentOutcomeKind.FAILED] and not indexed):
                run.status = RunStatus.FAILED
            elif counts[DocumentOutcomeKind.FAILED]:
                run.status = RunStatus.PARTIAL
            else:
                run.status = RunStatus.SUCCEEDED
            if run.held_reason and error is None:
                run.status = RunStatus.HELD  # the deletion guard kept this run's deletions back
            # Kept from the running summary: the deletion guard's hold (written
            # at plan time), the reaper's resumes, moves and a truncated listing; planned_keys are dropped.
            kept = {k: v for k, v in (run.summary or {}).items()
                    if k in ("held", "reaps", "moves", "listing_truncated") and v}
            run.error = error
            run.finished_at = utcnow()
            run.summary = {
                **kept,
                "documents": counts,
                "documents_changed": added + modified + counts[DocumentOutcomeKind.DELETED],
                **totals,
                "rechunked": rechunked,
                "changeset_entries": entries,
            }
            run.build_status = BuildStatus.PENDING
            s.execute(delete(DocumentStart).where(DocumentStart.sync_run_id == run_id))
            return _run_info(run), True

    def set_run_build(self, run_id: int, *, status: str, snapshot_id: str | None, error: str | None = None) -> None:
        """Record what the build after this run did (built, unchanged, failed)."""
        with self.session() as s:
            s.execute(
                update(SyncRun)
                .where(SyncRun.id == run_id)
                .values(build_status=status, snapshot_id=snapshot_id, build_error=error)
            )

    def run_changeset_applied(self, run_id: int) -> bool:
        with self.session() as s:
            cs = s.scalar(select(SyncRun.changeset_id).where(SyncRun.id == run_id))
            if cs is None:
                return False
            return s.scalar(select(Changeset.status).where(Changeset.id == cs)) == ChangesetStatus.APPLIED

    def hold_deletions(self, run_id: int, *, reason: str, held: dict[str, Any]) -> None:
        """Mark a run as holding its deletions back; ``held`` (counts) joins its summary."""
        with self.session() as s:
            run = self._summary_row(s, run_id)
            run.held_reason = reason
            run.summary = {**(run.summary or {}), "held": dict(held)}

    def held_deletions(self, kb: str) -> dict[str, int]:
        """Per source of ``kb``: documents its latest finished run held back (0 if not held).

        Every source of the knowledge base has an entry, so the gauge built
        from it exists (at 0) before the first hold.
        """
        with self.session() as s:
            sources = list(s.scalars(select(Source.id).where(Source.kb == kb)))
            latest = (
                select(SyncRun.source_id, func.max(SyncRun.id).label("run_id"))
                .where(SyncRun.kb == kb, SyncRun.status != RunStatus.RUNNING)
                .group_by(SyncRun.source_id)
                .subquery()
            )
            runs = s.scalars(select(SyncRun).join(latest, SyncRun.id == latest.c.run_id)).all()
            out = {source_id: 0 for source_id in sources}
            for r in runs:
                if r.source_id in out and r.status == RunStatus.HELD:
                    out[r.source_id] = int(((r.summary or {}).get("held") or {}).get("deletions", 0))
            return out

    def document_skips(self, run_id: int | None = None, source_id: str | None = None) -> list[DocumentErrorInfo]:
        """Documents a run (or every run) recorded as ``skipped``, with the reason; not errors."""
        return self.document_errors(run_id=run_id, source_id=source_id, outcome=DocumentOutcomeKind.SKIPPED)

    def document_errors(self, run_id: int | None = None, source_id: str | None = None, *,
                        outcome: str = DocumentOutcomeKind.FAILED) -> list[DocumentErrorInfo]:
        with self.session() as s:
            q = (
                select(DocumentResult, SyncRun.source_id)
                .join(SyncRun, SyncRun.id == DocumentResult.sync_run_id)
                .where(DocumentResult.outcome == outcome)
                .order_by(DocumentResult.sync_run_id.desc(), DocumentResult.key)
            )
            if run_id is not None:
                q = q.where(DocumentResult.sync_run_id == run_id)
            if source_id is not None:
                q = q.where(SyncRun.source_id == source_id)
            return [
                DocumentErrorInfo(
                    source_id=src, key=r.key, reason=r.error_reason or "", detail=r.error_detail or "",
                    sync_run_id=r.sync_run_id,
                )
                for r, src in s.execute(q)
            ]
