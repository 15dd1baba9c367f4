"""The poison-pill counter: which documents a worker process began and never finished (migration 0012)."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import ColumnElement

from freshindex.core.enums import RunStatus
from freshindex.registry.base import _Base, _batches, process_name
from freshindex.registry.schema import DocumentAttempt, SyncRun, utcnow


class AttemptsStore(_Base):
    """Document attempts (:class:`registry.schema.DocumentAttempt`), read and written by
    :func:`workers.pipeline.begin_attempt` and the threads of :mod:`workers.ahead`."""

    def begin_document_attempt(self, document_id: str, *, etag: str | None, run_id: int,
                               worker: str | None = None, closing: Collection[str] = ()) -> tuple[int, bool]:
        """A worker process begins ``document_id`` (before fetching or parsing it); returns
        (crashes counted against this version of it, whether the previous attempt just counted).

        The previous attempt crashed when it is still open: its process began
        the document and never ended the attempt (:meth:`end_document_attempt`),
        so it died on it.  Durable and shared by every process, unlike the
        broker's ``redelivered`` flag (set by RabbitMQ, not by Redis or SQS
        after a visibility timeout) and Celery's ``retries`` (which counts
        only retries the task asked for, never a worker lost).  A new
        ``etag`` starts the count again.  Not guaranteed: two copies of one
        task running side by side (a redelivery while the first still runs)
        count the second's start as a crash of the first.

        An attempt held open by another run that is still ``running`` is no
        crash: the caller's run was taken over (a refused run between its
        refusal checks), and the row is left to the run that holds it (the
        count is returned, no crash).

        ``closing``: documents this process is done with whose attempts are
        still open (touches held to be written in a batch,
        :mod:`workers.batch`): closed in the same transaction, crashes kept,
        so a death on this document is not counted against them (only the
        attempts ``run_id`` holds).
        """
        now = utcnow()
        with self.session() as s:
            self._write_lock(s)
            _close(s, closing, document_id, run_id)
            s.execute(self._insert(DocumentAttempt).values(
                document_id=document_id, etag=etag, crashes=0, open=False, sync_run_id=run_id, updated_at=now,
            ).on_conflict_do_nothing(index_elements=["document_id"]))
            q = select(DocumentAttempt).where(DocumentAttempt.document_id == document_id)
            q = self._for_update(q)
            row = s.scalars(q).one()
            if row.open and row.sync_run_id not in (None, run_id) and _running(s, row.sync_run_id):
                return row.crashes or 0, False  # the run that took over holds it: not a crash, not ours
            crashed = False
            if row.etag != etag:
                row.crashes = 0
            elif row.open:
                row.crashes, crashed = (row.crashes or 0) + 1, True
            row.open, row.etag, row.sync_run_id, row.updated_at = True, etag, run_id, now
            row.worker = worker or process_name()
            return row.crashes, crashed

    def begin_attempt_ahead(self, document_id: str, *, etag: str | None, run_id: int,
                            closing: Collection[str] = ()) -> bool:
        """Open ``document_id``'s attempt for work done ahead of the loop (:mod:`workers.ahead`), only if no
        process died on it: False, and nothing changed, when its attempt is open or has crashes counted.

        The loop then adopts the open attempt instead of beginning one (which
        would count it as a crash) and ends it as usual.  A process killed
        while working ahead leaves this attempt open beside the loop's, so
        both documents are counted; the next sync begins the document that
        killed it in the loop's own attempt (this returns False for it), so
        its count rises as without working ahead.  ``closing``: as
        :meth:`begin_document_attempt`'s, closed in the same transaction.
        """
        # One statement, atomic on both backends: inserted, or updated only where nobody holds it open and no
        # crash is counted (no row returned: refused).  It ran as a locked read then a write, twice the round trips
        # for a step every document of an inline sync takes.
        stmt = self._insert(DocumentAttempt).values(
            document_id=document_id, etag=etag, crashes=0, open=True, sync_run_id=run_id, updated_at=utcnow(),
            worker=process_name())
        stmt = stmt.on_conflict_do_update(
            index_elements=["document_id"],
            set_={"open": True, "etag": stmt.excluded.etag, "sync_run_id": stmt.excluded.sync_run_id,
                  "updated_at": stmt.excluded.updated_at, "worker": stmt.excluded.worker},
            where=DocumentAttempt.open.is_(False) & (func.coalesce(DocumentAttempt.crashes, 0) == 0))
        with self.session() as s:
            _close(s, closing, document_id, run_id)
            return s.execute(stmt.returning(DocumentAttempt.document_id)).first() is not None

    def end_document_attempt(self, document_id: str, *, outcome: bool, run_id: int | None = None) -> None:
        """The process that began ``document_id`` is done with it, alive.

        ``outcome``: it recorded one (indexed, unchanged, failed): the crash
        count starts again.  Otherwise (an error the task retries) the attempt
        is closed and the crashes counted so far are kept.  ``run_id``: only
        the attempt that run holds (not one a run that took over opened).
        """
        where: list[ColumnElement[bool]] = [DocumentAttempt.document_id == document_id]
        if run_id is not None:
            where.append(DocumentAttempt.sync_run_id == run_id)
        with self.session() as s:
            if outcome:
                s.execute(delete(DocumentAttempt).where(*where))
            else:
                s.execute(update(DocumentAttempt).where(*where).values(open=False, updated_at=utcnow()))

    def document_crashes(self, document_id: str) -> int:
        """Crashes counted against the document's current attempts (0 when none is recorded)."""
        with self.session() as s:
            return s.scalar(select(DocumentAttempt.crashes).where(DocumentAttempt.document_id == document_id)) or 0


def _close(s: Session, document_ids: Collection[str], opening: str, run_id: int) -> None:
    """Close the open attempts ``run_id`` holds of ``document_ids`` (not ``opening``'s), crashes kept, in ``s``."""
    for batch in _batches(sorted(set(document_ids) - {opening})):
        s.execute(update(DocumentAttempt).where(DocumentAttempt.document_id.in_(batch), DocumentAttempt.open.is_(True),
                                                DocumentAttempt.sync_run_id == run_id)
                  .values(open=False, updated_at=utcnow()))


def _running(s: Session, run_id: int) -> bool:
    """The sync run ``run_id`` exists and is still ``running``."""
    return s.scalar(select(SyncRun.status).where(SyncRun.id == run_id)) == RunStatus.RUNNING
