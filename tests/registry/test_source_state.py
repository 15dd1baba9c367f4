"""A source's connector state is pending with its run and promoted at its end, on SQLite and PostgreSQL.

Given a source whose open run recorded a state (a listing cursor), when the
run succeeds the next read returns it; when a later run fails (or is
abandoned, as a killed run is once a new run opens), what it recorded is
dropped and the older state stays; a replaced source forgets its state.
"""

from __future__ import annotations

from freshindex.registry import Registry
from freshindex.registry.source_state import SourceStateView


def _finish(registry: Registry, run: int, *, error: str | None = None) -> None:
    registry.set_run_planned(run, listed=0, planned=0)
    registry.finish_sync_run(run, error=error)


def test_state_is_promoted_when_its_run_succeeds_and_dropped_when_it_fails(registry: Registry) -> None:
    registry.add_source("docs", kind="folder", location="/srv/docs", owner="t", kb="default")
    view = SourceStateView(registry, "docs")
    assert view.get() == {}

    # Given a run that recorded a cursor in two steps (merged), Then only that run sees it while open
    run, _ = registry.start_sync_run("docs", "test")
    view.set_pending({"listing": {"seq": 1}})
    view.set_pending({"pages": {"a": 1}})
    assert view.planned(run) == {"listing": {"seq": 1}, "pages": {"a": 1}}
    assert view.planned(run + 1) is None
    assert view.get() == {}  # not promoted while the run is open

    # When it succeeds, Then the next read promotes it
    _finish(registry, run)
    assert view.get() == {"listing": {"seq": 1}, "pages": {"a": 1}}
    assert view.planned(run) is None

    # Given a later run that recorded a newer cursor and removed a key, When it fails, Then the old state stays
    failed, _ = registry.start_sync_run("docs", "test")
    view.set_pending({"listing": {"seq": 2}, "pages": None})
    _finish(registry, failed, error="boom")
    assert view.get() == {"listing": {"seq": 1}, "pages": {"a": 1}}

    # Given a run killed after recording (still running), When a new run opens and abandons it, Then it is dropped
    killed = registry.open_or_join_run("docs", "test", lease_s=0).run_id
    view.set_pending({"listing": {"seq": 3}})
    after = registry.open_or_join_run("docs", "test", lease_s=0)
    assert after.run_id != killed and not after.joined
    assert view.get() == {"listing": {"seq": 1}, "pages": {"a": 1}}

    # And a succeeded run's removal of a key is applied
    view.set_pending({"listing": {"seq": 4}, "pages": None})
    _finish(registry, after.run_id)
    assert view.get() == {"listing": {"seq": 4}}


def test_nothing_is_recorded_without_an_open_run_and_a_replaced_source_forgets(registry: Registry) -> None:
    registry.add_source("docs", kind="folder", location="/srv/docs", owner="t", kb="default")
    registry.set_pending_state("docs", {"listing": {"seq": 1}})  # no run open: nothing
    assert registry.source_state("docs") == {}
    run, _ = registry.start_sync_run("docs", "test")
    registry.set_pending_state("docs", {"listing": {"seq": 1}}, run_id=run + 7)  # not that run: nothing
    assert registry.planned_state("docs", run) is None
    registry.set_pending_state("docs", {"listing": {"seq": 1}}, run_id=run)
    _finish(registry, run)
    assert registry.source_state("docs") == {"listing": {"seq": 1}}

    registry.add_source("docs", kind="folder", location="/srv/other", owner="t", kb="default", replace=True)
    assert registry.source_state("docs") == {}
