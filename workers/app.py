"""The Celery application: one app, named queues, tasks as thin shells.

Queues (prefixed with ``broker.queue_prefix``):

* ``sync``: list a source, plan the run, finish it (cheap, registry-bound);
* ``parse``: fetch, parse (OCR included), chunk and embed one document;
  with ``broker.stage_queues`` fetch, parse and chunk only, handing scanned
  PDFs to ``ocr`` and new chunks to ``embed`` (:mod:`workers.handoff`);
* ``ocr``, ``embed``: those stages, each on workers of its own;
* ``build``: build, verify and swap a snapshot (one writer per kb by lock).

Without a broker URL there is no Celery at all: :mod:`workers.runner` calls
the same pipeline functions in-process (see docs/architecture.md for why).  Names and
queues live in :mod:`workers.names`; this module imports the task shells
(to register them), the shells never import this module.
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue as KombuQueue

from freshindex.core.errors import ConfigError
from freshindex.schedules.beat import Job, beat_schedule
from freshindex.settings import Settings
from freshindex.workers.names import ROUTES, Queue, TaskName, queue_name
from freshindex.workers.ports import ServicesFactory

#: The task beat sends for each periodic job (schedules/beat.py owns the cadence).
BEAT_TASKS = {Job.POLL_SOURCES: TaskName.POLL_SOURCES, Job.REAP_RUNS: TaskName.REAP_RUNS,
              Job.SWEEP_FRESHNESS: TaskName.SWEEP_FRESHNESS, Job.COLLECT_TOMBSTONES: TaskName.COLLECT_TOMBSTONES,
              Job.RETAIN_SNAPSHOTS: TaskName.RETAIN_SNAPSHOTS, Job.RECONCILE_INDEX: TaskName.RECONCILE_INDEX,
              Job.EVALUATE_GOLDEN_SETS: TaskName.EVALUATE_GOLDEN_SETS}


def visibility_timeout(settings: Settings) -> int:
    """Seconds a Redis/SQS broker waits before redelivering a task a worker took and never acknowledged.

    With ``task_acks_late`` a task's message stays unacknowledged while it
    runs, so a worker killed mid-task leaves it invisible for this long.  It
    must exceed the longest task (the hard time limit) and the longest retry
    countdown, or a healthy slow task is delivered twice (harmless, tasks are
    idempotent, but wasted work).  RabbitMQ ignores it: it redelivers as soon
    as the dead consumer's connection closes.
    """
    return settings.broker.visibility_timeout or task_time_limit(settings) + 60


def task_time_limit(settings: Settings) -> int:
    """The hard limit: the soft limit plus a minute for the task to clean up."""
    return settings.broker.task_soft_time_limit + 60


def create_app(settings: Settings, services_factory: ServicesFactory | None = None) -> Celery:
    """A Celery app for ``settings`` with every freshindex task registered and beat's schedule installed.

    ``services_factory`` builds the services the tasks run with, once per
    worker process on first use; the application edge passes it
    (``freshindex/celery.py``: ``celery -A freshindex.celery``, ``freshindex
    worker``).  Without one the app can enqueue, inspect and beat, but a
    task that runs in it raises :class:`ConfigError`.
    """
    if settings.broker.url is None:
        raise ConfigError("no broker configured (FRESHINDEX_BROKER__URL); embedded mode runs tasks in-process")
    broker = settings.broker.url.get_secret_value()
    backend = settings.broker.result_backend.get_secret_value() if settings.broker.result_backend else None
    if backend is None:
        backend = broker if broker.startswith(("redis://", "rediss://")) else "rpc://"
    app = Celery("freshindex", broker=broker, backend=backend, set_as_current=False)
    names = {q: queue_name(settings, q) for q in Queue}
    app.conf.update(
        task_queues=[KombuQueue(n) for n in names.values()],
        task_default_queue=names[Queue.SYNC],
        task_routes={str(t): {"queue": names[q]} for t, q in ROUTES.items()},
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        result_expires=3600,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=settings.broker.prefetch_multiplier,
        task_soft_time_limit=settings.broker.task_soft_time_limit,
        task_time_limit=task_time_limit(settings),
        broker_connection_retry_on_startup=True,
        # Redis and SQS honour these; RabbitMQ has no visibility timeout.
        broker_transport_options={"visibility_timeout": visibility_timeout(settings)},
        # Task events let `celery events` / Flower (and tests) see what each worker is doing.
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        enable_utc=True,
    )
    # Installed here, not by whoever starts beat: `celery -A freshindex.celery beat` needs no extra step.
    app.conf.beat_schedule = beat_schedule(settings, task_for=lambda job: str(BEAT_TASKS[job]),
                                           queue=names[Queue.SYNC])
    # Where plain `celery -A freshindex.celery beat` keeps its state (not the working directory).
    app.conf.beat_schedule_filename = str(settings.data_dir / "celerybeat-schedule")
    from freshindex.workers.probe import install_heartbeat
    from freshindex.workers.tasks import register

    app.freshindex_settings = settings  # type: ignore[attr-defined]
    register(app, services_factory)
    install_heartbeat(app, settings)  # liveness files for the k8s probes (workers/probe.py)
    return app
