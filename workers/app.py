"""The Celery application: one app, named queues, tasks as thin shells.

Queues (prefixed with ``broker.queue_prefix``):

* ``sync``: list a source, plan the run, finish it (cheap, registry-bound);
* ``parse``: fetch, parse (OCR included), chunk and embed one document;
* ``build``: build, verify and swap a snapshot (one writer per kb by lock).

Without a broker URL there is no Celery at all: :mod:`workers.runner` calls
the same pipeline functions in-process (see the README for why).
"""

from __future__ import annotations

from enum import StrEnum

from celery import Celery
from kombu import Queue as KombuQueue

from core.errors import ConfigError
from settings import Settings


class Queue(StrEnum):
    SYNC = "sync"
    PARSE = "parse"
    BUILD = "build"


class TaskName(StrEnum):
    SYNC_SOURCE = "freshindex.sync_source"
    PROCESS_DOCUMENT = "freshindex.process_document"
    FINISH_SYNC = "freshindex.finish_sync"
    BUILD_SNAPSHOT = "freshindex.build_snapshot"
    POLL_SOURCES = "freshindex.poll_sources"


ROUTES = {
    TaskName.SYNC_SOURCE: Queue.SYNC,
    TaskName.FINISH_SYNC: Queue.SYNC,
    TaskName.POLL_SOURCES: Queue.SYNC,
    TaskName.PROCESS_DOCUMENT: Queue.PARSE,
    TaskName.BUILD_SNAPSHOT: Queue.BUILD,
}


def queue_name(settings: Settings, queue: Queue) -> str:
    return f"{settings.broker.queue_prefix}.{queue.value}"


def create_app(settings: Settings) -> Celery:
    """A Celery app for ``settings`` with every freshindex task registered."""
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
        task_time_limit=settings.broker.task_soft_time_limit + 60,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        enable_utc=True,
    )
    from workers.tasks import register

    app.freshindex_settings = settings  # type: ignore[attr-defined]
    register(app)
    return app
