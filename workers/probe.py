"""Liveness files for the Celery worker and beat: a cheap probe that means something.

A Celery worker has no HTTP port, and `celery inspect ping` costs a broker
round trip plus a whole Celery client per probe. Instead each process
touches a file while it is doing its job, and ``freshindex probe`` (run by a
Kubernetes exec probe) checks the file's age:

* worker: a consumer bootstep touches ``<data_dir>/worker.heartbeat`` every
  ``interval`` seconds from the consumer's own timer. The step starts only
  once the consumer is connected to the broker and is stopped when that
  connection is lost, and the timer runs on the event loop that also
  receives tasks, so the file goes stale when the worker is wedged or cut
  off from the broker, not only when the process died.
* beat: the scheduler touches ``<data_dir>/beat.heartbeat`` on every tick
  (at most ``beat_max_loop_interval`` apart; with freshindex's one-minute
  poll schedule, at most a minute).

What it does not prove: that a pool child can finish a task (a child stuck
in a long parse is bounded by the task time limits, not by this probe), or
that the registry and vector store are reachable (workers check those at
boot, see ``freshindex worker``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from celery import Celery, bootsteps
from celery.beat import PersistentScheduler

from freshindex.settings import Settings

log = logging.getLogger("freshindex.probe")

WORKER_FILE = "worker.heartbeat"
BEAT_FILE = "beat.heartbeat"
#: Seconds between touches of the worker's heartbeat file.
DEFAULT_INTERVAL_S = 10.0


def heartbeat_path(settings: Settings, role: str) -> Path:
    """Where the process of ``role`` (``worker`` or ``beat``) keeps its heartbeat file."""
    return Path(settings.data_dir) / (BEAT_FILE if role == "beat" else WORKER_FILE)


def touch(path: Path) -> None:
    """Set the file's mtime to now (creating it and its folder); never raises.

    A failing touch (read-only or full disk) is logged and lets the file go
    stale, which is what the probe should then report.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.utime(path, None)
    except OSError as exc:
        log.warning("cannot touch heartbeat file %s: %s", path, exc,
                    extra={"event": "heartbeat_touch_failed", "path": str(path), "detail": str(exc)})


def age_s(path: Path, *, now: float | None = None) -> float | None:
    """Seconds since the file was last touched, or None when it does not exist."""
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    return (time.time() if now is None else now) - mtime


class HeartbeatStep(bootsteps.StartStopStep):
    """Consumer bootstep: touch the worker heartbeat file while the consumer runs."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        conf = parent.app.conf
        self.path = Path(conf.freshindex_heartbeat_file)
        self.interval = float(conf.freshindex_heartbeat_interval)
        self._tref: Any = None

    def start(self, parent: Any) -> None:
        touch(self.path)
        self._tref = parent.timer.call_repeatedly(self.interval, touch, (self.path,), priority=10)

    def stop(self, parent: Any) -> None:
        if self._tref is not None:
            self._tref.cancel()
            self._tref = None

    shutdown = stop


class HeartbeatScheduler(PersistentScheduler):
    """Celery beat's persistent scheduler that touches the beat heartbeat file on every tick."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        touch(Path(self.app.conf.freshindex_beat_heartbeat_file))
        return super().tick(*args, **kwargs)


def install_heartbeat(app: Celery, settings: Settings, *, interval: float = DEFAULT_INTERVAL_S) -> None:
    """Wire both heartbeats into ``app`` (the worker step and beat's scheduler class)."""
    app.conf.freshindex_heartbeat_file = str(heartbeat_path(settings, "worker"))
    app.conf.freshindex_beat_heartbeat_file = str(heartbeat_path(settings, "beat"))
    app.conf.freshindex_heartbeat_interval = interval
    app.conf.beat_scheduler = "freshindex.workers.probe:HeartbeatScheduler"
    app.steps["consumer"].add(HeartbeatStep)


__all__ = ["BEAT_FILE", "WORKER_FILE", "HeartbeatScheduler", "HeartbeatStep", "age_s", "heartbeat_path",
           "install_heartbeat", "touch"]
