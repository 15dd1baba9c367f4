"""Health signals of a knowledge base, read from the registry (dashboards, stale labels).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, or_, select

from freshindex.core.enums import SUCCESSFUL_RUNS, ChangesetStatus, DocumentState, SnapshotStatus
from freshindex.registry.base import _Base
from freshindex.registry.schema import Changeset, Document, Snapshot, Source, SyncRun

if TYPE_CHECKING:
    import datetime as dt

    from freshindex.registry.freshness import SourceFreshness
    from freshindex.registry.records import SnapshotInfo


class HealthStore(_Base):
    """The registry side of a knowledge base's health, in one dict."""

    if TYPE_CHECKING:  # the other parts it reads, composed beside this one in Registry (registry/store.py)
        def active_snapshot(self, kb: str) -> SnapshotInfo | None: ...
        def held_deletions(self, kb: str) -> dict[str, int]: ...
        def tombstone_backlog(self, kb: str | None = None, sources: Collection[str] | None = None) -> int: ...
        def count_live(self, kb: str, sources: Collection[str] | None = None) -> int: ...
        def stale_sources(self, kb: str, now: dt.datetime | None = None) -> dict[str, SourceFreshness]: ...

    def health(self, kb: str, sources: Collection[str] | None = None) -> dict[str, Any]:
        """Signals for dashboards and for labelling evidence as stale.

        ``sources``: count only what these sources of ``kb`` hold (one
        tenant's view: last sync, documents in error, pending changesets,
        tombstone backlog, live chunks, held deletions, stale sources). The
        snapshot figures (active snapshot, snapshots by status, held builds)
        stay the knowledge base's: a build mixes every source of it.
        """
        with self.session() as s:
            last_ok = s.scalar(
                select(func.max(SyncRun.finished_at)).where(
                    SyncRun.kb == kb, SyncRun.status.in_(SUCCESSFUL_RUNS),
                    *([SyncRun.source_id.in_(sources)] if sources is not None else []),
                )
            )
            in_error = (Source.kb == kb, Document.error_reason.is_not(None), Document.state != DocumentState.SKIPPED,
                        *([Source.id.in_(sources)] if sources is not None else []))
            errors = s.scalar(
                select(func.count()).select_from(Document).join(Source, Source.id == Document.source_id).where(*in_error)
            ) or 0
            pending = s.scalar(
                select(func.count()).select_from(Changeset).where(
                    Changeset.kb == kb,
                    or_(Changeset.status == ChangesetStatus.STAGED, Changeset.status == ChangesetStatus.OPEN),
                    *([Changeset.source_id.in_(sources)] if sources is not None else []),
                )
            ) or 0
            by_reason = {reason: n for reason, n in s.execute(
                select(Document.error_reason, func.count()).join(Source, Source.id == Document.source_id)
                .where(*in_error).group_by(Document.error_reason)
            )}
            by_status = {status: n for status, n in s.execute(
                select(Snapshot.status, func.count()).where(Snapshot.kb == kb).group_by(Snapshot.status)
            )}
            held: dict[str, int] = {}
            verification: dict[str, Any] | None
            for verification in s.scalars(select(Snapshot.verification).where(Snapshot.kb == kb,
                                                                              Snapshot.status == SnapshotStatus.FAILED)):
                check: str = (verification or {}).get("failed_check") or "error"
                held[check] = held.get(check, 0) + 1
        backlog, live = self.tombstone_backlog(kb, sources), self.count_live(kb, sources)
        active = self.active_snapshot(kb)
        mine = (lambda sid: sid in sources) if sources is not None else (lambda _sid: True)
        return {
            "kb": kb,
            "active_snapshot": active.id if active else None,
            "last_successful_sync": last_ok.isoformat() if last_ok else None,
            "documents_in_error": errors,
            "documents_in_error_by_reason": by_reason,
            "snapshots_by_status": by_status,
            "held_builds_by_check": held,
            "deletions_held_by_source": {sid: n for sid, n in self.held_deletions(kb).items() if mine(sid)},
            "pending_changesets": pending,
            "tombstone_backlog": backlog,
            "live_chunks": live,
            # Stale sources keep serving, labelled with their last verified time (registry/freshness.py).
            "stale_sources": {f.source_id: f.as_dict() for f in self.stale_sources(kb).values() if mine(f.source_id)},
        }
