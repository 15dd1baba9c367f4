"""Every time the registry hands back from SQLite is aware (UTC), so no caller adds a zone.

SQLite stores times without their zone; the column type (``schema.UTCDateTime``)
puts UTC back on every read, including aggregates over a time column.
"""

from __future__ import annotations

import datetime as dt

from freshindex.registry import Registry, reports
from tests.registry.test_run_listing import finished_run


def test_records_and_aggregates_read_from_sqlite_are_aware(sqlite_registry: Registry) -> None:
    # Given a source with one finished run, in a SQLite registry
    reg = sqlite_registry
    finished_run(reg)

    # When the run, the last successful sync and the source's freshness are read back
    record = reg.sync_runs("docs", limit=1)[0]
    last_ok = reg.last_successful_sync("docs")
    freshness = next(f for f in reg.source_freshness() if f.source_id == "docs")
    listed = reports.sync_runs(reg, source="docs")[0]

    # Then each carries the UTC zone: a record's columns, a max() over a column and its ISO form
    assert record.started_at.tzinfo is not None and record.finished_at is not None
    assert record.finished_at.utcoffset() == dt.timedelta(0)
    assert last_ok is not None and last_ok.tzinfo is not None
    assert freshness.last_successful_sync_at is not None and freshness.last_successful_sync_at.tzinfo is not None
    assert listed["finished_at"].endswith("+00:00")
