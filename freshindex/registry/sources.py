"""Sources and their documents: the catalogue a sync diffs against.

Also the deletion guard's one-shot confirmation, which lives on the source
row (:meth:`SourcesStore.confirm_deletions`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select

from freshindex.core.enums import SUCCESSFUL_RUNS, ChunkState, RunStatus
from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.core.ids import validate_kb_name, validate_source_id
from freshindex.registry.base import _Base, _doc_record, _source_info
from freshindex.registry.records import DocumentRecord, SourceInfo, SourceSetup
from freshindex.registry.schema import Chunk, Document, Snapshot, Source, SourceState, SyncRun, utcnow


class SourcesStore(_Base):
    """Add, read and list sources; read the registry's view of their documents."""

    def add_source(
        self,
        source_id: str,
        *,
        kind: str,
        location: str,
        owner: str,
        kb: str,
        setup: SourceSetup = SourceSetup(),
        replace: bool = False,
    ) -> SourceInfo:
        acl, tenant, sensitivity = setup.acl, setup.tenant, setup.sensitivity
        validate_source_id(source_id)
        validate_kb_name(kb)
        with self.session() as s:
            existing = s.get(Source, source_id)
            if existing is not None and not replace:
                raise ConfigError(f"source {source_id!r} already exists (use --replace to change it)")
            if existing is not None and existing.kb != kb:
                raise ConfigError(f"source {source_id!r} belongs to knowledge base {existing.kb!r}; it cannot move")
            row = existing or Source(id=source_id)
            if existing is not None:  # a replaced source's connector state (a cursor) means nothing any more
                s.execute(delete(SourceState).where(SourceState.source_id == source_id))
            row.kind, row.location, row.owner, row.kb = kind, location, owner, kb
            row.options = dict(setup.options or {})
            rules = [dict(r) for r in setup.acl_rules] if setup.acl_rules else None
            if existing is not None and (sorted(existing.acl or []) != sorted(acl) or existing.tenant != tenant
                                         or existing.sensitivity != sensitivity or existing.acl_rules != rules):
                row.acl_version = (existing.acl_version or 1) + 1  # a replaced source's permissions moved
            row.acl = list(acl)
            row.tenant, row.sensitivity, row.acl_rules = tenant, sensitivity, rules
            row.poll_interval_s = setup.poll_interval_s
            row.enabled = True
            row.paused, row.removed_at = False, None  # re-adding a removed source brings it back (freshness.py)
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

    def documents_for_source(self, source_id: str) -> dict[str, DocumentRecord]:
        with self.session() as s:
            rows = s.scalars(select(Document).where(Document.source_id == source_id))
            return {r.key: _doc_record(r) for r in rows}

    def get_document(self, document_id: str) -> DocumentRecord | None:
        with self.session() as s:
            row = s.get(Document, document_id)
            return _doc_record(row) if row is not None else None

    def live_chunk_ids(self, document_id: str) -> set[str]:
        """Chunks of a document that are (or are about to be) served."""
        with self.session() as s:
            q = select(Chunk.id).where(
                Chunk.document_id == document_id,
                Chunk.tombstoned.is_(False),
                Chunk.state.in_((ChunkState.LIVE, ChunkState.PENDING)),
            )
            return set(s.scalars(q))

    def confirm_deletions(self, source_id: str, count: int, *, actor: str) -> dict[str, Any]:
        """Allow the next sync of a source to delete up to ``count`` documents (one shot)."""
        with self.session() as s:
            row = s.get(Source, source_id)
            if row is None:
                raise NotFoundError(f"no source {source_id!r} (see `freshindex sources list`)")
            confirmation = {"count": int(count), "by": actor, "at": utcnow().isoformat()}
            row.options = {**(row.options or {}), "confirmed_deletions": confirmation}
            return confirmation

    #: The key of ``sources.options`` holding a connector's sync cursor (a git source's last synced commit).
    CURSOR_OPTION = "sync_cursor"

    def source_cursor(self, source_id: str) -> dict[str, Any] | None:
        """The cursor of the source's last run that succeeded (or partly), or None.

        A connector records where its listing is with :meth:`set_pending_cursor`
        while the run is open; the first read after that run finished promotes
        it when the run succeeded or was partial, and drops it when the run
        failed or was held (the next diff then starts from the older cursor,
        so moves the held run saw are reported again).  Kept on the source row
        like the deletion confirmation; ``sources add --replace`` forgets it.
        """
        with self.session() as s:
            q = select(Source).where(Source.id == source_id)
            q = self._for_update(q)
            row = s.scalars(q).first()
            if row is None:
                return None
            return self._settled_cursor(s, row).get("synced")

    def _settled_cursor(self, s: Any, row: Source) -> dict[str, Any]:
        """``row``'s cursor with a finished run's pending one promoted (that run succeeded or was partial) or
        dropped (it failed or was held), written back to the row when it changed; a running run's stays."""
        cursor = dict((row.options or {}).get(self.CURSOR_OPTION) or {})
        pending = cursor.get("pending")
        if pending:
            status = s.scalar(select(SyncRun.status).where(SyncRun.id == pending.get("run")))
            if status != RunStatus.RUNNING:
                cursor.pop("pending")
                if status in SUCCESSFUL_RUNS:
                    cursor["synced"] = {k: v for k, v in pending.items() if k != "run"}
                row.options = {**(row.options or {}), self.CURSOR_OPTION: cursor}
        return cursor

    def source_revisions(self, kb: str) -> dict[str, str]:
        """Source id -> the revision (a git commit) its last successful run listed, for the sources of ``kb``
        that have one: what a snapshot built now is built from, recorded with it and cited by queries."""
        revisions: dict[str, str] = {}
        for source in self.list_sources(kb):
            commit = (self.source_cursor(source.id) or {}).get("commit")
            if isinstance(commit, str) and not source.removed:
                revisions[source.id] = commit
        return revisions

    def planned_cursor(self, source_id: str, run_id: int) -> dict[str, Any] | None:
        """The pending cursor run ``run_id`` recorded (its listing's revision), or None when it recorded
        none or another run's is pending.  A document task reads the source at this revision, whichever
        process it runs in (invariant 9); it never promotes or drops the cursor."""
        with self.session() as s:
            row = s.get(Source, source_id)
            pending = ((row.options or {}).get(self.CURSOR_OPTION) or {}).get("pending") if row else None
            if not pending or pending.get("run") != run_id:
                return None
            return {k: v for k, v in pending.items() if k != "run"}

    def set_pending_cursor(self, source_id: str, value: dict[str, Any]) -> None:
        """Record where the source's open run listed (promoted by :meth:`source_cursor` once it succeeds); a
        finished run's pending cursor is settled first, as :meth:`source_cursor` would."""
        with self.session() as s:
            row = s.scalars(self._for_update(select(Source).where(Source.id == source_id))).first()
            run = s.scalar(select(SyncRun.id).where(SyncRun.source_id == source_id, SyncRun.status == RunStatus.RUNNING)
                           .order_by(SyncRun.id.desc()).limit(1))
            if row is None or run is None:
                return
            # A finished run's cursor nobody has read yet is promoted (or dropped) first, never overwritten.
            cursor = self._settled_cursor(s, row)
            cursor["pending"] = {**value, "run": run}
            row.options = {**(row.options or {}), self.CURSOR_OPTION: cursor}

    def take_deletion_confirmation(self, source_id: str) -> int | None:
        """Remove and return a source's pending confirmation (the count), if any.

        Atomic: of two syncs racing for one confirmation, one gets it.
        """
        with self.session() as s:
            q = select(Source).where(Source.id == source_id)
            q = self._for_update(q)
            row = s.scalars(q).first()
            if row is None or "confirmed_deletions" not in (row.options or {}):
                return None
            options = dict(row.options)
            confirmation = options.pop("confirmed_deletions") or {}
            row.options = options
            return int(confirmation.get("count", 0))
