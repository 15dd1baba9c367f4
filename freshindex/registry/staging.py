"""Document staging: what one document task writes into its run's changeset.

Every write here is fenced (:meth:`registry.base._Base._fence`): a task whose
run was closed or whose changeset moved on writes nothing and gets
:class:`core.errors.StaleTaskError`.  Also the repair of documents whose
pending chunks no changeset will ever apply.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from freshindex.core.enums import ChangesetStatus, ChunkState, DocumentOutcomeKind, DocumentState, TombstoneReason
from freshindex.core.errors import DocumentError
from freshindex.core.payload import served_meta
from freshindex.core.types import ChunkDraft
from freshindex.registry.acl_fields import apply_acl
from freshindex.registry.base import _Base, _batches
from freshindex.registry.freshness import Provenance, apply_provenance
from freshindex.registry.records import DocumentFailure, DocumentOutcome, SourceInfo, StagedDocument
from freshindex.registry.schema import (
    Changeset,
    ChangesetEntry,
    Chunk,
    Document,
    DocumentResult,
    Source,
    Tombstone,
    utcnow,
)

#: Reasons a failed document is retried on the next sync even if unchanged.
TRANSIENT_REASONS = DocumentError.TRANSIENT  # the reasons live with the other codes in core.errors


def _new_chunk_row(draft: ChunkDraft, doc: Document, source: SourceInfo, added_changeset_id: int | None,
                   now: dt.datetime) -> dict[str, Any]:
    """The ``chunks`` row of a chunk the registry has never seen (``pending``), for a bulk INSERT."""
    return dict(
        id=draft.id, document_id=doc.id, source_id=source.id, kb=source.kb, state=ChunkState.PENDING,
        created_at=now, tombstoned=False, added_changeset_id=added_changeset_id, ordinal=draft.ordinal,
        content_hash=draft.content_hash, text=draft.text, kind=draft.kind, heading_path=list(draft.heading_path),
        anchor=draft.anchor, page=draft.page, meta=dict(draft.meta), doc_version=doc.version, updated_at=now,
    )


def _result_row(run_id: int, o: DocumentOutcome, at: dt.datetime) -> dict[str, Any]:
    """The ``document_results`` row of outcome ``o`` in run ``run_id``, for :attr:`StagingStore._result_upsert`."""
    return dict(
        sync_run_id=run_id, document_id=o.document_id, key=o.key, outcome=o.outcome,
        chunks_embedded=o.chunks_embedded, chunks_reused=o.chunks_reused, chunks_kept=o.chunks_kept,
        chunks_added=o.chunks_added, chunks_moved=o.chunks_moved, rechunk_reason=o.rechunk_reason,
        tombstones=o.tombstones, error_reason=o.error_reason, error_detail=o.error_detail, seconds=o.seconds, at=at,
    )


@dataclass
class BatchReads:
    """What a batch's staging transaction read once for all its documents: their rows and those
    of their chunks that exist, by id (a document or chunk missing is new); the sources' ACL versions."""

    documents: dict[str, Document | None] = field(default_factory=dict)
    chunks: dict[str, Chunk] = field(default_factory=dict)
    floors: dict[str, int] = field(default_factory=dict)


class StagingStore(_Base):
    """Stage document versions, deletions and failures as changeset entries and tombstones."""

    def record_failure(self, run_id: int, failure: DocumentFailure, *, changeset_id: int | None = None) -> None:
        """A document could not be indexed.

        Its previous chunks (if any) keep serving: a document that turns bad
        is stale, not gone.  A document never indexed is kept in state
        ``error`` with its etag and the ``parser_version`` (the pipeline's)
        that failed on it, so an unchanged bad file is not retried on every
        sync unless the reason is transient or the pipeline changed.
        """
        f = failure
        with self.staging_session() as s:
            self._fence(s, run_id, changeset_id)
            doc = s.get(Document, f.document_id)
            if doc is None:
                doc = Document(id=f.document_id, source_id=f.source_id, key=f.key, state=DocumentState.ERROR,
                               size=f.size, version=0)
                s.add(doc)
            if doc.state != DocumentState.ACTIVE:
                doc.state = DocumentState.ERROR
                doc.etag = f.etag
                doc.parser_version = f.parser_version
            doc.error_reason, doc.error_detail, doc.updated_at = f.reason, f.detail, utcnow()
            s.flush()
            self._put_result(
                s,
                run_id,
                DocumentOutcome(
                    document_id=f.document_id, key=f.key, outcome=DocumentOutcomeKind.FAILED,
                    error_reason=f.reason, error_detail=f.detail, seconds=f.seconds,
                ),
            )

    def _touch(self, s: Session, run_id: int, document_id: str, *, etag: str | None, size: int, seconds: float,
               changeset_id: int | None, shape_hash: str | None = None) -> None:
        """The etag moved but the content did not: remember the new etag (and the bytes' shape hash,
        when the parse gave one), in the caller's transaction (``DocumentAclStore.touch_document``,
        which stores the document's ACL in the same one)."""
        self._fence(s, run_id, changeset_id)
        doc = s.get(Document, document_id)
        if doc is not None:
            doc.etag, doc.size = etag, size
            doc.shape_hash = shape_hash or doc.shape_hash
            doc.error_reason = doc.error_detail = None  # readable again, and still the same
        self._put_result(s, run_id, DocumentOutcome(document_id=document_id, key=doc.key if doc else "",
                                                    outcome=DocumentOutcomeKind.UNCHANGED, seconds=seconds))

    def _put_result(self, s: Session, run_id: int, o: DocumentOutcome) -> None:
        s.execute(self._result_upsert, _result_row(run_id, o, utcnow()))

    @functools.cached_property
    def _result_upsert(self) -> Any:
        """A document's outcome in its run, replacing an earlier one: one statement for the registry's life,
        its values bound per call (built and keyed anew per document, it cost 0.57 ms a call against 0.24)."""
        stmt = self._insert(DocumentResult)
        return stmt.on_conflict_do_update(index_elements=["sync_run_id", "document_id"],
                                          set_={c.name: stmt.excluded[c.name]
                                                for c in DocumentResult.__table__.columns if not c.primary_key})

    def stage_document(self, run_id: int, changeset_id: int, staged: StagedDocument) -> None:
        """Write one document's new version and its chunk diff, atomically.

        Added chunks become ``pending`` rows with an upsert entry; removed
        chunks are tombstoned at once (no longer servable) with a delete
        entry.  Kept chunks get their ordinal and metadata refreshed, and an
        upsert entry when their citation moved (page, anchor, line numbers: what
        the point carries, not a link's href alone) so the point's payload
        follows; their vector comes from the cache.
        ``staged.acl`` (an ``acl.model.DocumentAcl``; None keeps the stored one) is
        the document's resolved ACL: when it changes, the kept chunks get an
        upsert entry too (a re-tag, see :mod:`registry.document_acl`).
        ``staged.provenance``: ``record_provenance``'s fields, in the same transaction.
        """
        with self.staging_session() as s:
            # A closed run's task must not write into a changeset staged without it: its chunks would stay pending.
            self._fence(s, run_id, changeset_id)
            self._stage_one(s, run_id, changeset_id, staged)

    def _stage_one(self, s: Session, run_id: int, changeset_id: int, staged: StagedDocument,
                   reads: BatchReads | None = None) -> None:
        """:meth:`stage_document`'s writes in the caller's fenced transaction; ``reads``: what a batch's
        transaction read once for all its documents (:meth:`registry.touches.TouchStore.stage_documents`)."""
        d, source, document_id, chunks = staged, staged.source, staged.document_id, staged.chunks
        added_ids, removed_ids = staged.added_ids, staged.removed_ids
        now = utcnow()
        doc = reads.documents[document_id] if reads is not None else s.get(Document, document_id)
        if doc is None:
            doc = Document(id=document_id, source_id=source.id, key=d.key, version=0, first_seen_at=now)
            s.add(doc)
        # A swap, rollback or repair cleared the hash: what the served points
        # say (their ACL above all) is not known, so kept chunks are re-tagged.
        points_unknown = doc.content_hash is None and (doc.version or 0) > 0
        doc.etag, doc.size, doc.content_hash = d.etag, d.size, d.content_hash
        doc.source_hash, doc.shape_hash = d.source_hash or doc.source_hash, d.shape_hash
        doc.pending_deletion_run = None
        doc.state, doc.error_reason, doc.error_detail = DocumentState.ACTIVE, None, None
        doc.parser, doc.parser_version, doc.title = d.parser, d.parser_version, d.title
        doc.version, doc.chunk_count = (doc.version or 0) + 1, len(chunks)
        doc.updated_at, doc.deleted_at = now, None
        acl_moved = False
        if d.acl is not None:
            floors = reads.floors if reads is not None else {}
            if source.id not in floors:
                floors[source.id] = s.scalar(select(Source.acl_version).where(Source.id == source.id)) or 1
            acl_moved = apply_acl(doc, d.acl, floor=floors[source.id])
        s.flush()

        existing = ({c.id: reads.chunks[c.id] for c in chunks if c.id in reads.chunks} if reads is not None else {
            row.id: row
            for batch in _batches([c.id for c in chunks])
            for row in s.scalars(select(Chunk).where(Chunk.id.in_(batch)))
        })
        refreshed: set[str] = set()
        new_rows: list[dict[str, Any]] = []
        for draft in chunks:
            row = existing.get(draft.id)
            if row is None:  # a new chunk: one INSERT for all of them below, not an ORM object each
                new_rows.append(_new_chunk_row(draft, doc, source, changeset_id if draft.id in added_ids else None, now))
                continue
            if draft.id not in added_ids and (
                row.anchor != draft.anchor or row.page != draft.page
                or served_meta(row.meta or {}) != served_meta(draft.meta)
            ):
                # Same text, new place (page, lines, anchor): the point's citation must follow.  Metadata
                # no point carries (core.payload.UNSERVED_META) changes the row, not the point.
                # Rewritten from the vector cache, never re-embedded.
                refreshed.add(draft.id)
            elif ((acl_moved or points_unknown) and row.state == ChunkState.LIVE
                  and draft.id not in added_ids):
                refreshed.add(draft.id)  # same text, new permissions (or unknown ones): re-tag the point
            if draft.id in added_ids:
                row.tombstoned = False
                row.added_changeset_id = changeset_id
                if row.state == ChunkState.REMOVED:
                    row.state = ChunkState.PENDING
            row.ordinal, row.content_hash, row.text, row.kind = draft.ordinal, draft.content_hash, draft.text, draft.kind
            row.heading_path, row.anchor, row.page = list(draft.heading_path), draft.anchor, draft.page
            row.meta, row.doc_version, row.updated_at = dict(draft.meta), doc.version, now
        if new_rows:
            s.flush()  # the document row (and any updated chunk) before the chunks that reference it
            s.execute(insert(Chunk), new_rows)
        self._stage_entries(s, changeset_id, document_id, added_ids | refreshed, "upsert")
        self._tombstone(s, changeset_id, document_id, source.kb, removed_ids, reason=TombstoneReason.SUPERSEDED)
        self._stage_entries(s, changeset_id, document_id, removed_ids, "delete")
        self._put_result(s, run_id, d.outcome)
        if d.provenance is not None:
            apply_provenance(s, doc, Provenance(**d.provenance))

    def stage_deletion(self, run_id: int, changeset_id: int, document_id: str, *, reason: str = TombstoneReason.DELETED,
                       moved_to: str | None = None, skipped: tuple[str, str] | None = None) -> int:
        """The source no longer has this document: tombstone all its chunks.

        ``moved_to``: its content reappeared under that key in this sync (a
        move): the outcome is ``moved`` and the tombstones ``superseded`` (a
        rollback behind the move may serve the old key again).  ``skipped``:
        (reason, detail) when the key is still listed but now left out (the
        source's patterns exclude it): the document's state becomes
        ``skipped`` instead of ``deleted``; the run still counts a deletion.
        """
        if moved_to is not None:
            reason = TombstoneReason.SUPERSEDED
        with self.staging_session() as s:
            self._fence(s, run_id, changeset_id)
            doc = s.get(Document, document_id)
            if doc is None or doc.state == DocumentState.DELETED or (skipped and doc.state == DocumentState.SKIPPED):
                return 0
            ids = set(
                s.scalars(
                    select(Chunk.id).where(
                        Chunk.document_id == document_id,
                        Chunk.tombstoned.is_(False),
                        Chunk.state.in_((ChunkState.LIVE, ChunkState.PENDING)),
                    )
                )
            )
            kb = s.scalar(select(Source.kb).where(Source.id == doc.source_id)) or ""
            self._tombstone(s, changeset_id, document_id, kb, ids, reason=reason)
            self._stage_entries(s, changeset_id, document_id, ids, "delete")
            doc.state, doc.deleted_at, doc.updated_at = DocumentState.DELETED, utcnow(), utcnow()
            doc.etag = doc.content_hash = doc.source_hash = doc.shape_hash = doc.pending_deletion_run = None
            doc.chunk_count = 0
            if skipped is not None:
                doc.state, (doc.error_reason, doc.error_detail) = DocumentState.SKIPPED, skipped
            self._put_result(
                s, run_id, DocumentOutcome(
                    document_id=document_id, key=doc.key, tombstones=len(ids),
                    outcome=DocumentOutcomeKind.DELETED if moved_to is None else DocumentOutcomeKind.MOVED,
                    error_detail=None if moved_to is None else f"moved to {moved_to}"),
            )
            return len(ids)

    def record_skips(self, run_id: int, changeset_id: int | None, source_id: str,
                     skips: Sequence[dict[str, Any]]) -> int:
        """Documents listed but not indexed on purpose, in one transaction; returns chunks tombstoned.

        Each skip: ``document_id``, ``key``, ``reason`` (one of
        :data:`core.errors.DocumentError.SKIP`), ``detail``, and optionally
        ``etag``, ``size``, ``seconds``, ``parser_version``, ``source_hash``.
        The document's state becomes ``skipped`` with the reason in
        ``error_reason``; the run records the outcome ``skipped`` (never a
        failure).  A document that was indexed and now has nothing to index
        (its page became navigation only) has its chunks tombstoned
        (superseded) in the run's changeset: its served text is no longer
        what the source holds.
        """
        tombstoned = 0
        with self.staging_session() as s:
            self._fence(s, run_id, changeset_id)
            kb = s.scalar(select(Source.kb).where(Source.id == source_id)) or ""
            for skip in skips:
                doc_id = skip["document_id"]
                doc = s.get(Document, doc_id)
                if doc is None:
                    doc = Document(id=doc_id, source_id=source_id, key=skip["key"], size=0, version=0)
                    s.add(doc)
                ids: set[str] = set()
                if changeset_id is not None and doc.state == DocumentState.ACTIVE:
                    ids = set(s.scalars(select(Chunk.id).where(
                        Chunk.document_id == doc_id, Chunk.tombstoned.is_(False),
                        Chunk.state.in_((ChunkState.LIVE, ChunkState.PENDING)))))
                    self._tombstone(s, changeset_id, doc_id, kb, ids, reason=TombstoneReason.SUPERSEDED)
                    self._stage_entries(s, changeset_id, doc_id, ids, "delete")
                    doc.content_hash, doc.chunk_count = None, 0
                tombstoned += len(ids)
                doc.state, doc.etag, doc.size = DocumentState.SKIPPED, skip.get("etag"), int(skip.get("size") or 0)
                doc.error_reason, doc.error_detail = skip["reason"], skip["detail"]
                doc.parser_version = skip.get("parser_version")
                doc.source_hash = skip.get("source_hash")
                doc.pending_deletion_run, doc.updated_at = None, utcnow()
                s.flush()
                self._put_result(s, run_id, DocumentOutcome(
                    document_id=doc_id, key=skip["key"], outcome=DocumentOutcomeKind.SKIPPED,
                    error_reason=skip["reason"], error_detail=skip["detail"], tombstones=len(ids),
                    seconds=float(skip.get("seconds") or 0.0)))
        return tombstoned

    def mark_pending_deletion(self, source_id: str, run_id: int, document_ids: Iterable[str]) -> int:
        """The deletion guard holds these documents' deletion (run ``run_id``): label them until it is decided.

        Every other document of the source loses the label (listed again, or
        the hold was confirmed and applied).  Returns how many are labelled.
        """
        ids = sorted(set(document_ids))
        with self.session() as s:
            s.execute(update(Document).where(Document.source_id == source_id,
                                             Document.pending_deletion_run.is_not(None),
                                             Document.id.not_in(ids) if ids else Document.id.is_not(None))
                      .values(pending_deletion_run=None))
            for batch in _batches(ids):
                s.execute(update(Document).where(Document.id.in_(batch), Document.state == DocumentState.ACTIVE)
                          .values(pending_deletion_run=run_id))
        return len(ids)

    def _stage_entries(self, s: Session, changeset_id: int, document_id: str, ids: Iterable[str], op: str) -> None:
        rows = [dict(changeset_id=changeset_id, chunk_id=i, document_id=document_id, op=op) for i in sorted(ids)]
        if not rows:
            return
        # One statement for all rows (executemany), compiled once: a multi-row VALUES per batch
        # was compiled anew for every distinct row count.
        stmt = self._insert(ChangesetEntry)
        stmt = stmt.on_conflict_do_update(index_elements=["changeset_id", "chunk_id"], set_={"op": stmt.excluded.op})
        s.connection().execute(stmt, rows)

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
            .where(Changeset.status.in_((ChangesetStatus.OPEN, ChangesetStatus.STAGED)), ChangesetEntry.op == "upsert")
        )
        with self.session() as s:
            q = (
                select(Chunk.id, Chunk.document_id, Document.source_id, Document.key, Chunk.kb)
                .join(Document, Document.id == Chunk.document_id)
                .where(Chunk.state == ChunkState.PENDING, Chunk.tombstoned.is_(False), Chunk.id.not_in(covered))
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
            .where(Changeset.status.in_((ChangesetStatus.OPEN, ChangesetStatus.STAGED)), ChangesetEntry.op == "delete")
        )
        with self.session() as s:
            self._write_lock(s)
            by_source: dict[str, int] = {}
            for doc in stranded:
                cs_id = by_source.get(doc["source_id"])
                if cs_id is None:
                    cs = Changeset(kb=kb, source_id=doc["source_id"], sync_run_id=None, status=ChangesetStatus.STAGED,
                                   staged_at=now)
                    s.add(cs)
                    s.flush()
                    cs_id = by_source[doc["source_id"]] = cs.id
                superseded = set(s.scalars(
                    select(Chunk.id).where(Chunk.document_id == doc["document_id"], Chunk.state == ChunkState.LIVE,
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
