"""The one lease rule and the poison-pill attempt counter, on SQLite and PostgreSQL.

Past the lease with an injected clock: a run whose worker keeps touching its
lease is not reaped, a run nobody touched is, and the scheduler and the
reaper agree because both call :func:`registry.runs.lease_alive`.
"""

from __future__ import annotations

import datetime as dt

from freshindex.core.enums import RunStatus
from freshindex.registry import Registry
from freshindex.registry.runs import lease_alive
from freshindex.schedules.plan import run_blocks
from freshindex.schedules.reaper import ReapActions, reap
from freshindex.settings.model import SyncSettings
from tests.registry.contract.helpers import add_source


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


def test_an_attempt_opened_ahead_is_refused_for_a_document_a_process_died_on(reg: Registry, fresh) -> None:
    doc, other = fresh("doc"), fresh("other")
    # Given a document never begun: opened ahead, and the crash counter sees it open
    assert reg.begin_attempt_ahead(doc, etag="e1", run_id=1) is True
    # When its process dies with it open, the next opening ahead is refused (nothing changed) ...
    assert reg.begin_attempt_ahead(doc, etag="e1", run_id=2) is False
    # ... and the loop's own attempt counts the crash
    assert reg.begin_document_attempt(doc, etag="e1", run_id=2) == (1, True)
    reg.end_document_attempt(doc, outcome=False)
    assert reg.begin_attempt_ahead(doc, etag="e1", run_id=2) is False  # closed, but a crash is counted
    # An outcome resets it: working ahead is allowed again
    reg.end_document_attempt(doc, outcome=True)
    assert reg.begin_attempt_ahead(doc, etag="e1", run_id=3) is True
    # A retried error with no crash keeps no one from working ahead
    assert reg.begin_document_attempt(other, etag="e1", run_id=3) == (0, False)
    reg.end_document_attempt(other, outcome=False)
    assert reg.begin_attempt_ahead(other, etag="e1", run_id=3) is True
    assert reg.document_crashes(other) == 0


def test_a_crash_is_an_attempt_begun_and_never_ended(reg: Registry, fresh) -> None:
    doc = fresh("doc")
    # Given a document begun for the first time
    assert reg.begin_document_attempt(doc, etag="e1", run_id=1) == (0, False)
    # When its process dies (no end) and the next attempt begins, that is one crash; two in a row, two
    assert reg.begin_document_attempt(doc, etag="e1", run_id=1) == (1, True)
    assert reg.begin_document_attempt(doc, etag="e1", run_id=2) == (2, True)
    assert reg.document_crashes(doc) == 2
    # An attempt that ends alive without an outcome (a retried error) keeps the count and adds nothing
    reg.end_document_attempt(doc, outcome=False)
    assert reg.begin_document_attempt(doc, etag="e1", run_id=2) == (2, False)
    # A new version starts again; an outcome resets it
    assert reg.begin_document_attempt(doc, etag="e2", run_id=3) == (0, False)
    assert reg.begin_document_attempt(doc, etag="e2", run_id=3) == (1, True)
    reg.end_document_attempt(doc, outcome=True)
    assert reg.document_crashes(doc) == 0
    assert reg.begin_document_attempt(doc, etag="e2", run_id=4) == (0, False)
