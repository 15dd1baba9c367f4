"""Contract of the document start markers and the parse-worker evidence the reaper reads.

On both backends: a start marker is written only for a running run (a
redelivery renews it), is what ``started_documents`` reports, is cleared
only up to the time given (a newer start keeps it) and goes when the run
finishes; ``worked_runs`` counts a run whose document started, or whose
continuation sent a batch, within the lease, and not one renewed only by
the planner (``set_run_planned``, its first batch), a plain heartbeat or
the reaper.
"""

from __future__ import annotations

import datetime as dt

from freshindex.registry import Registry
from tests.registry.contract.helpers import add_source


def _planned_run(reg: Registry, fresh, name: str = "docs") -> int:
    source = add_source(reg, fresh(name), fresh("kb"))
    run, _cs = reg.start_sync_run(source.id, "test")
    reg.set_run_planned(run, listed=4, planned=4, documents=[(f"d{i}.md", None, 1) for i in range(4)])
    return run


def test_start_markers_are_kept_per_document_and_cleared_up_to_a_time(reg: Registry, fresh) -> None:
    run = _planned_run(reg, fresh)
    assert reg.started_documents(run) == {}
    reg.mark_document_started(run, "d0.md", "w1")
    reg.mark_document_started(run, "d1.md", "w1")
    first = reg.started_documents(run)
    assert set(first) == {"d0.md", "d1.md"} and all(t.tzinfo is not None for t in first.values())
    reg.mark_document_started(run, "d1.md", "w2")  # a redelivery renews its marker
    assert set(reg.started_documents(run)) == {"d0.md", "d1.md"}
    # Cleared up to the time read: a marker written since then stays
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    assert reg.clear_started(run, ["d0.md"], up_to=first["d0.md"]) == 1
    assert reg.clear_started(run, ["d1.md"], up_to=first["d1.md"] - dt.timedelta(seconds=1)) == 0
    assert set(reg.started_documents(run)) == {"d1.md"}
    assert reg.clear_started(run, ["d1.md"], up_to=later) == 1
    assert reg.clear_started(run, [], up_to=later) == 0


def test_no_marker_for_a_closed_run_and_none_left_when_it_finishes(reg: Registry, fresh) -> None:
    run = _planned_run(reg, fresh)
    reg.mark_document_started(run, "d0.md")
    reg.finish_sync_run(run, error="closed by the test")
    assert reg.started_documents(run) == {}
    reg.mark_document_started(run, "d1.md")  # a late task of the closed run
    assert reg.started_documents(run) == {}


def test_only_parse_work_counts_as_workers_alive(reg: Registry, fresh) -> None:
    run = _planned_run(reg, fresh)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
    # The planner's renewals, its first batch, a plain heartbeat: no evidence
    assert reg.advance_dispatch(run, 0, 2, worked=False)
    reg.heartbeat_run(run, worker="sync-worker")
    assert run not in reg.worked_runs(3600)
    # A document started: evidence, for one lease
    reg.mark_document_started(run, "d0.md", "w1")
    assert run in reg.worked_runs(3600)
    assert run not in reg.worked_runs(60, now=later)
    # A continuation's batch: evidence too, until the reaper renews the run
    other = _planned_run(reg, fresh, "other")
    assert reg.advance_dispatch(other, 0, 2, worked=False) and other not in reg.worked_runs(3600)
    assert reg.advance_dispatch(other, 2, 4)
    assert other in reg.worked_runs(3600)
    reg.record_reap(other, "redispatched", missing=4)
    assert other not in reg.worked_runs(3600)
    # A finished run is no evidence
    reg.finish_sync_run(run)
    assert run not in reg.worked_runs(3600)
