"""The registry: every read and write of the system of record.

One :class:`Registry` per process, built from a SQLAlchemy engine.  Each
public method is one transaction, so a task that dies half-way leaves either
all of a document's changes or none of them.  Methods return plain records
(:mod:`registry.records`), never ORM objects.

Writes that a redelivered task may repeat are idempotent: rows are keyed by
content-derived ids and inserted with "on conflict" clauses.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from freshindex.core.errors import ConfigError, NotFoundError, RetryableError, StaleTaskError
from freshindex.core.ids import validate_kb_name, validate_source_id
from freshindex.core.types import ChunkDraft
from freshindex.registry import db
from freshindex.registry.records import (
    CanaryInfo,
    ChunkRow,
    ChunkStatus,
    DocumentErrorInfo,
    DocumentOutcome,
    DocumentState,
    SnapshotInfo,
    SourceInfo,
    SyncRunInfo,
)
from freshindex.registry.schema import (
    AliasEvent,
    Canary,
    Changeset,
    ChangesetEntry,
    Chunk,
    Document,
    DocumentResult,
    Embedding,
    Lock,
    Snapshot,
    Source,
    SyncRun,
    Tombstone,
    utcnow,
)
from sqlalchemy import DateTime, Engine, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

#: Rows per IN (...) clause; SQLite allows 32766 parameters, PostgreSQL more.
_BATCH = 500

#: Reasons a failed document is retried on the next sync even if unchanged.
TRANSIENT_REASONS = frozenset({"unreadable", "vanished", "fetch_failed"})
#: Tombstones that no rollback may undo: the text is gone at its source, past
#: its validity, or no longer permitted.  (``superseded`` is not final: the
#: older version of a document that still exists may serve again.)
FINAL_TOMBSTONE_REASONS = frozenset({"deleted", "expired", "revoked"})


def _batches(items: Sequence[Any], size: int = _BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class RunClaim:
    """What :meth:`Registry.open_or_join_run` decided for one sync request."""

    run_id: int
    changeset_id: int | None
    #: True when the request joined a live run another sync had opened.
    joined: bool


def _refusal(run: SyncRun | None, changeset_id: int | None, cs_status: str | None) -> str | None:
    """Why a task of ``run`` may no longer write (None: it may)."""
    if run is None:
        return "the run does not exist"
    if run.status != "running":
        return f"the run is {run.status}" + (f" ({run.error})" if run.error else "")
    if changeset_id is not None and run.changeset_id != changeset_id:
        return f"changeset {changeset_id} is not the run's (it has {run.changeset_id})"
    if cs_status != "open":
        return f"its changeset is {cs_status or 'gone'}"
    return None


class Registry:
    """Facade over the registry database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._dialect = engine.dialect.name

    @classmethod
    def open(cls, url: str, *, auto_migrate: bool = True, pool_size: int = 5) -> Registry:
        """Connect, and check the schema is current.

        SQLite registries are upgraded in place when ``auto_migrate`` is set;
        any other database must be upgraded with ``freshindex db upgrade``.
        """
        engine = db.make_engine(url, pool_size=pool_size)
        current = db.current_revision(engine)
        head = db.head_revision()
        if current != head:
            if auto_migrate and engine.dialect.name == "sqlite":
                db.upgrade(engine)
            else:
                raise ConfigError(
                    f"registry schema is at {current or 'nothing'}, this version needs {head}: "
                    "run `freshindex db upgrade`"
                )
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction; database errors become :class:`RetryableError`."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except IntegrityError:
            session.rollback()
            raise
        except OperationalError as exc:
            session.rollback()
            raise RetryableError(f"registry unavailable: {exc.orig}") from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def ping(self) -> None:
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except SQLAlchemyError as exc:
            raise RetryableError(f"registry unreachable: {exc}") from exc

    def _insert(self, table: Any) -> Any:
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        return dialect.insert(table)

    # -- sources ------------------------------------------------------------

    def add_source(
        self,
        source_id: str,
        *,
        kind: str,
        location: str,
        owner: str,
        kb: str,
        options: dict[str, Any] | None = None,
        acl: Sequence[str] = ("public",),
        poll_interval_s: int | None = None,
        replace: bool = False,
    ) -> SourceInfo:
        validate_source_id(source_id)
        validate_kb_name(kb)
        with self.session() as s:
            existing = s.get(Source, source_id)
            if existing is not None and not replace:
                raise ConfigError(f"source {source_id!r} already exists (use --replace to change it)")
            if existing is not None and existing.kb != kb:
                raise ConfigError(f"source {source_id!r} belongs to knowledge base {existing.kb!r}; it cannot move")
            row = existing or Source(id=source_id)
            row.kind, row.location, row.owner, row.kb = kind, location, owner, kb
            row.options = dict(options or {})
            row.acl = list(acl)
            row.poll_interval_s = poll_interval_s
            row.enabled = True
            s.add(row)
            s.flush()
            return _source_info(row)

    def get_source(self, source_id: str) -> SourceInfo:
        with self.session() as s:
            row = s.get(Source, source_id)
            if row is None:
                raise NotFoundError(f"no source {source_id!r} (see `freshindex sources list`)")
            return _source_info(row)

    def list_sources(self, kb: str | None = None) -> list[SourceInfo]:
        with self.session() as s:
            q = select(Source).order_by(Source.id)
            if kb is not None:
                q = q.where(Source.kb == kb)
            return [_source_info(r) for r in s.scalars(q)]

    def knowledge_bases(self) -> list[str]:
        with self.session() as s:
            return sorted(set(s.scalars(select(Source.kb))) | set(s.scalars(select(Snapshot.kb))))

    # -- documents ----------------------------------------------------------

    def documents_for_source(self, source_id: str) -> dict[str, DocumentState]:
        with self.session() as s:
            rows = s.scalars(select(Document).where(Document.source_id == source_id))
            return {r.key: _doc_state(r) for r in rows}

    def get_document(self, document_id: str) -> DocumentState | None:
        with self.session() as s:
            row = s.get(Document, document_id)
            return _doc_state(row) if row is not None else None

    def live_chunk_ids(self, document_id: str) -> set[str]:
        """Chunks of a document that are (or are about to be) served."""
        with self.session() as s:
            q = select(Chunk.id).where(
                Chunk.document_id == document_id,
                Chunk.tombstoned.is_(False),
                Chunk.state.in_(("live", "pending")),
            )
            return set(s.scalars(q))

    # -- sync runs ------------------------------------------------------------

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
            if self._dialect == "postgresql":
                q = q.with_for_update()
            source = s.scalars(q).first()
            if source is None:
                raise NotFoundError(f"no source {source_id!r}")
            now = utcnow()
            if lease_s is not None:
                cutoff = now - dt.timedelta(seconds=lease_s)
                running = s.scalars(
                    select(SyncRun).where(SyncRun.source_id == source_id, SyncRun.status == "running")
                    .order_by(SyncRun.id.desc())
                ).all()
                for r in running:
                    seen = _aware(r.heartbeat_at or r.started_at)
                    if seen is not None and seen > cutoff:
                        if followup:
                            r.followup_requested = True
                        return RunClaim(run_id=r.id, changeset_id=r.changeset_id, joined=True)
            stale = s.scalars(
                select(Changeset).where(Changeset.source_id == source_id, Changeset.status == "open")
            ).all()
            for cs in stale:
                if cs.sync_run_id is not None:
                    # Lock the run before its changeset changes state: staging
                    # writes of its tasks hold the same lock (see _fence).
                    rq = select(SyncRun).where(SyncRun.id == cs.sync_run_id)
                    if self._dialect == "postgresql":
                        rq = rq.with_for_update()
                    old = s.scalars(rq).first()
                    if old is not None and old.status == "running":
                        old.status, old.finished_at = "failed", now
                        old.error = "abandoned: a later run adopted its changes"
                cs.status, cs.staged_at = "staged", now
            run = SyncRun(source_id=source_id, kb=source.kb, trigger=trigger, status="running", started_at=now)
            s.add(run)
            s.flush()
            cs = Changeset(kb=source.kb, source_id=source_id, sync_run_id=run.id, status="open")
            s.add(cs)
            s.flush()
            run.changeset_id = cs.id
            return RunClaim(run_id=run.id, changeset_id=cs.id, joined=False)

    # -- fencing: writes of tasks whose run is closed --------------------------

    def _write_lock(self, s: Session) -> None:
        """Make ``s`` a writer from its first statement (SQLite only).

        pysqlite starts a transaction at the first write, so reads before it
        would look at a state another writer may change before ours commits.
        ``BEGIN IMMEDIATE`` takes SQLite's single write lock now (waiting up
        to the busy timeout).  Must be the session's first statement.
        PostgreSQL callers lock rows with ``FOR UPDATE`` instead.
        """
        if self._dialect == "sqlite":
            s.connection().exec_driver_sql("BEGIN IMMEDIATE")

    def _fence(self, s: Session, run_id: int, changeset_id: int | None = None) -> SyncRun:
        """Check, inside the writing transaction, that ``run_id`` still takes writes.

        The run must be ``running`` and its changeset (``changeset_id`` when
        the task names one) ``open``.  The run row stays locked until the
        transaction ends (``FOR SHARE`` on PostgreSQL; SQLite's write lock),
        and every transition out of running/open locks it first
        (:meth:`finish_sync_run`, :meth:`open_or_join_run`), so no write can
        land in a changeset that was staged or applied meanwhile.  Must be the
        session's first statement.
        """
        self._write_lock(s)
        q = select(SyncRun).where(SyncRun.id == run_id)
        if self._dialect == "postgresql":
            # FOR SHARE: the documents of one run stage concurrently; a
            # transition (finish, adoption) takes FOR UPDATE and waits for them.
            q = q.with_for_update(read=True)
        run = s.scalars(q).first()
        cs_status = None
        if run is not None and (changeset_id or run.changeset_id) is not None:
            cs_status = s.scalar(select(Changeset.status).where(Changeset.id == (changeset_id or run.changeset_id)))
        why = _refusal(run, changeset_id, cs_status)
        if why is not None:
            raise StaleTaskError(run_id, changeset_id, why)
        assert run is not None
        return run

    def run_refusal(self, run_id: int, changeset_id: int | None = None) -> str | None:
        """Why a task of ``run_id`` would be fenced off now, or None.

        Advisory (no lock): lets a stale task skip its fetch and embedding.
        The staging transaction decides (:meth:`_fence`).
        """
        with self.session() as s:
            run = s.get(SyncRun, run_id)
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

    def stranded_documents(self, kb: str | None = None) -> list[dict[str, Any]]:
        """Documents with ``pending`` chunks that no build will ever apply.

        A pending, untombstoned chunk is waiting for a build; it is stranded
        when no ``open`` or ``staged`` changeset holds an upsert for it (a
        task of a closed run wrote it into a changeset that was already
        applied, before fencing existed, or a changeset was lost).  Such a
        document has lost its served version and cannot be found.  Per
        document: its id, source, key and the stranded chunk ids.
        """
        covered = (
            select(ChangesetEntry.chunk_id)
            .join(Changeset, Changeset.id == ChangesetEntry.changeset_id)
            .where(Changeset.status.in_(("open", "staged")), ChangesetEntry.op == "upsert")
        )
        with self.session() as s:
            q = (
                select(Chunk.id, Chunk.document_id, Document.source_id, Document.key, Chunk.kb)
                .join(Document, Document.id == Chunk.document_id)
                .where(Chunk.state == "pending", Chunk.tombstoned.is_(False), Chunk.id.not_in(covered))
                .order_by(Document.key, Chunk.id)
            )
            if kb is not None:
                q = q.where(Chunk.kb == kb)
            out: dict[str, dict[str, Any]] = {}
            for cid, doc_id, source_id, key, chunk_kb in s.execute(q):
                entry = out.setdefault(doc_id, {"document_id": doc_id, "source_id": source_id, "key": key,
                                                "kb": chunk_kb, "chunks": []})
                entry["chunks"].append(cid)
            return list(out.values())

    def repair_stranded(self, kb: str) -> list[dict[str, Any]]:
        """Re-stage every stranded document of ``kb`` (see :meth:`stranded_documents`).

        In one transaction, per source: a new ``staged`` changeset (no run)
        with an upsert for each stranded chunk and a delete for each chunk of
        those documents that is tombstoned but still live in the collection
        with no pending delete (the version the stale write superseded); the
        not yet applied tombstones of those chunks move to it, so the tombstone
        backlog drains when it is applied.  The documents lose their etag and
        content hash, so the next sync compares them with the source afresh.
        The next build serves the repaired documents.  Returns what was
        repaired (:meth:`stranded_documents` rows plus ``changeset_id``).
        Run it under the knowledge base's writer lock.
        """
        stranded = self.stranded_documents(kb)
        if not stranded:
            return []
        now = utcnow()
        pending_delete = (
            select(ChangesetEntry.chunk_id)
            .join(Changeset, Changeset.id == ChangesetEntry.changeset_id)
            .where(Changeset.status.in_(("open", "staged")), ChangesetEntry.op == "delete")
        )
        with self.session() as s:
            self._write_lock(s)
            by_source: dict[str, int] = {}
            for doc in stranded:
                cs_id = by_source.get(doc["source_id"])
                if cs_id is None:
                    cs = Changeset(kb=kb, source_id=doc["source_id"], sync_run_id=None, status="staged",
                                   staged_at=now)
                    s.add(cs)
                    s.flush()
                    cs_id = by_source[doc["source_id"]] = cs.id
                superseded = set(s.scalars(
                    select(Chunk.id).where(Chunk.document_id == doc["document_id"], Chunk.state == "live",
                                           Chunk.tombstoned.is_(True), Chunk.id.not_in(pending_delete))
                ))
                self._stage_entries(s, cs_id, doc["document_id"], doc["chunks"], "upsert")
                self._stage_entries(s, cs_id, doc["document_id"], superseded, "delete")
                for batch in _batches(sorted(superseded)):
                    s.execute(update(Tombstone)
                              .where(Tombstone.chunk_id.in_(batch), Tombstone.applied_snapshot_id.is_(None))
                              .values(changeset_id=cs_id))
                s.execute(update(Document).where(Document.id == doc["document_id"])
                          .values(etag=None, content_hash=None, updated_at=now))
                doc["changeset_id"] = cs_id
                doc["superseded"] = len(superseded)
            return stranded

    def set_run_planned(self, run_id: int, *, listed: int, planned: int,
                        documents: Sequence[tuple[str, str | None, int]] | None = None) -> None:
        """Record the plan; ``documents`` ((key, etag, size) per planned
        document) lets the reaper resume the run if its workers die."""
        with self.session() as s:
            values: dict[str, Any] = dict(docs_listed=listed, docs_planned=planned, heartbeat_at=utcnow(),
                                          worker=process_name())
            if documents is not None:
                run = s.get(SyncRun, run_id)
                summary = dict(run.summary or {}) if run is not None else {}
                summary["planned_keys"] = [[k, e, int(z)] for k, e, z in documents]
                values["summary"] = summary
            s.execute(update(SyncRun).where(SyncRun.id == run_id).values(**values))

    # Leases: the reaper (schedules/reaper.py) resumes or closes runs whose
    # worker stopped renewing them.

    def heartbeat_run(self, run_id: int, worker: str | None = None) -> None:
        """Renew a run's lease: the process working on it (``worker``,
        default this process's hostname:pid) is alive."""
        with self.session() as s:
            s.execute(update(SyncRun).where(SyncRun.id == run_id)
                      .values(heartbeat_at=utcnow(), worker=worker or process_name()))

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
        cutoff = now - dt.timedelta(seconds=lease_s)
        wall = time.time()
        out: list[SyncRunInfo] = []
        with self.session() as s:
            rows = s.scalars(
                select(SyncRun).where(or_(SyncRun.status == "running", SyncRun.build_status == "pending"))
                .order_by(SyncRun.id)
            ).all()
            locks = {r.name: r for r in s.scalars(select(Lock).where(Lock.name.like("build:%")))}
            for r in rows:
                seen = _aware(r.heartbeat_at or (r.started_at if r.status == "running" else r.finished_at))
                if seen is not None and seen > cutoff:
                    continue
                if r.status != "running":
                    lock = locks.get(f"build:{r.kb}")
                    if lock is not None and lock.owner is not None and lock.expires_at > wall:
                        continue
                out.append(_run_info(r))
        return out

    def unprocessed_documents(self, run_id: int) -> list[tuple[str, str | None, int]] | None:
        """Planned documents of a run that have no outcome yet, or None when
        the run recorded no plan (it cannot be resumed)."""
        with self.session() as s:
            run = s.get(SyncRun, run_id)
            if run is None:
                raise NotFoundError(f"no sync run {run_id}")
            planned = (run.summary or {}).get("planned_keys")
            if planned is None:
                return None
            done = set(s.scalars(select(DocumentResult.key).where(DocumentResult.sync_run_id == run_id)))
            return [(k, e, int(z)) for k, e, z in planned if k not in done]

    def record_reap(self, run_id: int, action: str, *, worker: str | None = None, **details: Any) -> int:
        """Note that the reaper acted on a run (and renew its lease, so the
        next reaper waits a full lease); returns how often it has been reaped."""
        with self.session() as s:
            run = s.get(SyncRun, run_id)
            if run is None:
                raise NotFoundError(f"no sync run {run_id}")
            summary = dict(run.summary or {})
            reaps = list(summary.get("reaps", []))
            reaps.append({"at": utcnow().isoformat(), "action": action, **details})
            summary["reaps"] = reaps
            run.summary = summary
            run.heartbeat_at, run.worker = utcnow(), worker or f"reaper:{process_name()}"
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
                    SyncRun.source_id == source_id, SyncRun.status.in_(("succeeded", "partial"))
                )
            )

    def run_progress(self, run_id: int) -> tuple[int, int]:
        """(documents processed, documents planned) for a run."""
        with self.session() as s:
            done = s.scalar(
                select(func.count()).where(DocumentResult.sync_run_id == run_id, DocumentResult.outcome != "deleted")
            ) or 0
            planned = s.scalar(select(SyncRun.docs_planned).where(SyncRun.id == run_id)) or 0
            return done, planned

    def record_outcome(self, run_id: int, outcome: DocumentOutcome, *, changeset_id: int | None = None) -> None:
        """Record a document outcome that changed nothing else (unchanged, failed).

        Raises :class:`StaleTaskError` (writing nothing) when the run no
        longer takes writes; so do all the staging methods below.
        """
        with self.session() as s:
            self._fence(s, run_id, changeset_id)
            self._put_result(s, run_id, outcome)
            if outcome.outcome == "failed":
                doc = s.get(Document, outcome.document_id)
                if doc is not None:
                    doc.error_reason = outcome.error_reason
                    doc.error_detail = outcome.error_detail
                    doc.updated_at = utcnow()
                    if doc.state != "active":
                        doc.state = "error"

    def record_failure(
        self, run_id: int, *, source_id: str, document_id: str, key: str, reason: str, detail: str,
        etag: str | None = None, size: int = 0, seconds: float = 0.0, changeset_id: int | None = None,
    ) -> None:
        """A document could not be indexed.

        Its previous chunks (if any) keep serving: a document that turns bad
        is stale, not gone.  A document never indexed is kept in state
        ``error`` with its etag, so an unchanged bad file is not retried on
        every sync unless the reason is transient.
        """
        with self.session() as s:
            self._fence(s, run_id, changeset_id)
            doc = s.get(Document, document_id)
            if doc is None:
                doc = Document(id=document_id, source_id=source_id, key=key, state="error", size=size, version=0)
                s.add(doc)
            if doc.state != "active":
                doc.state = "error"
                doc.etag = etag
            doc.error_reason, doc.error_detail, doc.updated_at = reason, detail, utcnow()
            s.flush()
            self._put_result(
                s,
                run_id,
                DocumentOutcome(
                    document_id=document_id, key=key, outcome="failed",
                    error_reason=reason, error_detail=detail, seconds=seconds,
                ),
            )

    def touch_document(self, run_id: int, document_id: str, *, etag: str | None, size: int, seconds: float,
                       changeset_id: int | None = None) -> None:
        """The etag moved but the content did not: remember the new etag."""
        with self.session() as s:
            self._fence(s, run_id, changeset_id)
            doc = s.get(Document, document_id)
            if doc is not None:
                doc.etag, doc.size = etag, size
                doc.error_reason = doc.error_detail = None  # readable again, and still the same
            self._put_result(
                s, run_id, DocumentOutcome(document_id=document_id, key=doc.key if doc else "", outcome="unchanged",
                                           seconds=seconds),
            )

    def _put_result(self, s: Session, run_id: int, o: DocumentOutcome) -> None:
        values = dict(
            sync_run_id=run_id, document_id=o.document_id, key=o.key, outcome=o.outcome,
            chunks_embedded=o.chunks_embedded, chunks_reused=o.chunks_reused, chunks_kept=o.chunks_kept,
            chunks_added=o.chunks_added, chunks_moved=o.chunks_moved, rechunk_reason=o.rechunk_reason,
            tombstones=o.tombstones, error_reason=o.error_reason,
            error_detail=o.error_detail, seconds=o.seconds, at=utcnow(),
        )
        stmt = self._insert(DocumentResult).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["sync_run_id", "document_id"],
            set_={k: v for k, v in values.items() if k not in ("sync_run_id", "document_id")},
        )
        s.execute(stmt)

    def stage_document(
        self,
        run_id: int,
        changeset_id: int,
        *,
        source: SourceInfo,
        document_id: str,
        key: str,
        etag: str | None,
        size: int,
        content_hash: str,
        title: str,
        parser: str,
        parser_version: str,
        chunks: Sequence[ChunkDraft],
        added_ids: set[str],
        removed_ids: set[str],
        outcome: DocumentOutcome,
    ) -> None:
        """Write one document's new version and its chunk diff, atomically.

        Added chunks become ``pending`` rows with an upsert entry; removed
        chunks are tombstoned at once (no longer servable) with a delete
        entry.  Kept chunks get their ordinal and metadata refreshed, and an
        upsert entry when their citation moved (page, anchor, line numbers) so
        the point's payload follows; their vector comes from the cache.
        """
        now = utcnow()
        with self.session() as s:
            # A task of a closed run must not write into a changeset that was
            # staged or applied without it: its chunks would stay pending forever.
            self._fence(s, run_id, changeset_id)
            doc = s.get(Document, document_id)
            if doc is None:
                doc = Document(id=document_id, source_id=source.id, key=key, version=0, first_seen_at=now)
                s.add(doc)
            doc.etag, doc.size, doc.content_hash = etag, size, content_hash
            doc.state, doc.error_reason, doc.error_detail = "active", None, None
            doc.parser, doc.parser_version, doc.title = parser, parser_version, title
            doc.version = (doc.version or 0) + 1
            doc.chunk_count = len(chunks)
            doc.updated_at, doc.deleted_at = now, None
            s.flush()

            by_id = {c.id: c for c in chunks}
            existing = {
                row.id: row
                for batch in _batches(list(by_id))
                for row in s.scalars(select(Chunk).where(Chunk.id.in_(batch)))
            }
            refreshed: set[str] = set()
            for draft in chunks:
                row = existing.get(draft.id)
                if row is not None and draft.id not in added_ids and (
                    row.anchor != draft.anchor or row.page != draft.page or (row.meta or {}) != dict(draft.meta)
                ):
                    # Same text, new place (page, lines, anchor): the point's
                    # citation must follow.  Rewritten from the vector cache,
                    # never re-embedded.
                    refreshed.add(draft.id)
                if row is None:
                    row = Chunk(id=draft.id, document_id=document_id, source_id=source.id, kb=source.kb,
                                state="pending", created_at=now)
                    s.add(row)
                if draft.id in added_ids:
                    row.tombstoned = False
                    row.added_changeset_id = changeset_id
                    if row.state == "removed":
                        row.state = "pending"
                row.ordinal, row.content_hash, row.text, row.kind = draft.ordinal, draft.content_hash, draft.text, draft.kind
                row.heading_path, row.anchor, row.page = list(draft.heading_path), draft.anchor, draft.page
                row.meta, row.doc_version, row.updated_at = dict(draft.meta), doc.version, now
            self._stage_entries(s, changeset_id, document_id, added_ids | refreshed, "upsert")
            self._tombstone(s, changeset_id, document_id, source.kb, removed_ids, reason="superseded")
            self._stage_entries(s, changeset_id, document_id, removed_ids, "delete")
            self._put_result(s, run_id, outcome)

    def stage_deletion(self, run_id: int, changeset_id: int, document_id: str, *, reason: str = "deleted") -> int:
        """The source no longer has this document: tombstone all its chunks."""
        with self.session() as s:
            self._fence(s, run_id, changeset_id)
            doc = s.get(Document, document_id)
            if doc is None or doc.state == "deleted":
                return 0
            ids = set(
                s.scalars(
                    select(Chunk.id).where(
                        Chunk.document_id == document_id,
                        Chunk.tombstoned.is_(False),
                        Chunk.state.in_(("live", "pending")),
                    )
                )
            )
            kb = s.scalar(select(Source.kb).where(Source.id == doc.source_id)) or ""
            self._tombstone(s, changeset_id, document_id, kb, ids, reason=reason)
            self._stage_entries(s, changeset_id, document_id, ids, "delete")
            doc.state, doc.deleted_at, doc.updated_at = "deleted", utcnow(), utcnow()
            doc.etag = doc.content_hash = None
            doc.chunk_count = 0
            self._put_result(
                s, run_id, DocumentOutcome(document_id=document_id, key=doc.key, outcome="deleted", tombstones=len(ids))
            )
            return len(ids)

    def _stage_entries(self, s: Session, changeset_id: int, document_id: str, ids: Iterable[str], op: str) -> None:
        rows = [dict(changeset_id=changeset_id, chunk_id=i, document_id=document_id, op=op) for i in sorted(ids)]
        for batch in _batches(rows):
            stmt = self._insert(ChangesetEntry).values(list(batch))
            stmt = stmt.on_conflict_do_update(
                index_elements=["changeset_id", "chunk_id"], set_={"op": stmt.excluded.op}
            )
            s.execute(stmt)

    def _tombstone(self, s: Session, changeset_id: int, document_id: str, kb: str, ids: set[str], *, reason: str) -> None:
        if not ids:
            return
        ordered = sorted(ids)
        for batch in _batches(ordered):
            s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(tombstoned=True, updated_at=utcnow()))
            already = set(
                s.scalars(
                    select(Tombstone.chunk_id).where(
                        Tombstone.chunk_id.in_(batch), Tombstone.changeset_id == changeset_id
                    )
                )
            )
            s.add_all(
                Tombstone(chunk_id=i, document_id=document_id, kb=kb, reason=reason, changeset_id=changeset_id)
                for i in batch
                if i not in already
            )

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
            if self._dialect == "postgresql":
                q = q.with_for_update()
            run = s.scalars(q).first()
            if run is None:
                raise NotFoundError(f"no sync run {run_id}")
            if run.status != "running":
                return _run_info(run), False
            rows = s.scalars(select(DocumentResult).where(DocumentResult.sync_run_id == run_id)).all()
            counts = {k: 0 for k in ("added", "modified", "unchanged", "deleted", "failed")}
            totals = {k: 0 for k in ("chunks_embedded", "chunks_reused", "chunks_kept", "chunks_added",
                                     "chunks_moved", "tombstones")}
            rechunked: dict[str, int] = {}
            for r in rows:
                counts[r.outcome] = counts.get(r.outcome, 0) + 1
                for k in totals:
                    totals[k] += getattr(r, k) or 0
                if r.rechunk_reason:
                    rechunked[r.rechunk_reason] = rechunked.get(r.rechunk_reason, 0) + 1
            processed = sum(counts.values()) - counts["deleted"]
            counts["unchanged"] += max(0, run.docs_listed - processed)
            cs = s.get(Changeset, run.changeset_id) if run.changeset_id else None
            entries = 0
            if cs is not None and cs.status == "open":
                entries = s.scalar(select(func.count()).where(ChangesetEntry.changeset_id == cs.id)) or 0
                if entries:
                    cs.status, cs.staged_at = "staged", utcnow()
                else:
                    s.delete(cs)
                    run.changeset_id = None
            indexed = counts["added"] + counts["modified"] + counts["unchanged"]
            if error is not None or (counts["failed"] and not indexed):
                run.status = "failed"
            elif counts["failed"]:
                run.status = "partial"
            else:
                run.status = "succeeded"
            if run.held_reason and error is None:
                run.status = "held"  # the deletion guard kept this run's deletions back
            # Kept from the running summary: the deletion guard's hold (written
            # at plan time) and the reaper's resumes; planned_keys are dropped.
            kept = {k: v for k, v in (run.summary or {}).items() if k in ("held", "reaps") and v}
            run.error = error
            run.finished_at = utcnow()
            run.summary = {
                **kept,
                "documents": counts,
                "documents_changed": counts["added"] + counts["modified"] + counts["deleted"],
                **totals,
                "rechunked": rechunked,
                "changeset_entries": entries,
            }
            run.build_status = "pending"
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
            return s.scalar(select(Changeset.status).where(Changeset.id == cs)) == "applied"

    # Deletion guard: a sync that would tombstone too much of a source holds
    # its deletions until a person confirms them (workers/pipeline.py plan_sync).

    def hold_deletions(self, run_id: int, *, reason: str, held: dict[str, Any]) -> None:
        """Mark a run as holding its deletions back; ``held`` (counts) joins its summary."""
        with self.session() as s:
            run = s.get(SyncRun, run_id)
            if run is None:
                raise NotFoundError(f"no sync run {run_id}")
            run.held_reason = reason
            run.summary = {**(run.summary or {}), "held": dict(held)}

    def confirm_deletions(self, source_id: str, count: int, *, actor: str) -> dict[str, Any]:
        """Allow the next sync of a source to delete up to ``count`` documents (one shot)."""
        with self.session() as s:
            row = s.get(Source, source_id)
            if row is None:
                raise NotFoundError(f"no source {source_id!r} (see `freshindex sources list`)")
            confirmation = {"count": int(count), "by": actor, "at": utcnow().isoformat()}
            row.options = {**(row.options or {}), "confirmed_deletions": confirmation}
            return confirmation

    def take_deletion_confirmation(self, source_id: str) -> int | None:
        """Remove and return a source's pending confirmation (the count), if any.

        Atomic: of two syncs racing for one confirmation, one gets it.
        """
        with self.session() as s:
            q = select(Source).where(Source.id == source_id)
            if self._dialect == "postgresql":
                q = q.with_for_update()
            row = s.scalars(q).first()
            if row is None or "confirmed_deletions" not in (row.options or {}):
                return None
            options = dict(row.options)
            confirmation = options.pop("confirmed_deletions") or {}
            row.options = options
            return int(confirmation.get("count", 0))

    def held_deletions(self, kb: str) -> dict[str, int]:
        """Per source of ``kb``: documents its latest finished run held back (0 if not held).

        Every source of the knowledge base has an entry, so the gauge built
        from it exists (at 0) before the first hold.
        """
        with self.session() as s:
            sources = list(s.scalars(select(Source.id).where(Source.kb == kb)))
            latest = (
                select(SyncRun.source_id, func.max(SyncRun.id).label("run_id"))
                .where(SyncRun.kb == kb, SyncRun.status != "running")
                .group_by(SyncRun.source_id)
                .subquery()
            )
            runs = s.scalars(select(SyncRun).join(latest, SyncRun.id == latest.c.run_id)).all()
            out = {source_id: 0 for source_id in sources}
            for r in runs:
                if r.source_id in out and r.status == "held":
                    out[r.source_id] = int(((r.summary or {}).get("held") or {}).get("deletions", 0))
            return out

    def document_errors(self, run_id: int | None = None, source_id: str | None = None) -> list[DocumentErrorInfo]:
        with self.session() as s:
            q = (
                select(DocumentResult, SyncRun.source_id)
                .join(SyncRun, SyncRun.id == DocumentResult.sync_run_id)
                .where(DocumentResult.outcome == "failed")
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

    # -- vector cache ---------------------------------------------------------

    def cached_vectors(self, model_id: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        wanted = sorted(set(hashes))
        found: dict[str, np.ndarray] = {}
        with self.session() as s:
            for batch in _batches(wanted):
                q = select(Embedding.content_hash, Embedding.dim, Embedding.vector).where(
                    Embedding.model_id == model_id, Embedding.content_hash.in_(batch)
                )
                for h, dim, blob in s.execute(q):
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if vec.shape[0] == dim:
                        found[h] = vec
        return found

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [
            dict(model_id=model_id, content_hash=h, dim=int(v.shape[0]), vector=np.asarray(v, np.float32).tobytes(),
                 created_at=utcnow())
            for h, v in vectors.items()
        ]
        with self.session() as s:
            for batch in _batches(rows, 200):
                s.execute(self._insert(Embedding).values(list(batch)).on_conflict_do_nothing())

    def cache_size(self, model_id: str | None = None) -> int:
        with self.session() as s:
            q = select(func.count()).select_from(Embedding)
            if model_id:
                q = q.where(Embedding.model_id == model_id)
            return s.scalar(q) or 0

    # -- changesets and builds -----------------------------------------------

    def staged_changesets(self, kb: str) -> list[int]:
        with self.session() as s:
            return list(
                s.scalars(
                    select(Changeset.id).where(Changeset.kb == kb, Changeset.status == "staged").order_by(Changeset.id)
                )
            )

    def changeset_ops(self, changeset_ids: Sequence[int]) -> dict[str, str]:
        """The final operation per chunk over the changesets, in order."""
        ops: dict[str, str] = {}
        with self.session() as s:
            for cs_id in sorted(changeset_ids):
                for chunk_id, op in s.execute(
                    select(ChangesetEntry.chunk_id, ChangesetEntry.op).where(ChangesetEntry.changeset_id == cs_id)
                ):
                    ops[chunk_id] = op
        return ops

    def chunk_rows(self, ids: Sequence[str]) -> list[ChunkRow]:
        out: list[ChunkRow] = []
        with self.session() as s:
            for batch in _batches(list(ids)):
                q = (
                    select(Chunk, Document.key, Document.title, Source.acl)
                    .join(Document, Document.id == Chunk.document_id)
                    .join(Source, Source.id == Chunk.source_id)
                    .where(Chunk.id.in_(batch))
                )
                out.extend(_chunk_row(c, key, title, acl) for c, key, title, acl in s.execute(q))
        return out

    def live_chunk_ids_for_kb(self, kb: str) -> list[str]:
        """Chunks physically in the active snapshot of ``kb``."""
        with self.session() as s:
            return list(s.scalars(select(Chunk.id).where(Chunk.kb == kb, Chunk.state == "live").order_by(Chunk.id)))

    def count_live(self, kb: str) -> int:
        with self.session() as s:
            return s.scalar(select(func.count()).where(Chunk.kb == kb, Chunk.state == "live")) or 0

    def chunk_states(self, ids: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        with self.session() as s:
            for batch in _batches(list(ids)):
                out.update({cid: st for cid, st in s.execute(select(Chunk.id, Chunk.state).where(Chunk.id.in_(batch)))})
        return out

    def chunk_hashes(self, ids: Sequence[str]) -> dict[str, str]:
        """Content hash by chunk id."""
        out: dict[str, str] = {}
        with self.session() as s:
            for batch in _batches(list(ids)):
                out.update({cid: h for cid, h in s.execute(select(Chunk.id, Chunk.content_hash).where(Chunk.id.in_(batch)))})
        return out

    def chunk_status(self, ids: Sequence[str]) -> dict[str, ChunkStatus]:
        """Recheck for the query path: is each hit still servable?"""
        out: dict[str, ChunkStatus] = {}
        with self.session() as s:
            for batch in _batches(list(ids)):
                for cid, state, tomb in s.execute(
                    select(Chunk.id, Chunk.state, Chunk.tombstoned).where(Chunk.id.in_(batch))
                ):
                    out[cid] = ChunkStatus(id=cid, state=state, tombstoned=tomb)
        return out

    def tombstone_backlog(self, kb: str | None = None) -> int:
        """Tombstones written but not yet applied to a serving snapshot."""
        with self.session() as s:
            q = select(func.count()).select_from(Tombstone).where(Tombstone.applied_snapshot_id.is_(None))
            if kb:
                q = q.where(Tombstone.kb == kb)
            return s.scalar(q) or 0

    # -- snapshots --------------------------------------------------------------

    def next_snapshot_version(self, kb: str) -> int:
        with self.session() as s:
            return (s.scalar(select(func.max(Snapshot.version)).where(Snapshot.kb == kb)) or 0) + 1

    def create_snapshot(
        self, *, snapshot_id: str, kb: str, version: int, parent_id: str | None, collection: str, strategy: str,
        embedding_model: str, parser_version: str, changeset_ids: Sequence[int], upserts: int, deletes: int,
    ) -> SnapshotInfo:
        with self.session() as s:
            row = Snapshot(
                id=snapshot_id, kb=kb, version=version, parent_id=parent_id, collection=collection, status="building",
                strategy=strategy, embedding_model=embedding_model, parser_version=parser_version,
                changeset_ids=list(changeset_ids), upserts=upserts, deletes=deletes,
            )
            s.add(row)
            s.flush()
            return _snap_info(row)

    def fail_snapshot(self, snapshot_id: str, reason: str, verification: dict[str, Any] | None = None) -> None:
        with self.session() as s:
            s.execute(
                update(Snapshot)
                .where(Snapshot.id == snapshot_id)
                .values(status="failed", failure_reason=reason, verification=verification or {})
            )

    def mark_verified(self, snapshot_id: str, *, point_count: int, verification: dict[str, Any], seconds: float) -> None:
        with self.session() as s:
            s.execute(
                update(Snapshot)
                .where(Snapshot.id == snapshot_id)
                .values(status="verified", point_count=point_count, verification=verification, build_seconds=seconds)
            )

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
            previous = s.scalars(select(Snapshot).where(Snapshot.kb == snap.kb, Snapshot.status == "active")).all()
            for p in previous:
                if p.id != snapshot_id:
                    p.status = "retired"
            upserts = [cid for cid, op in ops.items() if op == "upsert"]
            deletes = [cid for cid, op in ops.items() if op == "delete"]
            for batch in _batches(upserts):
                # snapshot_id records the build that last wrote the point.
                s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(state="live", snapshot_id=snapshot_id))
            for batch in _batches(deletes):
                s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(state="removed"))
            cs_ids = list(snap.changeset_ids or [])
            if cs_ids:
                s.execute(
                    update(Changeset)
                    .where(Changeset.id.in_(cs_ids))
                    .values(status="applied", applied_at=now, snapshot_id=snapshot_id)
                )
                s.execute(
                    update(Tombstone)
                    .where(Tombstone.changeset_id.in_(cs_ids), Tombstone.applied_snapshot_id.is_(None))
                    .values(applied_snapshot_id=snapshot_id)
                )
            s.add(
                AliasEvent(
                    kb=snap.kb, from_snapshot_id=previous[0].id if previous else None, to_snapshot_id=snapshot_id,
                    actor=actor, reason=reason,
                )
            )
            snap.status, snap.activated_at = "active", now

    def record_alias_event(self, kb: str, from_id: str | None, to_id: str, *, actor: str, reason: str) -> None:
        with self.session() as s:
            s.add(AliasEvent(kb=kb, from_snapshot_id=from_id, to_snapshot_id=to_id, actor=actor, reason=reason))

    def get_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        with self.session() as s:
            row = s.get(Snapshot, snapshot_id)
            if row is None:
                raise NotFoundError(f"no snapshot {snapshot_id!r}")
            return _snap_info(row)

    def active_snapshot(self, kb: str) -> SnapshotInfo | None:
        with self.session() as s:
            row = s.scalars(select(Snapshot).where(Snapshot.kb == kb, Snapshot.status == "active")).first()
            return _snap_info(row) if row is not None else None

    def snapshot_for_collection(self, collection: str) -> SnapshotInfo | None:
        with self.session() as s:
            row = s.scalars(select(Snapshot).where(Snapshot.collection == collection)).first()
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
            q = select(Snapshot).where(Snapshot.kb == kb, Snapshot.status.in_(("building", "verified")))
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
            current = s.scalars(select(Snapshot).where(Snapshot.kb == target.kb, Snapshot.status == "active")).all()
            for c in current:
                if c.id != target_id:
                    c.status = "retired"
            ids = sorted(touched)
            docs: set[str] = set()
            withheld: dict[str, tuple[str, str, str]] = {}  # chunk id -> (document, source, reason)
            for batch in _batches(ids):
                docs.update(s.scalars(select(Chunk.document_id).where(Chunk.id.in_(batch))))
                live = [i for i in batch if i in present]
                gone = [i for i in batch if i not in present]
                final = self._final_tombstones(s, live)
                withheld.update(final)
                live = [i for i in live if i not in final]
                if live:
                    s.execute(update(Chunk).where(Chunk.id.in_(live)).values(state="live", tombstoned=False))
                if final:
                    # Physically in the target collection, never servable again:
                    # tombstoned (the query path drops them at once) and staged for
                    # deletion, so the next build removes the points.
                    s.execute(update(Chunk).where(Chunk.id.in_(list(final))).values(state="live", tombstoned=True))
                if gone:
                    s.execute(update(Chunk).where(Chunk.id.in_(gone)).values(state="removed", tombstoned=True))
            # A document deleted at its source stays deleted: only documents that
            # still exist are re-compared with the source on the next sync.
            for batch in _batches(sorted(docs)):
                s.execute(
                    update(Document)
                    .where(Document.id.in_(batch), Document.state != "deleted")
                    .values(etag=None, content_hash=None)
                )
            if withheld:
                self._stage_withheld(s, target.kb, withheld)
            if changesets_reverted:
                s.execute(update(Changeset).where(Changeset.id.in_(list(changesets_reverted)))
                          .values(status="rolled_back"))
            if changesets_reapplied:
                s.execute(update(Changeset).where(Changeset.id.in_(list(changesets_reapplied)))
                          .values(status="applied", applied_at=now))
            s.add(AliasEvent(kb=target.kb, from_snapshot_id=current[0].id if current else None,
                             to_snapshot_id=target_id, actor=actor, reason=reason))
            target.status, target.activated_at = "active", now
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
            if r.state == "deleted":
                out[r.id] = (r.document_id, r.source_id, "deleted")
            elif r.tombstoned and newest.get(r.id) in FINAL_TOMBSTONE_REASONS:
                out[r.id] = (r.document_id, r.source_id, newest[r.id])
        return out

    def _stage_withheld(self, s: Session, kb: str, withheld: dict[str, tuple[str, str, str]]) -> None:
        """Stage deletes (and keep tombstones) for chunks a rollback brought back physically."""
        by_source: dict[str, list[str]] = {}
        for cid, (_doc, source_id, _reason) in withheld.items():
            by_source.setdefault(source_id, []).append(cid)
        for source_id, chunk_ids in sorted(by_source.items()):
            cs = Changeset(kb=kb, source_id=source_id, sync_run_id=None, status="staged", staged_at=utcnow())
            s.add(cs)
            s.flush()
            for cid in sorted(chunk_ids):
                doc_id, _src, reason = withheld[cid]
                s.add(ChangesetEntry(changeset_id=cs.id, chunk_id=cid, document_id=doc_id, op="delete"))
                s.add(Tombstone(chunk_id=cid, document_id=doc_id, kb=kb, reason=reason, changeset_id=cs.id))

    def changeset_chunk_ids(self, changeset_ids: Sequence[int]) -> set[str]:
        with self.session() as s:
            out: set[str] = set()
            for batch in _batches(sorted(changeset_ids)):
                out.update(s.scalars(select(ChangesetEntry.chunk_id).where(ChangesetEntry.changeset_id.in_(batch))))
            return out

    def alias_events(self, kb: str, limit: int = 20) -> list[dict[str, Any]]:
        with self.session() as s:
            rows = s.scalars(select(AliasEvent).where(AliasEvent.kb == kb).order_by(AliasEvent.id.desc()).limit(limit))
            return [{"from": r.from_snapshot_id, "to": r.to_snapshot_id, "actor": r.actor, "reason": r.reason,
                     "at": r.at.isoformat()} for r in rows]

    # -- archive export / import ---------------------------------------------------

    def export_snapshot(self, snapshot_id: str, chunk_ids: Sequence[str], *, current: bool) -> dict[str, Any]:
        """Everything needed to serve ``snapshot_id`` elsewhere: its manifest,
        the chunk rows it holds, their documents and sources, the canaries.

        ``current`` says the documents' etags and hashes describe this
        snapshot (it is the active one); otherwise they are left out so a
        restored registry re-checks every document against its source.
        """
        snap = self.get_snapshot(snapshot_id)
        with self.session() as s:
            chunks = []
            for batch in _batches(sorted(chunk_ids)):
                chunks.extend(s.scalars(select(Chunk).where(Chunk.id.in_(batch))))
            doc_ids = sorted({c.document_id for c in chunks})
            docs = []
            for batch in _batches(doc_ids):
                docs.extend(s.scalars(select(Document).where(Document.id.in_(batch))))
            sources = list(s.scalars(select(Source).where(Source.id.in_(sorted({d.source_id for d in docs})))))
            canaries = list(s.scalars(select(Canary).where(Canary.kb == snap.kb)))

            def row(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
                out = {}
                for col in obj.__table__.columns:
                    if col.key in skip:
                        continue
                    v = getattr(obj, col.key)
                    out[col.key] = v.isoformat() if isinstance(v, dt.datetime) else v
                return out

            doc_skip = () if current else ("etag", "content_hash")
            return {
                "snapshot": row(s.get(Snapshot, snapshot_id)),
                "sources": [row(x) for x in sources],
                "documents": [row(x, doc_skip) for x in docs],
                "chunks": [row(x) for x in chunks],
                "canaries": [row(x, ("id",)) for x in canaries],
            }

    def import_snapshot(self, data: dict[str, Any]) -> SnapshotInfo:
        """Load an :meth:`export_snapshot` into a registry that does not know this
        knowledge base yet.  Chunks arrive live; the snapshot arrives
        ``verified`` (the caller swaps the alias, then activates it)."""
        snap = data["snapshot"]
        kb = snap["kb"]
        with self.session() as s:
            if s.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.kb == kb)):
                raise ConfigError(f"knowledge base {kb!r} already has snapshots here; restore into a fresh data "
                                  "directory (or a fresh registry)")

            def load(model: Any, values: dict[str, Any]) -> Any:
                kwargs = {}
                for col in model.__table__.columns:
                    if col.key not in values:
                        continue
                    v = values[col.key]
                    if v is not None and isinstance(col.type, DateTime):
                        v = dt.datetime.fromisoformat(v)
                    kwargs[col.key] = v
                return model(**kwargs)

            for src in data["sources"]:
                if s.get(Source, src["id"]) is None:
                    s.add(load(Source, src))
            s.flush()
            for doc in data["documents"]:
                if s.get(Document, doc["id"]) is None:
                    s.add(load(Document, doc))
            s.flush()
            for chunk in data["chunks"]:
                s.merge(load(Chunk, {**chunk, "state": "live", "tombstoned": False}))
            for canary in data["canaries"]:
                s.add(load(Canary, canary))
            row = load(Snapshot, {**snap, "status": "verified", "activated_at": None})
            s.add(row)
            s.flush()
            return _snap_info(row)

    def set_snapshot_active(self, snapshot_id: str, *, actor: str, reason: str) -> None:
        """Activate a snapshot whose chunk states are already right (restore)."""
        with self.session() as s:
            snap = s.get(Snapshot, snapshot_id)
            if snap is None:
                raise NotFoundError(f"no snapshot {snapshot_id!r}")
            previous = s.scalars(select(Snapshot).where(Snapshot.kb == snap.kb, Snapshot.status == "active")).all()
            for p in previous:
                p.status = "retired"
            s.add(AliasEvent(kb=snap.kb, from_snapshot_id=previous[0].id if previous else None,
                             to_snapshot_id=snapshot_id, actor=actor, reason=reason))
            snap.status, snap.activated_at = "active", utcnow()

    # -- canaries -----------------------------------------------------------------

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
            if s.execute(delete(Canary).where(Canary.id == canary_id)).rowcount == 0:
                raise NotFoundError(f"no canary {canary_id}")

    # -- locks ------------------------------------------------------------------

    def acquire_lock(self, name: str, owner: str, ttl: float) -> int | None:
        """Take the lease ``name`` if it is free or expired.

        Returns a fencing token that grows with every acquisition, or None if
        someone else holds an unexpired lease.
        """
        now = time.time()
        with self.session() as s:
            self._lock_row(s, name)
            q = select(Lock).where(Lock.name == name)
            if self._dialect == "postgresql":
                q = q.with_for_update()
            row = s.scalars(q).one()
            if row.owner is not None and row.expires_at > now and row.owner != owner:
                return None
            row.owner, row.token = owner, row.token + 1
            row.expires_at, row.acquired_at = now + ttl, now
            return row.token

    def renew_lock(self, name: str, token: int, ttl: float) -> bool:
        with self.session() as s:
            res = s.execute(
                update(Lock).where(Lock.name == name, Lock.token == token).values(expires_at=time.time() + ttl)
            )
            return res.rowcount == 1

    def release_lock(self, name: str, token: int) -> None:
        with self.session() as s:
            s.execute(update(Lock).where(Lock.name == name, Lock.token == token).values(owner=None, expires_at=0.0))

    def lock_holder(self, name: str) -> tuple[str | None, float, int]:
        with self.session() as s:
            row = s.get(Lock, name)
            if row is None:
                return None, 0.0, 0
            return row.owner, row.expires_at, row.token

    def _lock_row(self, s: Session, name: str) -> None:
        s.execute(self._insert(Lock).values(name=name, owner=None, token=0, expires_at=0.0).on_conflict_do_nothing())

    # -- health -------------------------------------------------------------------

    def health(self, kb: str) -> dict[str, Any]:
        """Signals for dashboards and for labelling evidence as stale."""
        with self.session() as s:
            last_ok = s.scalar(
                select(func.max(SyncRun.finished_at)).where(
                    SyncRun.kb == kb, SyncRun.status.in_(("succeeded", "partial"))
                )
            )
            errors = s.scalar(
                select(func.count()).select_from(Document)
                .join(Source, Source.id == Document.source_id)
                .where(Source.kb == kb, Document.error_reason.is_not(None))
            ) or 0
            pending = s.scalar(
                select(func.count()).select_from(Changeset).where(
                    Changeset.kb == kb, or_(Changeset.status == "staged", Changeset.status == "open")
                )
            ) or 0
            by_reason = {reason: n for reason, n in s.execute(
                select(Document.error_reason, func.count()).join(Source, Source.id == Document.source_id)
                .where(Source.kb == kb, Document.error_reason.is_not(None)).group_by(Document.error_reason)
            )}
            by_status = {status: n for status, n in s.execute(
                select(Snapshot.status, func.count()).where(Snapshot.kb == kb).group_by(Snapshot.status)
            )}
            held: dict[str, int] = {}
            for (verification,) in s.execute(select(Snapshot.verification).where(Snapshot.kb == kb,
                                                                                Snapshot.status == "failed")):
                check = (verification or {}).get("failed_check") or "error"
                held[check] = held.get(check, 0) + 1
        active = self.active_snapshot(kb)
        return {
            "kb": kb,
            "active_snapshot": active.id if active else None,
            "last_successful_sync": last_ok.isoformat() if last_ok else None,
            "documents_in_error": errors,
            "documents_in_error_by_reason": by_reason,
            "snapshots_by_status": by_status,
            "held_builds_by_check": held,
            "deletions_held_by_source": self.held_deletions(kb),
            "pending_changesets": pending,
            "tombstone_backlog": self.tombstone_backlog(kb),
            "live_chunks": self.count_live(kb),
        }

    def purge_source_rows(self, source_id: str) -> None:
        """Test and maintenance helper: forget a source entirely."""
        with self.session() as s:
            s.execute(delete(Source).where(Source.id == source_id))


def _source_info(r: Source) -> SourceInfo:
    return SourceInfo(
        id=r.id, kb=r.kb, kind=r.kind, location=r.location, owner=r.owner, options=dict(r.options or {}),
        acl=tuple(r.acl or ()), poll_interval_s=r.poll_interval_s, enabled=r.enabled, created_at=r.created_at,
    )


def _doc_state(r: Document) -> DocumentState:
    return DocumentState(
        id=r.id, source_id=r.source_id, key=r.key, etag=r.etag, size=r.size, content_hash=r.content_hash,
        state=r.state, version=r.version, parser_version=r.parser_version, error_reason=r.error_reason,
    )


def _chunk_row(c: Chunk, key: str, title: str | None, acl: list[str] | None) -> ChunkRow:
    return ChunkRow(
        id=c.id, document_id=c.document_id, source_id=c.source_id, kb=c.kb, key=key, title=title,
        ordinal=c.ordinal, content_hash=c.content_hash, text=c.text, kind=c.kind,
        heading_path=tuple(c.heading_path or ()), anchor=c.anchor, page=c.page, meta=dict(c.meta or {}),
        doc_version=c.doc_version, state=c.state, tombstoned=c.tombstoned, added_changeset_id=c.added_changeset_id,
        acl=tuple(acl or ()),
    )


def _snap_info(r: Snapshot) -> SnapshotInfo:
    return SnapshotInfo(
        id=r.id, kb=r.kb, version=r.version, parent_id=r.parent_id, collection=r.collection, status=r.status,
        strategy=r.strategy, point_count=r.point_count, embedding_model=r.embedding_model,
        parser_version=r.parser_version, changeset_ids=tuple(r.changeset_ids or ()), upserts=r.upserts,
        deletes=r.deletes, verification=dict(r.verification or {}), failure_reason=r.failure_reason,
        archive_uri=r.archive_uri, archive_sha256=r.archive_sha256, build_seconds=r.build_seconds, created_at=r.created_at,
        activated_at=r.activated_at,
    )


def process_name() -> str:
    """hostname:pid of this process, as recorded on the runs it works on."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    # SQLite hands back naive datetimes; every registry time is UTC.
    return t.replace(tzinfo=dt.UTC) if t is not None and t.tzinfo is None else t


def _run_info(r: SyncRun) -> SyncRunInfo:
    return SyncRunInfo(
        id=r.id, source_id=r.source_id, kb=r.kb, trigger=r.trigger, status=r.status, started_at=r.started_at,
        finished_at=r.finished_at, docs_listed=r.docs_listed, docs_planned=r.docs_planned,
        changeset_id=r.changeset_id, snapshot_id=r.snapshot_id, summary=dict(r.summary or {}), error=r.error,
        build_status=r.build_status, build_error=r.build_error, heartbeat_at=r.heartbeat_at, worker=r.worker,
        stale_tasks=r.stale_tasks or 0, followup_requested=bool(r.followup_requested), held_reason=r.held_reason,
    )


__all__ = ["TRANSIENT_REASONS", "Registry", "RunClaim"]
