"""Canonical documents and mirrors: one set of points per content and permissions.

A document whose content (and ACL fingerprint) is already indexed by another
document of the knowledge base becomes its *mirror*: no chunks of its own; the
canonical document's ``mirrors`` list names it, so a citation can list where
else the content lives.  :meth:`TwinStore.merge_twins` converges copies that
were indexed as canonical at the same time; :meth:`TwinStore.rehome_mirrors`
makes mirrors whose canonical document changed or went away re-read.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from freshindex.core.enums import ChunkState, DocumentOutcomeKind, DocumentState, TombstoneReason
from freshindex.registry.base import _batches
from freshindex.registry.records import DocumentOutcome, MirroredDocument
from freshindex.registry.schema import ChangesetEntry, Chunk, Document, Source, Tombstone, utcnow
from freshindex.registry.withdrawals import WithdrawalStore, Withdrawn, WithdrawReason

if TYPE_CHECKING:
    import numpy as np


class TwinStore(WithdrawalStore):
    """Canonical twins, mirror staging, re-homing and merging of identical documents."""

    def canonical_twin(self, document_id: str, kb: str, content_hash: str, *, acl: Any,
                       parser_version: str | None = None) -> str | None:
        """The canonical document of ``kb`` that already holds exactly this content under the same permissions.

        Canonical: active, not itself a mirror, not withdrawn, the earliest
        seen (then lowest id) of its content.  ``acl`` (an
        ``acl.model.DocumentAcl``) must have the twin's fingerprint (tokens,
        tenant, sensitivity): a copy readable by other people keeps points of
        its own.  ``document_id`` itself is never its own twin.  ``parser_version``: the twin must have been
        read by the same document line (parsers, chunker, transform steps such as ``redact_pii``): a copy read
        before a step was switched on holds text this one must not serve.
        """
        with self.session() as s:
            q = (select(Document.id).join(Source, Source.id == Document.source_id)
                 .where(Source.kb == kb, Source.removed_at.is_(None), Document.content_hash == content_hash,
                        Document.acl_fingerprint == acl.fingerprint(),
                        Document.state == DocumentState.ACTIVE, Document.canonical_id.is_(None),
                        Document.withdrawn_reason.is_(None), Document.id != document_id)
                 .order_by(Document.first_seen_at, Document.id).limit(1))
            if parser_version is not None:
                q = q.where(Document.parser_version == parser_version)
            return s.scalar(q)

    def kb_content_prefixes(self, kb: str, *, limit: int) -> np.ndarray | None:
        """The first 64 bits of the content hash of every canonical document of ``kb`` (the documents
        :meth:`canonical_twin` may answer), sorted, as ``uint64``; None when there are more than ``limit`` or
        a hash is not hexadecimal.  8 bytes a document, read as a stream: what lets a run that plans most of
        a knowledge base skip the twin lookup of content no document holds (``workers.batch.RunBatch``)."""
        import numpy as np

        with self.session() as s:
            q = (select(Document.content_hash).join(Source, Source.id == Document.source_id)
                 .where(Source.kb == kb, Source.removed_at.is_(None), Document.content_hash.is_not(None),
                        Document.state == DocumentState.ACTIVE, Document.canonical_id.is_(None),
                        Document.withdrawn_reason.is_(None))
                 .limit(limit + 1).execution_options(yield_per=10_000))
            try:
                prefixes = np.fromiter((int((h or "")[:16], 16) for h in s.scalars(q)), dtype=np.uint64)
            except ValueError:  # a hash that is not hexadecimal (or shorter than 16): no shortcut
                return None
        if len(prefixes) > limit:
            return None
        prefixes.sort()
        return prefixes

    def stage_mirror(self, run_id: int, changeset_id: int, mirror: MirroredDocument) -> DocumentOutcome:
        """Record ``mirror.document_id`` as a mirror of ``mirror.canonical_id``: no chunks of its own, one set
        of points.

        ``mirror.parser_version``: what the document records when processed now (the
        planner compares it; without it the mirror looks out of date and is
        fetched and mirrored again at every sync).  None keeps what it held.

        Fenced like every staging write.  Chunks the document had as a
        canonical document of other content are tombstoned (superseded) and
        their deletion staged; the canonical document's ``mirrors`` list names
        it, so citations of the canonical location can list where else it lives.
        """
        m = mirror
        document_id, source_id, canonical_id, acl = m.document_id, m.source_id, m.canonical_id, m.acl
        now = utcnow()
        with self.staging_session() as s:
            self._fence(s, run_id, changeset_id)
            doc = s.get(Document, document_id)
            known = doc is not None and bool(doc.version)
            if doc is None:
                doc = Document(id=document_id, source_id=source_id, key=m.key, version=0, first_seen_at=now)
                s.add(doc)
            old = sorted(s.scalars(select(Chunk.id).where(
                Chunk.document_id == document_id, Chunk.tombstoned.is_(False),
                Chunk.state.in_((ChunkState.LIVE, ChunkState.PENDING))))) if known else []
            kb = s.scalar(select(Source.kb).where(Source.id == source_id)) or ""
            if old:
                for batch in _batches(old):
                    s.execute(update(Chunk).where(Chunk.id.in_(batch)).values(tombstoned=True, updated_at=now))
                s.add_all(Tombstone(chunk_id=c, document_id=document_id, kb=kb, reason=TombstoneReason.SUPERSEDED,
                                    changeset_id=changeset_id, created_at=now) for c in old)
                stmt = self._insert(ChangesetEntry).values(
                    [dict(changeset_id=changeset_id, chunk_id=c, document_id=document_id, op="delete") for c in old])
                s.execute(stmt.on_conflict_do_update(index_elements=["changeset_id", "chunk_id"],
                                                     set_={"op": stmt.excluded.op}))
            previous = doc.canonical_id
            doc.etag, doc.size, doc.content_hash, doc.canonical_id = m.etag, m.size, m.content_hash, canonical_id
            doc.state, doc.error_reason, doc.error_detail, doc.withdrawn_reason = DocumentState.ACTIVE, None, None, None
            doc.version = (doc.version or 0) + 1
            doc.chunk_count, doc.updated_at, doc.deleted_at = 0, now, None
            doc.parser_version = m.parser_version or doc.parser_version
            doc.source_uri, doc.last_fetched_at = m.source_uri or doc.source_uri, now
            doc.acl, doc.tenant, doc.sensitivity = list(acl.tokens), acl.tenant, str(acl.sensitivity)
            doc.acl_fingerprint, doc.acl_origin = acl.fingerprint(), acl.origin
            s.flush()
            for cid in {c for c in (canonical_id, previous) if c is not None}:
                refresh_mirrors(s, cid)
            outcome = DocumentOutcome(document_id=document_id, key=m.key,
                                      outcome=DocumentOutcomeKind.MODIFIED if known else DocumentOutcomeKind.ADDED,
                                      tombstones=len(old), seconds=m.seconds)
            self._put_result(s, run_id, outcome)  # type: ignore[attr-defined]  # StagingStore, on the Registry
            return outcome

    def rehome_mirrors(self) -> list[tuple[str, str]]:
        """Mirrors whose canonical document changed, went away or was withdrawn: make them re-read.

        Their etag, content hash and ``canonical_id`` are cleared, so the next
        sync of their source fetches them and they become canonical (or a
        mirror of another copy).  Returns ``(source_id, key)`` per mirror.
        """
        with self.session() as s:
            self._write_lock(s)
            mirrors = s.scalars(select(Document).where(Document.canonical_id.is_not(None),
                                                       Document.state != DocumentState.DELETED)).all()
            out: list[tuple[str, str]] = []
            touched: set[str] = set()
            for m in mirrors:
                canon = s.get(Document, m.canonical_id)
                if (canon is not None and canon.state == DocumentState.ACTIVE and canon.content_hash == m.content_hash
                        and canon.withdrawn_reason is None and canon.canonical_id is None):
                    continue
                touched.add(m.canonical_id or "")
                m.canonical_id, m.etag, m.content_hash, m.updated_at = None, None, None, utcnow()
                out.append((m.source_id, m.key))
            s.flush()
            for cid in touched - {""}:
                refresh_mirrors(s, cid)
            return out

    def merge_twins(self, now: dt.datetime | None = None) -> list[Withdrawn]:
        """Make later copies of identical content mirrors of the earliest one (per knowledge base).

        Two copies processed at the same time (two workers) can both be
        indexed as canonical; this converges them: the earliest seen stays,
        each later one has its chunks withdrawn and becomes its mirror.
        """
        now = now or utcnow()
        with self.session() as s:
            self._write_lock(s)
            canonical = (Source.removed_at.is_(None), Document.state == DocumentState.ACTIVE,
                         Document.canonical_id.is_(None), Document.withdrawn_reason.is_(None),
                         Document.content_hash.is_not(None), Document.acl_fingerprint.is_not(None))
            # Only contents held by two canonical documents or more (one grouped scan, not every row).
            twice = (select(Document.content_hash).join(Source, Source.id == Document.source_id).where(*canonical)
                     .group_by(Document.content_hash).having(func.count() > 1))
            rows = s.execute(
                select(Document, Source).join(Source, Source.id == Document.source_id)
                .where(*canonical, Document.content_hash.in_(twice))
                .order_by(Source.kb, Document.content_hash, Document.first_seen_at, Document.id)).all()
            first: dict[tuple[str, str, str | None], str] = {}  # (kb, content hash, ACL fingerprint)
            out: list[Withdrawn] = []
            for doc, src in rows:
                canon = first.setdefault((src.kb, doc.content_hash or "", doc.acl_fingerprint), doc.id)
                if canon == doc.id:
                    continue
                out.extend(self._withdraw(s, src, [doc], WithdrawReason.MIRRORED, now))
                doc.withdrawn_reason, doc.canonical_id, doc.chunk_count = None, canon, 0
                s.flush()
                refresh_mirrors(s, canon)
            return out


def refresh_mirrors(s: Session, canonical_id: str) -> None:
    """Rewrite a canonical document's ``mirrors`` from the documents that name it."""
    canon = s.get(Document, canonical_id)
    if canon is None:
        return
    rows = s.execute(select(Document.id, Document.source_id, Document.key, Document.source_uri)
                     .where(Document.canonical_id == canonical_id, Document.state != DocumentState.DELETED)
                     .order_by(Document.source_id, Document.key)).all()
    canon.mirrors = [{"document_id": i, "source_id": sid, "key": k, "source_uri": uri} for i, sid, k, uri in rows] or None


__all__ = ["TwinStore", "refresh_mirrors"]
