"""The Celery beat schedule."""

from __future__ import annotations

from typing import Any

from settings import Settings
from workers.app import Queue, TaskName, queue_name


def beat_schedule(settings: Settings) -> dict[str, Any]:
    """Entries for ``app.conf.beat_schedule`` (installed by ``freshindex beat``)."""
    return {
        "poll-due-sources": {
            "task": str(TaskName.POLL_SOURCES),
            "schedule": 60.0,
            "options": {"queue": queue_name(settings, Queue.SYNC), "expires": 55},
        },
    }
