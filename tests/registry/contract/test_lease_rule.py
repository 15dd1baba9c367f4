"""The one lease rule as the scheduler, the registry and the reaper apply it, on SQLite and PostgreSQL.

Past the lease with an injected clock: a run whose worker keeps touching its
lease is not reaped, a run nobody touched is, and the scheduler and the
reaper agree because both call :func:`registry.runs.lease_alive`.  The
attempt counter and the registry's own lease guarantees are in
:class:`freshindex.testing.RegistryContract`.
"""

from __future__ import annotations

import datetime as dt

from freshindex.core.enums import RunStatus
from freshindex.registry import Registry
from freshindex.registry.runs import lease_alive
from freshindex.schedules.plan import run_blocks
from freshindex.schedules.reaper import ReapActions, reap
from freshindex.settings.model import SyncSettings
from freshindex.testing.registry import add_source


def test_past_the_default_lease_a_touched_run_lives_and_an_untouched_one_is_reaped(reg: Registry, fresh) -> None:
    # Given two running runs with plans, on the default lease
    lease = SyncSettings().run_lease_s
    live_source, dead_source = add_source(reg, fresh("live"), fresh("kb")), add_source(reg, fresh("dead"), fresh("kb"))
    live, _ = reg.start_sync_run(live_source.id, "test")
    dead, _ = reg.start_sync_run(dead_source.id, "test")
    for run in (live, dead):
        reg.set_run_planned(run, listed=1, planned=1, documents=[("a.md", "e1", 1)])
    t0 = dt.datetime.now(dt.UTC)
    reg.heartbeat_run(dead, "w-dead", now=t0)
    # When the live run's worker keeps touching its lease (a long OCR page) and the other's died at t0
    for step in range(1, 7):
        reg.heartbeat_run(live, "w-live", now=t0 + dt.timedelta(seconds=lease * step / 4))
    later = t0 + dt.timedelta(seconds=lease * 1.5 + 1)

    # Then past the lease, the scheduler's, the registry's and the reaper's views agree
    assert lease_alive(reg.get_sync_run(live), now=later, lease_s=lease)
    assert not lease_alive(reg.get_sync_run(dead), now=later, lease_s=lease)
    assert run_blocks(reg.get_sync_run(live), later, lease) and not run_blocks(reg.get_sync_run(dead), later, lease)
    stalled = {r.id for r in reg.stalled_runs(lease, now=later)}
    assert dead in stalled and live not in stalled
    built: list[int] = []
    report = reap(reg, ReapActions(build=lambda _kb, run: built.append(run)), lease_s=lease, now=later)
    assert [(r.run_id, r.action) for r in report.reaped if r.run_id in (live, dead)] == [(dead, "closed")]
    assert reg.get_sync_run(live).status == RunStatus.RUNNING
    assert reg.get_sync_run(dead).status == RunStatus.FAILED and built == [dead]
    # And before the lease ran out the untouched run was alive too
    assert dead not in {r.id for r in reg.stalled_runs(lease, now=t0 + dt.timedelta(seconds=lease - 1))}
