"""The base class of every task shell: services, retry, counting and the run lease, in one place.

What Dramatiq keeps in its middleware, a shell gets from :class:`ShellTask`
(``base=ShellTask`` on the task decorator, :func:`workers.tasks.register`):

* ``services``: the worker process's services, built on first use by the
  factory the application edge passed (:class:`TaskRuntime`, one per app);
* ``retry_later``: the one way a shell retries, counted as ``retry`` and
  delayed 1, 2, 4 ... seconds up to ``broker.retry_backoff_max`` with full
  jitter (:func:`retry_countdown`);
* ``count``: ``freshindex_tasks_total{task, outcome}``, the task label being
  the task's name without its ``freshindex.`` prefix;
* the lease: while a task of a run works (``run_arg`` says which argument is
  the run id), a thread renews the run's heartbeat, so a worker killed
  mid-task is noticed after ``sync.run_lease_s`` instead of the broker's
  visibility timeout (schedules/reaper.py).  It starts on ``task_prerun`` and
  stops on ``task_postrun``: the one hook Celery runs after every outcome,
  a retry included (``after_return`` is skipped on a retry).
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from celery import Task
from celery.signals import task_postrun, task_prerun
from celery.utils.time import get_exponential_backoff_interval

from freshindex.core.errors import ConfigError
from freshindex.schedules.reaper import Heartbeat
from freshindex.settings import Settings
from freshindex.workers.names import TaskName
from freshindex.workers.ports import ServicesFactory, TaskServices


def retry_countdown(retries: int, maximum: float) -> float:
    """Seconds before retry number ``retries + 1``: 1, 2, 4 ... capped at
    ``maximum``, with full jitter so workers that failed together (a registry
    blip) do not come back together.  Celery's own ``retry_backoff`` formula."""
    return float(get_exponential_backoff_interval(factor=1, retries=retries, maximum=int(maximum), full_jitter=True))


class ThrottledLease:
    """``heartbeat_run`` at most once per ``every`` seconds per run from this process.

    Every task of a run beats on entry and exit (schedules/reaper.py), two
    UPDATEs of the run's one row per document; with many worker processes on
    one run they queue on that row lock (the lock waits left in
    bench/results/workers_load.md).  A beat skipped here leaves the run's
    heartbeat at most ``every`` seconds older than it would have been, far
    inside ``sync.run_lease_s``.
    """

    def __init__(self, registry: Any, every: float) -> None:
        self._registry, self._every = registry, every
        self._last: dict[int, float] = {}

    def heartbeat_run(self, run_id: int, worker: str | None = None) -> None:
        now = time.monotonic()
        if now - self._last.get(run_id, float("-inf")) < self._every:
            return
        self._last[run_id] = now
        self._registry.heartbeat_run(run_id, worker)


class TaskRuntime:
    """What the shells of one app share in a worker process: settings, services, the lease.

    Services are built on first use inside each worker process (after the
    fork), so no database connection or model crosses a fork; without a
    factory, using them raises :class:`ConfigError` (this package builds no
    services of its own).
    """

    def __init__(self, settings: Settings, services_factory: ServicesFactory | None) -> None:
        self.settings, self._factory = settings, services_factory
        self._services: TaskServices | None = None
        self._lease: ThrottledLease | None = None
        self.beats: dict[str, Heartbeat] = {}

    def services(self) -> TaskServices:
        if self._services is None:
            if self._factory is None:
                raise ConfigError("this Celery app was built without services; start workers with "
                                  "`freshindex worker` or `celery -A freshindex.celery worker`")
            self._services = self._factory()
        return self._services

    def lease(self) -> ThrottledLease:
        """The process's one lease throttle (half a heartbeat interval), built on the first run task."""
        if self._lease is None:
            self._lease = ThrottledLease(self.services().registry, self.settings.sync.heartbeat_interval_s / 2)
        return self._lease

    def close(self, **_: Any) -> None:
        """``worker_process_shutdown``: close what the process built."""
        if self._services is not None:
            services, self._services = self._services, None
            services.close()


class ShellTask(Task):
    """A task shell: one plain function under ``app.task(base=ShellTask, runtime=..., run_arg=...)``."""

    #: Set per app by :func:`workers.tasks.register` (a task option becomes a class attribute).
    runtime: TaskRuntime
    #: Position of the run id among the task's arguments (also accepted as ``run_id=``); None: no run, no lease.
    run_arg: int | None = None

    @property
    def services(self) -> TaskServices:
        return self.runtime.services()

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    def send(self, name: TaskName, *args: Any) -> None:
        """Enqueue task ``name`` of this app (routed to its queue by the app's routes)."""
        self.app.tasks[str(name)].delay(*args)

    def count(self, outcome: str) -> None:
        self.services.metrics.tasks.labels(self.name.removeprefix("freshindex."), outcome).inc()

    def can_retry(self) -> bool:
        return self.max_retries is None or self.request.retries < self.max_retries  # None: Celery's "forever"

    def retry_later(self, exc: Exception) -> NoReturn:
        """Count a retry and re-enqueue this task after the backoff; once retries are
        exhausted Celery raises ``exc`` instead (the task fails with it)."""
        self.count("retry")
        raise self.retry(exc=exc, countdown=retry_countdown(self.request.retries,
                                                            self.settings.broker.retry_backoff_max)) from exc

    def run_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        if self.run_arg is None:
            return None
        run_id = kwargs.get("run_id", args[self.run_arg] if len(args) > self.run_arg else None)
        return None if run_id is None else int(run_id)

    def start_lease(self, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        run_id = self.run_of(args, kwargs)
        if run_id is not None:
            beat = Heartbeat(self.runtime.lease(), run_id, self.settings.sync.heartbeat_interval_s)  # type: ignore[arg-type]
            self.runtime.beats[task_id] = beat.start()

    def stop_lease(self, task_id: str) -> None:
        beat = self.runtime.beats.pop(task_id, None)
        if beat is not None:
            beat.stop()


@task_prerun.connect(weak=False, dispatch_uid="freshindex.lease.start")
def _lease_start(task_id: str = "", task: Task | None = None, args: tuple[Any, ...] = (),
                 kwargs: dict[str, Any] | None = None, **_: Any) -> None:
    if isinstance(task, ShellTask):
        task.start_lease(task_id, tuple(args or ()), dict(kwargs or {}))


@task_postrun.connect(weak=False, dispatch_uid="freshindex.lease.stop")
def _lease_stop(task_id: str = "", task: Task | None = None, **_: Any) -> None:
    if isinstance(task, ShellTask):
        task.stop_lease(task_id)


__all__ = ["ShellTask", "TaskRuntime", "ThrottledLease", "retry_countdown"]
