"""Which sources are due for a scheduled sync.

A source with ``poll_interval_s`` set is due when its last successful sync
finished longer ago than that interval, or it never synced.  How the latest
run ended matters:

* ``failed`` (listing failed, run aborted or abandoned): the run does not
  count, so the source stays due and the next poll tries again (a source
  that is down is retried once a poll tick, 60 s, not once an interval);
* ``held`` (the deletion guard held its deletions): counts as an attempt,
  so the hold is repeated once an interval, not once a poll tick, until a
  person confirms or the documents come back;
* ``running``: not due while its heartbeat (or start, if it never beat) is
  younger than ``lease_s``; a run older than that is presumed dead and no
  longer blocks (the next run adopts its open changeset).

Not guaranteed: a poll and a webhook may still start two runs of a source
at once; the registry's run handling, not this function, keeps that safe.
"""

from __future__ import annotations

import datetime as dt

from freshindex.core.enums import RunStatus
from freshindex.registry import SourceInfo, SyncRunInfo
from freshindex.registry.protocols import RunHistory
from freshindex.registry.runs import lease_alive
from freshindex.settings.model import SyncSettings


def run_blocks(run: SyncRunInfo, now: dt.datetime, lease_s: float) -> bool:
    """True while ``run`` is running and its lease has not run out."""
    return run.status == RunStatus.RUNNING and lease_alive(run, now=now, lease_s=lease_s)


def is_due(source: SourceInfo, last_ok: dt.datetime | None, running: bool, now: dt.datetime) -> bool:
    if not source.enabled or not source.poll_interval_s or running:
        return False
    if last_ok is None:
        return True
    return (now - last_ok).total_seconds() >= source.poll_interval_s


def due_sources(registry: RunHistory, now: dt.datetime | None = None, *,
                lease_s: float | None = None) -> list[str]:
    """Sources due for a scheduled sync; ``lease_s`` defaults to the settings' ``sync.run_lease_s``."""
    now = now or dt.datetime.now(dt.UTC)
    lease_s = SyncSettings().run_lease_s if lease_s is None else lease_s
    due = []
    for source in registry.list_sources():
        if not source.poll_interval_s:
            continue
        runs = registry.sync_runs(source.id, limit=1)
        latest = runs[0] if runs else None
        running = latest is not None and run_blocks(latest, now, lease_s)
        last = registry.last_successful_sync(source.id)
        if latest is not None and latest.status == RunStatus.HELD and latest.finished_at is not None:
            held_at = latest.finished_at
            last = held_at if last is None or (held_at is not None and held_at > last) else last
        if is_due(source, last, running, now):
            due.append(source.id)
    return due
