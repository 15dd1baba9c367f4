"""One run serialisation and one listing: ``runs list``, ``sources runs`` and the API read the same rows."""

from __future__ import annotations

import datetime as dt

import pytest

from freshindex.core.errors import NotFoundError
from freshindex.registry import Registry, reports


def finished_run(reg: Registry, source: str = "docs") -> int:
    """A source ``source`` with one run that listed nothing and finished; returns the run's id."""
    reg.add_source(source, kind="folder", location="/kb", owner="t", kb="default")
    run, _ = reg.start_sync_run(source, "test")
    reg.set_run_planned(run, listed=0, planned=0)
    reg.finish_sync_run(run)
    return run


def test_a_running_run_counts_its_time_and_a_finished_one_its_lag_keys(sqlite_registry: Registry) -> None:
    # Given one finished run and one running run of a source
    reg = sqlite_registry
    first = finished_run(reg)
    second, _ = reg.start_sync_run("docs", "test")

    # When the source's runs are listed, and one run is shown
    rows = reports.sync_runs(reg, source="docs")
    shown = reports.sync_run(reg, first)

    # Then both come newest first in one shape: the running one with its age and progress,
    # the finished one without; the shown run is the listed row plus its outcomes and summary
    assert [r["id"] for r in rows] == [second, first]
    assert rows[0]["running_for_s"] is not None and rows[0]["docs_done"] == 0
    assert rows[1]["running_for_s"] is None and rows[1]["docs_done"] is None
    assert set(rows[0]) == set(rows[1]) >= {"lag_s", "held_reason", "docs_listed", "docs_planned", "build_status"}
    assert set(shown) == set(rows[1]) | {"outcomes", "summary"}


def test_running_for_s_counts_to_the_given_now(sqlite_registry: Registry) -> None:
    # Given a running run's record
    reg = sqlite_registry
    reg.add_source("docs", kind="folder", location="/kb", owner="t", kb="default")
    reg.start_sync_run("docs", "test")
    run = reg.sync_runs("docs", limit=1)[0]
    # When it is serialised ninety seconds after it started
    data = run.as_dict(now=run.started_at + dt.timedelta(seconds=90))
    # Then its age is those ninety seconds
    assert data["running_for_s"] == 90.0


def test_listing_the_runs_of_an_unknown_source_is_an_error(sqlite_registry: Registry) -> None:
    with pytest.raises(NotFoundError, match="no source 'nope'"):
        reports.sync_runs(sqlite_registry, source="nope")
