"""Which sources are due for a scheduled sync.

A source with ``poll_interval_s`` set is due when its last successful sync
finished longer ago than that interval, or it never synced.  A source that
has a run in progress is not due (webhook bursts and polls do not pile up).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Protocol

from registry import SourceInfo, SyncRunInfo


class _RegistryView(Protocol):
    def list_sources(self, kb: str | None = None) -> list[SourceInfo]: ...

    def last_successful_sync(self, source_id: str) -> dt.datetime | None: ...

    def sync_runs(self, source_id: str | None = None, limit: int = 20) -> list[SyncRunInfo]: ...


def is_due(source: SourceInfo, last_ok: dt.datetime | None, running: bool, now: dt.datetime) -> bool:
    if not source.enabled or not source.poll_interval_s or running:
        return False
    if last_ok is None:
        return True
    if last_ok.tzinfo is None:
        last_ok = last_ok.replace(tzinfo=dt.UTC)
    return (now - last_ok).total_seconds() >= source.poll_interval_s


def due_sources(registry: _RegistryView, now: dt.datetime | None = None) -> list[str]:
    now = now or dt.datetime.now(dt.UTC)
    due = []
    for source in registry.list_sources():
        if not source.poll_interval_s:
            continue
        runs: Iterable[SyncRunInfo] = registry.sync_runs(source.id, limit=1)
        running = any(r.status == "running" for r in runs)
        if is_due(source, registry.last_successful_sync(source.id), running, now):
            due.append(source.id)
    return due
