"""A run's planned revision, read by run id from any process, on SQLite and PostgreSQL.

Given a source whose open run recorded its listing's commit as the pending
cursor, when a document task asks for that run's planned cursor, then it
gets the commit; another run (an older task redelivered after a newer run
opened) gets nothing, and once the run finished the pending value is gone
(promoted to the synced cursor), so no later run can read it.
"""

from __future__ import annotations

from freshindex.registry import Registry


def test_the_planned_cursor_belongs_to_its_run_only(registry: Registry) -> None:
    # Given a git source with an open run that listed commit c1
    registry.add_source("repo", kind="git", location="/srv/repo", owner="t", kb="default")
    run, _ = registry.start_sync_run("repo", "test")
    registry.set_pending_cursor("repo", {"commit": "c1", "ref": "main"})

    # Then that run reads c1, another run id reads nothing
    assert registry.planned_cursor("repo", run) == {"commit": "c1", "ref": "main"}
    assert registry.planned_cursor("repo", run + 1) is None
    assert registry.planned_cursor("nosuch", run) is None

    # When the run finishes and the cursor is promoted
    registry.set_run_planned(run, listed=0, planned=0)
    registry.finish_sync_run(run)
    assert registry.source_cursor("repo") == {"commit": "c1", "ref": "main"}

    # Then its planned value is no longer offered to anyone
    assert registry.planned_cursor("repo", run) is None
