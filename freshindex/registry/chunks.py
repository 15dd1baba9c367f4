"""Chunk and changeset reads: what the builder and the query-path recheck read.

Read-only; every call is its own transaction, so two calls may see different
states.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import func, select

from freshindex.core.enums import ChangesetStatus, ChunkState
from freshindex.registry.base import CHUNK_ROW_COLUMNS, _Base, _batches, _chunk_row
from freshindex.registry.db import plain_rows
from freshindex.registry.records import ChunkRow, ChunkStatus
from freshindex.registry.schema import Changeset, ChangesetEntry, Chunk, Document, Source, Tombstone, utcnow


class ChunkStore(_Base):
    """Read chunks, changeset operations and the tombstone backlog."""

    def staged_changesets(self, kb: str) -> list[int]:
        with self.session() as s:
            return list(
                s.scalars(
                    select(Changeset.id).where(Changeset.kb == kb, Changeset.status == ChangesetStatus.STAGED)
                    .order_by(Changeset.id)
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

    def changeset_chunk_ids(self, changeset_ids: Sequence[int]) -> set[str]:
        with self.session() as s:
            out: set[str] = set()
            for batch in _batches(sorted(changeset_ids)):
                out.update(s.scalars(select(ChangesetEntry.chunk_id).where(ChangesetEntry.changeset_id.in_(batch))))
            return out

    def chunk_rows(self, ids: Sequence[str]) -> list[ChunkRow]:
        """The chunks as the builder writes them (read as columns: :data:`registry.base.CHUNK_ROW_COLUMNS`)."""
        out: list[ChunkRow] = []
        with self.session() as s:
            for batch in _batches(list(ids)):
                q = (
                    select(*CHUNK_ROW_COLUMNS, Document.key, Document.title, Source.acl, Document.acl, Document.tenant,
                           Document.acl_version, Document.sensitivity)
                    .join(Document, Document.id == Chunk.document_id)
                    .join(Source, Source.id == Chunk.source_id)
                    .where(Chunk.id.in_(batch))
                )
                n = len(CHUNK_ROW_COLUMNS)
                for r in plain_rows(s.execute(q)):
                    key, title, source_acl, doc_acl, tenant, version, sens = r[n:]
                    # The document's resolved ACL; a document never resolved (null) has its source's.
                    out.append(_chunk_row(r[:n], key, title, source_acl if doc_acl is None else doc_acl, tenant,
                                          version, sens))
        return out

    def live_chunk_ids_for_kb(self, kb: str) -> list[str]:
        """Chunks physically in the active snapshot of ``kb``."""
        with self.session() as s:
            return list(s.scalars(select(Chunk.id).where(Chunk.kb == kb, Chunk.state == ChunkState.LIVE).order_by(Chunk.id)))

    def count_live(self, kb: str, sources: Collection[str] | None = None) -> int:
        """Live chunks of ``kb`` (only those of ``sources`` when given: one tenant's view)."""
        with self.session() as s:
            q = select(func.count()).where(Chunk.kb == kb, Chunk.state == ChunkState.LIVE)
            if sources is not None:
                q = q.where(Chunk.source_id.in_(sources))
            return s.scalar(q) or 0

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
        """Recheck for the query path: is each hit still servable, and under which ACL version?

        One query per batch of ids (chunks joined to their document and
        source); ``acl`` is the document's resolved ACL, or its source's when
        the document was never resolved.
        """
        out: dict[str, ChunkStatus] = {}
        now = utcnow()
        with self.session() as s:
            for batch in _batches(list(ids)):
                q = (
                    select(Chunk.id, Chunk.state, Chunk.tombstoned, Chunk.document_id, Chunk.source_id,
                           Document.acl, Source.acl, Document.tenant, Document.sensitivity, Document.acl_version,
                           Document.valid_until, Document.withdrawn_reason, Document.pending_deletion_run,
                           Chunk.ordinal, Document.content_hash)
                    .join(Document, Document.id == Chunk.document_id)
                    .join(Source, Source.id == Chunk.source_id)
                    .where(Chunk.id.in_(batch))
                )
                for (cid, state, tomb, doc_id, source_id, doc_acl, source_acl, tenant, sens, version, valid_until,
                     withdrawn, pending, ordinal, doc_hash) in plain_rows(s.execute(q)):
                    out[cid] = ChunkStatus(
                        id=cid, state=state, tombstoned=tomb, document_id=doc_id, source_id=source_id,
                        acl=tuple((source_acl if doc_acl is None else doc_acl) or ()), tenant=tenant or "default",
                        sensitivity=sens or "internal", acl_version=version or 0, valid_until=valid_until,
                        # A withdrawal tombstones the chunks at once (the query path drops those as tombstoned);
                        # withdrawn_reason outlives a re-sync until the next sweep, so it is not read here.
                        expired=(valid_until is not None and valid_until <= now)
                        or (withdrawn in ("expired", "unverified") and bool(tomb)),
                        superseded=withdrawn == "superseded" and bool(tomb),
                        pending_deletion=pending is not None and not tomb,
                        # A swap, rollback or repair clears the document's hash: which version its served
                        # chunks are in, and so their places, is not known until it is synced again.
                        ordinal=ordinal if doc_hash is not None else None,
                    )
        return out

    def tombstone_backlog(self, kb: str | None = None, sources: Collection[str] | None = None) -> int:
        """Tombstones written but not yet applied to a serving snapshot (of ``sources`` only when given)."""
        with self.session() as s:
            q = select(func.count()).select_from(Tombstone).where(Tombstone.applied_snapshot_id.is_(None))
            if kb:
                q = q.where(Tombstone.kb == kb)
            if sources is not None:
                q = q.join(Changeset, Changeset.id == Tombstone.changeset_id).where(Changeset.source_id.in_(sources))
            return s.scalar(q) or 0
