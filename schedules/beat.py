"""The Celery beat schedule."""

from __future__ import annotations

from typing import Any

from freshindex.settings import Settings
from freshindex.workers.app import Queue, TaskName, queue_name


def beat_schedule(settings: Settings) -> dict[str, Any]:
    """Entries for ``app.conf.beat_schedule`` (installed by ``freshindex beat``)."""
    return {
        "poll-due-sources": {
            "task": str(TaskName.POLL_SOURCES),
            "schedule": 60.0,
            "options": {"queue": queue_name(settings, Queue.SYNC), "expires": 55},
        },
        # Twice per lease, so a dead worker's run is picked up within about 1.5 leases.
        "reap-stalled-runs": {
            "task": str(TaskName.REAP_RUNS),
            "schedule": reap_interval(settings),
            "options": {"queue": queue_name(settings, Queue.SYNC), "expires": reap_interval(settings)},
        },
    }


def reap_interval(settings: Settings) -> float:
    return max(5.0, min(60.0, settings.sync.run_lease_s / 2))
