"""Unchanged documents of a run written a batch at a time (:class:`TouchStore`), and their records read likewise.

An inline sync of a release touches most documents (the etag moved, the
content did not).  :meth:`DocumentAclStore.touch_document` writes one such
document in a fenced transaction of its own, and the loop around it read
the document and ended its attempt in two more: about 20 ms a page on
SQLite.  :meth:`TouchStore.touch_documents` writes a batch of them in one
fenced transaction (each document as ``touch_document`` writes it, their
ACLs, their outcomes) and ends their attempts in it, so a batch is recorded
whole or not at all; :meth:`TouchStore.documents` reads many records at once.
The distributed path writes its one touch as a batch of one, for the same
re-check under the same lock (``touch_document`` has nothing to re-check).

What it does not do: decide that a document is unchanged (the pipeline does,
:mod:`workers.batch`); touch a document whose record moved since that
decision (its content, version or state is no longer the one compared with):
such a document is left as it was, its attempt closed without ending it,
recorded ``skipped`` (reason :attr:`core.errors.DocumentError.TOUCH_MOVED`,
:data:`MOVED_DETAIL`) unless the run already holds an outcome for it, and
returned, so it is planned again on the next sync and never recorded
``unchanged`` over a change; touch or close an attempt another run holds
(only the run's own are ended or closed).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import delete, exists, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import ColumnElement

from freshindex.core.enums import DocumentOutcomeKind, DocumentState, RunStatus
from freshindex.core.errors import DocumentError
from freshindex.registry.attempts import AttemptsStore
from freshindex.registry.base import _batches, _doc_record
from freshindex.registry.document_acl import DocumentAclStore, _acls_current
from freshindex.registry.records import DocumentOutcome, DocumentRecord, DocumentTouch, StagedDocument
from freshindex.registry.schema import Chunk, Document, DocumentAttempt, DocumentResult, SyncRun, utcnow
from freshindex.registry.staging import BatchReads, _result_row

#: The reason (the declared code) and detail of the ``skipped`` outcome of a document not touched because its
#: record moved.
MOVED_REASON = DocumentError.TOUCH_MOVED
MOVED_DETAIL = "record moved since it was judged unchanged; planned again next sync"


class TouchStore(AttemptsStore, DocumentAclStore):
    """Touch a batch of unchanged documents of a run in one transaction; read many document records in one."""

    def documents(self, document_ids: Collection[str]) -> dict[str, DocumentRecord]:
        """The records of those of ``document_ids`` the registry holds, in one transaction."""
        out: dict[str, DocumentRecord] = {}
        with self.session() as s:
            for batch in _batches(sorted(set(document_ids))):
                for row in s.scalars(select(Document).where(Document.id.in_(batch))):
                    out[row.id] = _doc_record(row)
        return out

    def touch_documents(self, run_id: int, changeset_id: int | None, source_id: str,
                        touches: Sequence[DocumentTouch]) -> list[str]:
        """Record each of ``touches`` as :meth:`touch_document` does, in one fenced transaction, and end
        their documents' attempts with an outcome (the crash count starts again); returns the ids left
        untouched because their record moved since the decision (their attempts closed, crashes kept,
        recorded ``skipped`` when the run holds no outcome for them yet).  A touched document's attempt is
        ended unless another run still running holds it; a moved one's is closed only if ``run_id`` holds it.

        Raises :class:`core.errors.StaleTaskError`, writing nothing, when the run no longer takes writes.
        """
        if not touches:
            return []
        with self.staging_session() as s:
            self._fence(s, run_id, changeset_id)
            ids = [t.document_id for t in touches]
            docs: dict[str, Document] = {}
            for batch in _batches(sorted(set(ids))):  # locked (PostgreSQL) from the re-check to the write: a
                # reconcile or `documents retry` clearing the etag between them would be overwritten and lost
                docs.update((d.id, d) for d in s.scalars(self._for_update(
                    select(Document).where(Document.id.in_(batch)).order_by(Document.id))))
            done = [t for t in touches if _still(docs.get(t.document_id), t)]
            moved = sorted({t.document_id for t in touches} - {t.document_id for t in done})
            now = utcnow()
            for t in done:
                doc = docs[t.document_id]
                doc.etag, doc.size = t.etag, t.size
                doc.shape_hash = t.shape_hash or doc.shape_hash
                doc.error_reason = doc.error_detail = None  # readable again, and still the same
            s.flush()
            if done:
                s.execute(self._result_upsert, [_result_row(run_id, DocumentOutcome(
                    document_id=t.document_id, key=docs[t.document_id].key, outcome=DocumentOutcomeKind.UNCHANGED,
                    seconds=t.seconds), now) for t in done])
            acls = {t.document_id: t.acl for t in done if t.acl is not None}
            if acls and not _acls_current(s, acls):
                self._apply_acls(s, source_id, acls, (), changeset_id)
            if moved:  # the summary counts a listed document with no outcome as unchanged: say what happened
                s.execute(self._insert(DocumentResult).on_conflict_do_nothing(
                    index_elements=["sync_run_id", "document_id"]), [_result_row(run_id, DocumentOutcome(
                        document_id=d, key=docs[d].key if d in docs else "", outcome=DocumentOutcomeKind.SKIPPED,
                        error_reason=MOVED_REASON, error_detail=MOVED_DETAIL), now) for d in moved])
            _end_done(s, run_id, [t.document_id for t in done])
            ours = DocumentAttempt.sync_run_id == run_id
            for batch in _batches(moved):
                s.execute(update(DocumentAttempt).where(DocumentAttempt.document_id.in_(batch), ours)
                          .values(open=False, updated_at=now))
            return moved

    def stage_documents(self, run_id: int, changeset_id: int, staged: Sequence[StagedDocument]) -> None:
        """:meth:`StagingStore.stage_document` for each of ``staged`` (distinct documents), in one fenced
        transaction, and their attempts ended in it with an outcome, as :meth:`touch_documents` ends its own:
        a batch is staged whole or not at all.  Their document rows and existing chunk rows are read in one
        statement a batch of ids, not one a document.

        Raises :class:`core.errors.StaleTaskError`, writing nothing, when the run no longer takes writes, and
        ValueError when a document is in ``staged`` twice.
        """
        if not staged:
            return
        if len({d.document_id for d in staged}) != len(staged):
            raise ValueError("stage_documents: a document staged twice in one batch")
        with self.staging_session() as s:
            self._fence(s, run_id, changeset_id)
            reads = BatchReads()
            ids = [d.document_id for d in staged]
            reads.documents = dict.fromkeys(ids)
            for batch in _batches(sorted(set(ids))):  # locked (PostgreSQL) in id order, as touch_documents does
                reads.documents.update((d.id, d) for d in s.scalars(self._for_update(
                    select(Document).where(Document.id.in_(batch)).order_by(Document.id))))
            for batch in _batches(sorted({c.id for d in staged for c in d.chunks})):
                reads.chunks.update((c.id, c) for c in s.scalars(select(Chunk).where(Chunk.id.in_(batch))))
            for d in staged:
                self._stage_one(s, run_id, changeset_id, d, reads)
            _end_done(s, run_id, ids)

    def end_document_attempts(self, document_ids: Collection[str], *, outcome: bool,
                              run_id: int | None = None) -> None:
        """:meth:`end_document_attempt` for many documents, in one transaction (``run_id``: only the
        attempts that run holds)."""
        with self.session() as s:
            for batch in _batches(sorted(set(document_ids))):
                where: list[ColumnElement[bool]] = [DocumentAttempt.document_id.in_(batch)]
                if run_id is not None:
                    where.append(DocumentAttempt.sync_run_id == run_id)
                if outcome:
                    s.execute(delete(DocumentAttempt).where(*where))
                else:
                    s.execute(update(DocumentAttempt).where(*where).values(open=False, updated_at=utcnow()))


def _end_done(s: Session, run_id: int, document_ids: Sequence[str]) -> None:
    """End the attempts of ``document_ids``, done in run ``run_id``: the crash count starts again.  This run's
    attempt, and one no other running run holds (a dead run's: a touch found ahead with a pool opens none of
    its own, workers/ahead.py).  A correlated NOT EXISTS: an IN over the runs read every run on PostgreSQL
    (117 ms a batch at 200k runs, 1.3 ms so)."""
    held = exists().where(SyncRun.id == DocumentAttempt.sync_run_id, SyncRun.status == RunStatus.RUNNING,
                          SyncRun.id != run_id)
    for batch in _batches(list(document_ids)):
        s.execute(delete(DocumentAttempt).where(DocumentAttempt.document_id.in_(batch), ~held))


def _still(doc: Document | None, touch: DocumentTouch) -> bool:
    """The document still holds what the touch was decided against."""
    return (doc is not None and doc.state == DocumentState.ACTIVE and doc.content_hash == touch.content_hash
            and doc.parser_version == touch.parser_version)


__all__ = ["MOVED_DETAIL", "MOVED_REASON", "TouchStore"]
