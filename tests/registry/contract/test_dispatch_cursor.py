"""Contract of the fair-dispatch cursor and the "workers are alive" signal the reaper reads.

On both backends: the cursor moves only from where it is (so of two copies
of one continuation only the first sends its batch, even when they race),
never on a closed run, and renews the run's lease; a run renewed by a
worker counts as worked on, one renewed only by the reaper does not.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

from freshindex.registry import Registry
from tests.registry.contract.helpers import add_source


def _planned_run(reg: Registry, fresh) -> int:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, _cs = reg.start_sync_run(source.id, "test")
    reg.set_run_planned(run, listed=6, planned=6, documents=[(f"d{i}.md", None, 1) for i in range(6)])
    return run


def test_the_dispatch_cursor_moves_only_from_where_it_is(reg: Registry, fresh) -> None:
    run = _planned_run(reg, fresh)
    assert reg.advance_dispatch(run, 0, 2)  # the first batch
    assert not reg.advance_dispatch(run, 0, 2)  # sync_source redelivered
    assert reg.advance_dispatch(run, 2, 4)
    assert not reg.advance_dispatch(run, 2, 4)  # a second copy of the continuation
    assert reg.get_sync_run(run).summary["dispatched"] == 4
    assert reg.get_sync_run(run).summary["planned_keys"][0][0] == "d0.md"  # the plan is kept


def test_racing_copies_of_a_continuation_advance_the_cursor_once(reg: Registry, fresh) -> None:
    run = _planned_run(reg, fresh)
    assert reg.advance_dispatch(run, 0, 2)
    with ThreadPoolExecutor(4) as pool:
        won = list(pool.map(lambda _: reg.advance_dispatch(run, 2, 4), range(8)))
    assert won.count(True) == 1
    assert reg.get_sync_run(run).summary["dispatched"] == 4


def test_a_closed_run_takes_no_more_batches(reg: Registry, fresh) -> None:
    run = _planned_run(reg, fresh)
    assert reg.advance_dispatch(run, 0, 2)
    reg.finish_sync_run(run, error="closed by the test")
    assert not reg.advance_dispatch(run, 2, 4)


def test_advancing_renews_the_lease_and_counts_as_worked_on(reg: Registry, fresh) -> None:
    run = _planned_run(reg, fresh)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=120)
    assert run in {r.id for r in reg.stalled_runs(60, now=later)}
    assert reg.advance_dispatch(run, 0, 2)
    assert run not in {r.id for r in reg.stalled_runs(3600)}
    assert run in reg.worked_runs(3600)
    assert run not in reg.worked_runs(60, now=later)
    # A lease renewed by the reaper is no evidence that a worker is alive
    reg.record_reap(run, "redispatched", missing=6)
    assert run not in reg.worked_runs(3600)
