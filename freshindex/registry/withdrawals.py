"""Withdrawal: taking a document out of retrieval before any build.

Its chunks are tombstoned at once (the query path drops tombstoned hits) and
their deletion is staged in a run-less changeset, so the next build removes
the points.  :class:`WithdrawalStore` holds the one write that does it, shared
by the freshness sweep and source removal (:mod:`registry.freshness`) and by
twin merging (:mod:`registry.twins`); :data:`WithdrawReason` says why.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from freshindex.core.enums import ChangesetStatus, ChunkState, TombstoneReason
from freshindex.registry.base import _Base, _batches
from freshindex.registry.schema import Changeset, ChangesetEntry, Chunk, Document, Source, Tombstone


class WithdrawReason(StrEnum):
    EXPIRED = "expired"
    UNVERIFIED = "unverified"
    SUPERSEDED = "superseded"
    REMOVED = "removed"  # the operator removed the source
    MIRRORED = "mirrored"  # the same content is canonical elsewhere: this copy became its mirror


#: Tombstone reason written per withdrawal reason (``expired`` and ``deleted`` are final:
#: a rollback never serves them again; ``superseded`` may come back with an older snapshot).
_TOMBSTONE = {
    WithdrawReason.EXPIRED: TombstoneReason.EXPIRED,
    WithdrawReason.UNVERIFIED: TombstoneReason.EXPIRED,
    WithdrawReason.SUPERSEDED: TombstoneReason.SUPERSEDED,
    WithdrawReason.REMOVED: TombstoneReason.DELETED,
    WithdrawReason.MIRRORED: TombstoneReason.SUPERSEDED,
}


@dataclass(frozen=True)
class Withdrawn:
    document_id: str
    source_id: str
    key: str
    reason: str
    chunks: int
    changeset_id: int | None



class WithdrawalStore(_Base):
    """Tombstones and stages the deletion of documents' servable chunks (see the module docstring)."""

    def _withdraw(self, s: Session, source: Source, docs: Iterable[Document], reason: WithdrawReason,
                  now: dt.datetime) -> list[Withdrawn]:
        """Tombstone the servable chunks of ``docs`` and stage their deletion (one changeset per call)."""
        cs: Changeset | None = None
        out: list[Withdrawn] = []
        for doc in docs:
            ids = sorted(s.scalars(select(Chunk.id).where(
                Chunk.document_id == doc.id, Chunk.tombstoned.is_(False),
                Chunk.state.in_((ChunkState.LIVE, ChunkState.PENDING)))))
            doc.withdrawn_reason, doc.updated_at = str(reason), now
            if reason == WithdrawReason.UNVERIFIED:
                doc.etag = doc.content_hash = None  # re-read when the source is reachable again
            if not ids:
                out.append(Withdrawn(doc.id, doc.source_id, doc.key, str(reason), 0, None))
                continue
            if cs is None:
                cs = Changeset(kb=source.kb, source_id=source.id, sync_run_id=None, status=ChangesetStatus.STAGED,
                               staged_at=now)
                s.add(cs)
                s.flush()
            for batch in _batches(ids):
                s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(tombstoned=True, updated_at=now))
            s.add_all(ChangesetEntry(changeset_id=cs.id, chunk_id=cid, document_id=doc.id, op="delete") for cid in ids)
            s.add_all(Tombstone(chunk_id=cid, document_id=doc.id, kb=source.kb, reason=_TOMBSTONE[reason],
                                changeset_id=cs.id, created_at=now) for cid in ids)
            out.append(Withdrawn(doc.id, doc.source_id, doc.key, str(reason), len(ids), cs.id))
        return out


__all__ = ["WithdrawReason", "WithdrawalStore", "Withdrawn"]
