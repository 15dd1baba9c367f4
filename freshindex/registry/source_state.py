"""Per-source connector state, pending with the run that recorded it and promoted at its end.

A connector may keep state between listings (a partial listing's cursor, a
web crawl's page validators).  A run records what its listing leaves as the
source's *pending* state (:meth:`SourceStateStore.set_pending_state`, tied to
that run); the first read after the run finished (:meth:`source_state`), or
the next run's first record, whichever comes first, promotes it when the run
succeeded or was partial (``SUCCESSFUL_RUNS``: top level keys replace the old
ones, a key set to None is removed) and drops it when the run failed, was held
or was abandoned, so the next listing starts from the older state.  The same
mechanism as the git cursor (:meth:`registry.sources.SourcesStore.source_cursor`),
in its own table (``source_state``) rather than the source's options.

What it does not do: validate what a connector keeps (any JSON object), nor
keep more than one pending value per source (one open run per source).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from freshindex.core.enums import SUCCESSFUL_RUNS, RunStatus
from freshindex.registry.base import _Base
from freshindex.registry.schema import SourceState, SyncRun, utcnow


def _merged(state: dict[str, Any] | None, update: dict[str, Any]) -> dict[str, Any]:
    out = dict(state or {})
    for key, value in update.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _settle_pending(s: Session, row: SourceState) -> None:
    """Promote (its run succeeded or was partial) or drop (it failed, was held or abandoned) the row's pending
    state once its run has finished; nothing while that run still runs.  Called under the row's lock."""
    if row.pending_run is None:
        return
    status = s.scalar(select(SyncRun.status).where(SyncRun.id == row.pending_run))
    if status == RunStatus.RUNNING:
        return
    if status in SUCCESSFUL_RUNS:
        row.state = _merged(row.state, row.pending or {})
    row.pending, row.pending_run = None, None


class SourceStateStore(_Base):
    """Read, record and promote a source's connector state (table ``source_state``)."""

    def source_state(self, source_id: str) -> dict[str, Any]:
        """The state the source's last successful run left (empty when none); promotes or drops a finished
        run's pending state first."""
        with self.session() as s:
            self._write_lock(s)
            row = s.scalars(self._for_update(select(SourceState).where(SourceState.source_id == source_id))).first()
            if row is None:
                return {}
            _settle_pending(s, row)
            return dict(row.state or {})

    def set_pending_state(self, source_id: str, value: dict[str, Any], *, run_id: int | None = None) -> None:
        """Record ``value`` as what run ``run_id`` (default: the source's open run) leaves, merged into what
        that run recorded before; nothing when that run is not open.  A finished run's pending state is
        promoted or dropped first, as :meth:`source_state` would."""
        with self.session() as s:
            self._write_lock(s)
            q = select(SyncRun.id).where(SyncRun.source_id == source_id, SyncRun.status == RunStatus.RUNNING)
            if run_id is not None:
                q = q.where(SyncRun.id == run_id)
            run = s.scalar(q.order_by(SyncRun.id.desc()).limit(1))
            if run is None:
                return
            row = s.scalars(self._for_update(select(SourceState).where(SourceState.source_id == source_id))).first()
            if row is None:
                row = SourceState(source_id=source_id, state=None)
                s.add(row)
            else:
                _settle_pending(s, row)  # a finished run's pending, not yet read, is not lost to the new one
            same = row.pending_run == run
            row.pending = {**((row.pending or {}) if same else {}), **value}
            row.pending_run = run
            row.updated_at = utcnow()

    def planned_state(self, source_id: str, run_id: int) -> dict[str, Any] | None:
        """What run ``run_id`` recorded while it is the pending one (a task reads its run's plan), else None;
        never promotes or drops it."""
        with self.session() as s:
            row = s.get(SourceState, source_id)
            if row is None or row.pending_run != run_id:
                return None
            return dict(row.pending or {})

    def forget_source_state(self, source_id: str) -> None:
        """Drop the source's state and pending state (a source replaced: its old cursor means nothing)."""
        with self.session() as s:
            s.execute(delete(SourceState).where(SourceState.source_id == source_id))


class SourceStateView:
    """One source's state, as a connector sees it (:class:`workers.connectors.registry.StateStore`)."""

    def __init__(self, registry: SourceStateStore, source_id: str) -> None:
        self.registry, self.source_id = registry, source_id

    def get(self) -> dict[str, Any]:
        return self.registry.source_state(self.source_id)

    def set_pending(self, value: dict[str, Any]) -> None:
        self.registry.set_pending_state(self.source_id, value)

    def planned(self, run_id: int) -> dict[str, Any] | None:
        return self.registry.planned_state(self.source_id, run_id)


__all__ = ["SourceStateStore", "SourceStateView"]
