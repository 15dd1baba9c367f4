"""The beat cadence: which periodic jobs run, how often, and how long a tick stays useful.

Schedules decide *when*; the workers decide *what runs where*.  So this
module names jobs by :class:`Job` and takes the task name and queue of each
from its caller (:func:`workers.app.create_app` maps them from
``workers/names.py``): schedules import nothing of the workers, and the
inline runner, which has no Celery at all, can use the reaper and the due
list without pulling the Celery app in.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from freshindex.settings import Settings


class Job(StrEnum):
    POLL_SOURCES = "poll-due-sources"
    REAP_RUNS = "reap-stalled-runs"
    SWEEP_FRESHNESS = "sweep-freshness"
    COLLECT_TOMBSTONES = "collect-tombstones"
    RETAIN_SNAPSHOTS = "retain-snapshots"
    RECONCILE_INDEX = "reconcile-index"
    EVALUATE_GOLDEN_SETS = "evaluate-golden-sets"


def beat_schedule(settings: Settings, *, task_for: Callable[[Job], str], queue: str) -> dict[str, Any]:
    """Entries for ``app.conf.beat_schedule``, keyed by :class:`Job`.

    ``task_for`` maps a job to the task name beat sends; ``queue`` is where it
    goes.  Each entry expires before its next tick, so a backlog of missed
    ticks (beat ran while no worker did) collapses into one.
    """
    cadence = settings.schedules
    periodic = {Job.SWEEP_FRESHNESS: cadence.sweep_interval_s, Job.COLLECT_TOMBSTONES: cadence.gc_interval_s,
                Job.RETAIN_SNAPSHOTS: cadence.retention_interval_s, Job.RECONCILE_INDEX: cadence.reconcile_interval_s,
                Job.EVALUATE_GOLDEN_SETS: cadence.eval_interval_s}
    return {
        str(Job.POLL_SOURCES): {
            "task": task_for(Job.POLL_SOURCES),
            "schedule": cadence.poll_tick_s,
            "options": {"queue": queue, "expires": max(1.0, cadence.poll_tick_s * 0.9)},
        },
        **{str(job): {"task": task_for(job), "schedule": every,
                      "options": {"queue": queue, "expires": max(1.0, every * 0.9)}}
           for job, every in periodic.items()},
        # Three times per lease, so a dead worker's run is picked up within about 1.33 leases.
        str(Job.REAP_RUNS): {
            "task": task_for(Job.REAP_RUNS),
            "schedule": reap_interval(settings),
            "options": {"queue": queue, "expires": reap_interval(settings)},
        },
    }


def reap_interval(settings: Settings) -> float:
    return max(5.0, min(60.0, settings.sync.run_lease_s / 3))
