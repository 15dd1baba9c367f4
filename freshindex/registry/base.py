"""The shared ground of every registry store: engine, transactions, dialect helpers.

:class:`_Base` holds the engine and session factory; each concern's store
(:mod:`registry.sources`, :mod:`registry.runs`, ...) is a mixin over it and
:class:`registry.Registry` composes them.  The run fence lives here too, since
both the run ledger and document staging must check it inside their own
transaction.  The ``_*_info`` functions turn ORM rows into the plain records
of :mod:`registry.records`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self

from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, defer, sessionmaker

from freshindex.core.enums import ChangesetStatus, RunStatus
from freshindex.core.errors import ConfigError, RetryableError, StaleTaskError, WriteConflictError
from freshindex.registry import db
from freshindex.registry.records import ChunkRow, DocumentRecord, SnapshotInfo, SourceInfo, SyncRunInfo
from freshindex.registry.schema import Changeset, Chunk, Document, Snapshot, Source, SyncRun

#: Rows per IN (...) clause; SQLite allows 32766 parameters, PostgreSQL more.
_BATCH = 500


def _batches(items: Sequence[Any], size: int = _BATCH) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _refusal(run: SyncRun | None, changeset_id: int | None, cs_status: str | None) -> str | None:
    """Why a task of ``run`` may no longer write (None: it may)."""
    if run is None:
        return "the run does not exist"
    if run.status != RunStatus.RUNNING:
        return f"the run is {run.status}" + (f" ({run.error})" if run.error else "")
    if changeset_id is not None and run.changeset_id != changeset_id:
        return f"changeset {changeset_id} is not the run's (it has {run.changeset_id})"
    if cs_status != ChangesetStatus.OPEN:
        return f"its changeset is {cs_status or 'gone'}"
    return None


class _Base:
    """Engine, session factory and dialect helpers shared by the stores; no queries of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._dialect = engine.dialect.name

    @classmethod
    def open(cls, url: str, *, auto_migrate: bool = True, pool_size: int = 5) -> Self:
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

    @contextmanager
    def staging_session(self) -> Iterator[Session]:
        """:meth:`session` for the fenced staging writes, where a unique-key race is retryable.

        Two deliveries of one document task can run at once (the first's
        acknowledgement was lost with its broker connection); both insert the
        same content-derived rows and the later commit fails on a unique key.
        That is :class:`WriteConflictError`: the retry finds the document
        staged and records it unchanged, instead of failing it.
        """
        try:
            with self.session() as s:
                yield s
        except IntegrityError as exc:
            raise WriteConflictError(f"a concurrent write won: {exc.orig}") from exc

    def ping(self) -> None:
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except SQLAlchemyError as exc:
            raise RetryableError(f"registry unreachable: {exc}") from exc

    def _insert(self, table: Any) -> Any:
        dialect = postgresql if self._dialect == "postgresql" else sqlite
        return dialect.insert(table)

    def _for_update(self, q: Any) -> Any:
        """``q`` locking the rows it reads until the transaction ends (PostgreSQL ``FOR UPDATE``); on
        SQLite the statement as is, the transaction already holding the one write lock (:meth:`_write_lock`)."""
        return q.with_for_update() if self._dialect == "postgresql" else q

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
        transaction ends (``FOR KEY SHARE`` on PostgreSQL; SQLite's write lock),
        and every transition out of running/open locks it first
        (:meth:`finish_sync_run`, :meth:`open_or_join_run`), so no write can
        land in a changeset that was staged or applied meanwhile.  Must be the
        session's first statement.
        """
        self._write_lock(s)
        # Not the summary: it holds the run's whole plan (a row per document), and every task fences.
        q = select(SyncRun).options(defer(SyncRun.summary)).where(SyncRun.id == run_id)
        if self._dialect == "postgresql":
            # FOR KEY SHARE: the documents of one run stage concurrently; a
            # transition (finish, adoption) takes FOR UPDATE and waits for them.
            # Not FOR SHARE: that also blocks the plain UPDATEs of the run row
            # (each task's heartbeat, two per document), which then queue every
            # later fence behind them: a convoy that grew with the worker count
            # (bench/results/workers_load.md).  A non-key UPDATE takes FOR NO
            # KEY UPDATE, which FOR KEY SHARE lets through; FOR UPDATE it does not.
            q = q.with_for_update(read=True, key_share=True)
        run = s.scalars(q).first()
        cs_status = None
        if run is not None and (changeset_id or run.changeset_id) is not None:
            cs_status = s.scalar(select(Changeset.status).where(Changeset.id == (changeset_id or run.changeset_id)))
        why = _refusal(run, changeset_id, cs_status)
        if why is not None:
            raise StaleTaskError(run_id, changeset_id, why)
        assert run is not None
        return run


def _source_info(r: Source) -> SourceInfo:
    return SourceInfo(
        id=r.id, kb=r.kb, kind=r.kind, location=r.location, owner=r.owner, options=dict(r.options or {}),
        acl=tuple(r.acl or ()), poll_interval_s=r.poll_interval_s, enabled=r.enabled, created_at=r.created_at,
        tenant=r.tenant or "default", acl_rules=tuple(dict(x) for x in (r.acl_rules or ())),
        sensitivity=r.sensitivity or "internal", acl_version=r.acl_version or 1, removed=r.removed_at is not None,
    )



def _doc_record(r: Document) -> DocumentRecord:
    return DocumentRecord(
        id=r.id, source_id=r.source_id, key=r.key, etag=r.etag, size=r.size, content_hash=r.content_hash,
        state=r.state, version=r.version, parser_version=r.parser_version, error_reason=r.error_reason,
        acl=tuple(r.acl) if r.acl is not None else None, tenant=r.tenant or "default",
        sensitivity=r.sensitivity or "internal", acl_version=r.acl_version or 0, acl_fingerprint=r.acl_fingerprint,
        source_hash=r.source_hash, error_detail=r.error_detail, shape_hash=r.shape_hash,
    )



#: The chunk's columns :func:`_chunk_row` takes, in its order: selected as columns, not ORM objects (the builder
#: and the verifier each read every chunk of a full build; 14,467 as objects took 1.7 s, as columns 1.1 s).
CHUNK_ROW_COLUMNS = (Chunk.id, Chunk.document_id, Chunk.source_id, Chunk.kb, Chunk.ordinal, Chunk.content_hash,
                     Chunk.text, Chunk.kind, Chunk.heading_path, Chunk.anchor, Chunk.page, Chunk.meta, Chunk.doc_version,
                     Chunk.state, Chunk.tombstoned, Chunk.added_changeset_id)


def _chunk_row(c: tuple[Any, ...], key: str, title: str | None, acl: list[str] | None, tenant: str | None = "default",
               acl_version: int | None = 0, sensitivity: str | None = "internal") -> ChunkRow:
    """The :class:`ChunkRow` of one chunk's :data:`CHUNK_ROW_COLUMNS` and its document's fields."""
    (cid, document_id, source_id, kb, ordinal, chash, text, kind, heading_path, anchor, page, meta, doc_version, state,
     tombstoned, added) = c
    return ChunkRow(
        id=cid, document_id=document_id, source_id=source_id, kb=kb, key=key, title=title, ordinal=ordinal,
        content_hash=chash, text=text, kind=kind, heading_path=tuple(heading_path or ()), anchor=anchor, page=page,
        meta=dict(meta or {}), doc_version=doc_version, state=state, tombstoned=tombstoned, added_changeset_id=added,
        acl=tuple(acl or ()), tenant=tenant or "default", acl_version=acl_version or 0,
        sensitivity=sensitivity or "internal",
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



def _run_info(r: SyncRun) -> SyncRunInfo:
    return SyncRunInfo(
        id=r.id, source_id=r.source_id, kb=r.kb, trigger=r.trigger, status=r.status, started_at=r.started_at,
        finished_at=r.finished_at, docs_listed=r.docs_listed, docs_planned=r.docs_planned,
        changeset_id=r.changeset_id, snapshot_id=r.snapshot_id, summary=dict(r.summary or {}), error=r.error,
        build_status=r.build_status, build_error=r.build_error, heartbeat_at=r.heartbeat_at, worker=r.worker,
        stale_tasks=r.stale_tasks or 0, followup_requested=bool(r.followup_requested), held_reason=r.held_reason,
        lag_s=r.lag_s,
    )
