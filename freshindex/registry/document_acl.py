"""Document ACLs and their versions: what a permission change writes into the registry.

A document's effective ACL (tokens, tenant, sensitivity; resolved by
:mod:`acl.resolution`, which the registry does not import: it takes any object
shaped like :class:`acl.model.DocumentAcl`) is stored on its row with a
fingerprint (:mod:`registry.acl_fields`, shared with staging).  When the
fingerprint changes, ``acl_version`` moves to
``max(old + 1, source.acl_version)``: monotonic and never reused, so a point
whose payload carries an older version is known to be behind and the query
path can deny it before any rebuild.

A change also stages a *re-tag*: an ``upsert`` changeset entry for each of
the document's live chunks, so the next build rewrites those points from the
registry with vectors from the vector cache (nothing is re-embedded).  Inside
a sync the entries go into the run's open changeset (fenced like every
staging write); outside one (``freshindex sources update``) into a new
``staged`` changeset without a run, as :meth:`StagingStore.repair_stranded`
does, which the next build of the knowledge base applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from freshindex.core.enums import ChangesetStatus, ChunkState, DocumentState
from freshindex.core.errors import NotFoundError
from freshindex.registry.acl_fields import ACL_INVALID, AclLike, apply_acl
from freshindex.registry.base import _batches, _source_info
from freshindex.registry.records import SourceInfo
from freshindex.registry.schema import Changeset, Chunk, Document, Source, utcnow
from freshindex.registry.staging import StagingStore


@dataclass(frozen=True)
class AclApplied:
    """What applying resolved ACLs changed."""

    bumped: tuple[str, ...] = ()  # document ids whose acl_version moved
    retagged_chunks: int = 0  # live chunks staged for a re-tag
    changeset_id: int | None = None
    withheld: tuple[str, ...] = ()  # denied until the next sync re-resolves them


def _acls_current(s: Session, acls: Mapping[str, AclLike]) -> bool:
    """Every document already holds its ACL (what :func:`apply_acl` would leave as it is), read from
    the session's own copies: an unchanged page of a release costs no query for its ACL."""
    for doc_id, acl in acls.items():
        doc = s.get(Document, doc_id)
        if (doc is None or doc.acl is None or doc.error_reason == ACL_INVALID
                or doc.acl_fingerprint != acl.fingerprint()):
            return False
    return True


class DocumentAclStore(StagingStore):
    """Change a source's permissions and its documents' resolved ACLs."""

    def update_source_acl(
        self,
        source_id: str,
        *,
        acl: Sequence[str] | None = None,
        rules: Sequence[Mapping[str, Any]] | None = None,
        tenant: str | None = None,
        sensitivity: str | None = None,
    ) -> tuple[SourceInfo, dict[str, Any]]:
        """Set what is given (None: unchanged) and bump ``acl_version`` when anything changed.

        Returns the source and ``{field: [old, new]}`` for each changed field.
        Values must be validated by the caller (:mod:`acl.model`).
        """
        with self.session() as s:
            self._write_lock(s)
            row = s.get(Source, source_id)
            if row is None:
                raise NotFoundError(f"no source {source_id!r} (see `freshindex sources list`)")
            changed: dict[str, Any] = {}
            wanted = {
                "acl": sorted(acl) if acl is not None else None,
                "acl_rules": [dict(r) for r in rules] if rules is not None else None,
                "tenant": tenant, "sensitivity": sensitivity,
            }
            for name, value in wanted.items():
                if value is None:
                    continue
                old = getattr(row, name)
                if (sorted(old or []) if name == "acl" else old) != value:
                    changed[name] = [old, value]
                    setattr(row, name, value)
            if changed:
                row.acl_version = (row.acl_version or 1) + 1
                row.updated_at = utcnow()
            s.flush()
            return _source_info(row), changed

    def apply_document_acls(
        self,
        source_id: str,
        acls: Mapping[str, AclLike],
        *,
        run_id: int | None = None,
        changeset_id: int | None = None,
        withhold: Sequence[str] = (),
    ) -> AclApplied:
        """Store the resolved ACL of each document (by id) and stage a re-tag of those that changed.

        Documents not in the registry, or deleted, are skipped (a new
        document gets its ACL when it is staged).  With ``run_id`` the write
        is fenced and the re-tag goes into the run's open changeset; without
        it, into a new staged changeset (none when no live chunk needs one).
        ``withhold``: documents whose ACL the caller could not recompute (it
        depends on a sidecar, tag or service the next sync reads): their
        ``acl_version`` moves and their fingerprint is cleared, so the query
        path denies their points until the next sync re-resolves and re-tags
        them (fail closed).  One transaction.
        """
        with self.staging_session() as s:
            if run_id is not None:
                self._fence(s, run_id, changeset_id)
            else:
                self._write_lock(s)
            return self._apply_acls(s, source_id, acls, withhold, changeset_id if run_id is not None else None)

    def touch_document(self, run_id: int, document_id: str, *, etag: str | None, size: int, seconds: float,
                       changeset_id: int | None = None, acls: tuple[str, Mapping[str, AclLike]] | None = None,
                       shape_hash: str | None = None) -> None:
        """The etag moved but the content did not: remember the new etag (and ``shape_hash``, the
        parser's, when given); with ``acls`` (source id, document id -> ACL), store them as
        :meth:`apply_document_acls` does, in the same transaction (an unchanged document of a
        release used to cost two, each with its fence)."""
        with self.staging_session() as s:
            self._touch(s, run_id, document_id, etag=etag, size=size, seconds=seconds, changeset_id=changeset_id,
                        shape_hash=shape_hash)
            if acls is not None and not _acls_current(s, acls[1]):
                self._apply_acls(s, acls[0], acls[1], (), changeset_id)

    def _apply_acls(self, s: Session, source_id: str, acls: Mapping[str, AclLike], withhold: Sequence[str],
                    changeset_id: int | None) -> AclApplied:
        """:meth:`apply_document_acls` in the caller's (fenced or locked) transaction."""
        source = s.get(Source, source_id)
        if source is None:
            raise NotFoundError(f"no source {source_id!r} (see `freshindex sources list`)")
        floor = source.acl_version or 1
        bumped: list[str] = []
        withheld: list[str] = []
        for batch in _batches(sorted(acls)):
            for doc in s.scalars(select(Document).where(Document.id.in_(batch), Document.source_id == source_id)):
                if doc.state == DocumentState.DELETED:
                    continue
                if apply_acl(doc, acls[doc.id], floor=floor):
                    bumped.append(doc.id)
        for batch in _batches(sorted(set(withhold) - set(acls))):
            for doc in s.scalars(select(Document).where(Document.id.in_(batch), Document.source_id == source_id)):
                if doc.state != DocumentState.DELETED:
                    doc.acl_version = max((doc.acl_version or 0) + 1, floor)
                    doc.acl_fingerprint = None
                    withheld.append(doc.id)
        s.flush()
        cs_id, retagged = self._stage_retag(s, source, bumped, changeset_id)
        return AclApplied(tuple(bumped), retagged, cs_id, tuple(withheld))

    def _stage_retag(self, s: Session, source: Source, document_ids: Sequence[str],
                     changeset_id: int | None) -> tuple[int | None, int]:
        """Upsert entries for the live chunks of ``document_ids``; a new staged changeset when none is given."""
        total = 0
        for batch in _batches(sorted(document_ids)):
            rows = list(s.execute(
                select(Chunk.id, Chunk.document_id).where(
                    Chunk.document_id.in_(batch), Chunk.state == ChunkState.LIVE, Chunk.tombstoned.is_(False)
                )
            ))
            if not rows:
                continue
            if changeset_id is None:
                cs = Changeset(kb=source.kb, source_id=source.id, sync_run_id=None, status=ChangesetStatus.STAGED,
                               staged_at=utcnow())
                s.add(cs)
                s.flush()
                changeset_id = cs.id
            by_doc: dict[str, list[str]] = {}
            for cid, doc_id in rows:
                by_doc.setdefault(doc_id, []).append(cid)
            for doc_id, ids in by_doc.items():
                self._stage_entries(s, changeset_id, doc_id, ids, "upsert")
            total += len(rows)
        return changeset_id, total

    def document_acls(self, source_id: str) -> dict[str, dict[str, Any]]:
        """key -> the stored ACL of each live (not deleted) document of a source."""
        with self.session() as s:
            rows = s.scalars(select(Document).where(Document.source_id == source_id,
                                                    Document.state != DocumentState.DELETED))
            return {
                r.key: {"document_id": r.id, "acl": None if r.acl is None else list(r.acl), "tenant": r.tenant,
                        "sensitivity": r.sensitivity, "acl_version": r.acl_version, "origin": r.acl_origin,
                        "fingerprint": r.acl_fingerprint}
                for r in rows
            }


__all__ = ["ACL_INVALID", "AclApplied", "AclLike", "DocumentAclStore", "apply_acl"]
