from __future__ import annotations

import datetime as dt
from pathlib import Path

from freshindex.registry.records import SourceSetup
from freshindex.schedules.plan import due_sources


def test_sources_are_due_by_interval_and_not_while_running(sqlite_registry, tmp_path: Path) -> None:
    reg = sqlite_registry
    reg.add_source("polled", kind="folder", location=str(tmp_path), owner="t", kb="default",
                   setup=SourceSetup(poll_interval_s=600))
    reg.add_source("manual", kind="folder", location=str(tmp_path), owner="t", kb="default")
    now = dt.datetime.now(dt.UTC)
    assert due_sources(reg, now) == ["polled"]  # never synced
    run, _ = reg.start_sync_run("polled", "schedule")
    assert due_sources(reg, now) == []  # a run is in progress
    reg.set_run_planned(run, listed=0, planned=0)
    reg.finish_sync_run(run)
    assert due_sources(reg, dt.datetime.now(dt.UTC)) == []
    assert due_sources(reg, dt.datetime.now(dt.UTC) + dt.timedelta(seconds=601)) == ["polled"]
