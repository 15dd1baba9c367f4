"""Contract of :class:`registry.protocols.RunLedger` and the fenced :class:`DocumentStaging` writes.

On both backends: one run per source however many callers race to open it,
exactly one finisher, and no write from a task whose run is closed.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest

from freshindex.core.enums import BuildStatus, RunStatus
from freshindex.core.errors import StaleTaskError
from freshindex.registry import Registry
from tests.registry.contract.helpers import add_source, stage


def test_concurrent_open_or_join_opens_exactly_one_run(reg: Registry, fresh) -> None:
    # Given a source nobody is syncing
    source = add_source(reg, fresh("docs"), fresh("kb"))
    # When eight callers ask to sync it at once
    with ThreadPoolExecutor(4) as pool:
        claims = list(pool.map(lambda _: reg.open_or_join_run(source.id, "webhook", lease_s=60), range(8)))
    # Then one opened a run and every other joined that same run
    assert sum(not c.joined for c in claims) == 1
    assert len({c.run_id for c in claims}) == 1
    assert [r.status for r in reg.sync_runs(source.id)] == [RunStatus.RUNNING]


def test_a_follow_up_request_is_remembered_on_the_joined_run(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    first = reg.open_or_join_run(source.id, "schedule", lease_s=60)
    joined = reg.open_or_join_run(source.id, "webhook", lease_s=60, followup=True)
    assert joined.joined and joined.run_id == first.run_id
    assert reg.get_sync_run(first.run_id).followup_requested


def test_opening_without_a_lease_abandons_the_live_run_and_adopts_its_changes(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    old_run, old_cs = reg.start_sync_run(source.id, "test")
    stage(reg, old_run, old_cs, source, "a.md", ["kept"])
    new_run, new_cs = reg.start_sync_run(source.id, "test")
    assert new_run != old_run and new_cs != old_cs
    old = reg.get_sync_run(old_run)
    assert old.status == RunStatus.FAILED and "abandoned" in (old.error or "")
    assert old_cs in reg.staged_changesets(source.kb)  # its staged document is a valid change


def test_exactly_one_concurrent_finisher_gets_true(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, cs = reg.start_sync_run(source.id, "test")
    stage(reg, run, cs, source, "a.md", ["text"])
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: reg.finish_sync_run(run), range(6)))
    assert [finished for _, finished in results].count(True) == 1
    info = reg.get_sync_run(run)
    assert info.status == RunStatus.SUCCEEDED
    assert info.summary["documents"]["added"] == 1
    assert reg.staged_changesets(source.kb) == [cs]


def test_writes_of_a_closed_run_are_refused_and_write_nothing(reg: Registry, fresh) -> None:
    # Given a run that has finished (its changeset staged)
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, cs = reg.start_sync_run(source.id, "test")
    stage(reg, run, cs, source, "a.md", ["first"])
    reg.finish_sync_run(run)
    # When a late task of that run tries to stage, fail or touch a document
    assert reg.run_refusal(run, cs) is not None
    with pytest.raises(StaleTaskError):
        stage(reg, run, cs, source, "late.md", ["late"])
    with pytest.raises(StaleTaskError):
        reg.record_failure(run, source_id=source.id, document_id="x", key="bad.md", reason="unreadable",
                           detail="late", changeset_id=cs)
    # Then nothing of it reached the registry
    assert set(reg.documents_for_source(source.id)) == {"a.md"}
    assert reg.run_progress(run)[0] == 1
    assert reg.count_stale_task(run) == 1


def test_a_task_naming_another_changeset_is_refused(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, cs = reg.start_sync_run(source.id, "test")
    assert reg.run_refusal(run, cs) is None
    assert "not the run's" in (reg.run_refusal(run, cs + 10_000) or "")


def test_a_run_stalls_once_its_lease_runs_out_and_heartbeats_renew_it(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, _cs = reg.start_sync_run(source.id, "test")
    reg.set_run_planned(run, listed=2, planned=2, documents=[("a.md", "e1", 1), ("b.md", None, 2)])
    reg.heartbeat_run(run, worker="w1")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
    assert run not in {r.id for r in reg.stalled_runs(3600)}
    assert run in {r.id for r in reg.stalled_runs(60, now=later)}
    assert reg.unprocessed_documents(run) == [("a.md", "e1", 1, None), ("b.md", None, 2, None)]
    assert reg.record_reap(run, "resumed", documents=2) == 1
    assert reg.get_sync_run(run).summary["reaps"][0]["action"] == "resumed"


def test_the_build_after_a_run_is_recorded(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, cs = reg.start_sync_run(source.id, "test")
    stage(reg, run, cs, source, "a.md", ["text"])
    info, _ = reg.finish_sync_run(run)
    assert info.build_status == BuildStatus.PENDING and not info.done
    reg.set_run_build(run, status=BuildStatus.BUILT, snapshot_id="snap-1")
    info = reg.get_sync_run(run)
    assert (info.build_status, info.snapshot_id, info.done) == (BuildStatus.BUILT, "snap-1", True)
    assert not reg.run_changeset_applied(run)
    assert reg.last_successful_sync(source.id) is not None
