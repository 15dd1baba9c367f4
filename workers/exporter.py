"""Worker metrics over HTTP: every pool process's counters, task latency and queue depth.

A Celery worker runs its tasks in child processes, each with its own
:class:`~freshindex.health.metrics.Metrics`; a scrape of one process would see
one child's share.  prometheus-client's multiprocess mode keeps each
process's values in memory-mapped files under one directory, and the worker's
main process serves their sum (:class:`MultiProcessCollector`) on
``broker.worker_metrics_port``.  Added to that: task wall time by task name
(``freshindex_task_seconds``, observed in the child that ran it) and, read at
scrape time from the broker, the depth of each freshindex queue
(``freshindex_queue_depth{queue}``).

Multiprocess mode is chosen when prometheus-client is first imported, so
:func:`prepare` must run before anything imports it (the ``worker`` command
calls it first).  What it does not do: aggregate across hosts (Prometheus
does, by scraping every worker), or keep the values of a child after the
worker restarts (the directory is emptied at start).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger("freshindex.exporter")

ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare(directory: Path) -> Path:
    """Empty ``directory`` and point prometheus-client's multiprocess mode at it (before its first import)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(directory)
    return directory


def queue_depths(app: Any, queues: Iterable[str]) -> dict[str, int]:
    """Messages waiting in each queue (a passive declare: works for Redis and AMQP alike)."""
    out: dict[str, int] = {}
    with app.connection_for_read() as conn:
        for name in queues:
            # A channel per queue: on AMQP a failed passive declare closes its channel.
            channel = conn.channel()
            try:
                out[name] = int(channel.queue_declare(queue=name, passive=True).message_count)
            except Exception as exc:
                # NOT_FOUND: never declared (AMQP) or empty (Redis deletes an empty list): nothing waits.
                code = getattr(exc, "code", None) or getattr(exc, "reply_code", None) or (exc.args or [None])[0]
                if str(code) == "404":
                    out[name] = 0
                else:  # one failure must not hide the other queues
                    log.warning("queue depth of %s unavailable: %s", name, exc)
            finally:
                try:
                    channel.close()
                except Exception:
                    log.debug("closing the channel failed", exc_info=True)
    return out


def install(app: Any, *, port: int, queues: list[str], host: str = "0.0.0.0") -> None:
    """Wire the task-latency histogram and start the exporter in the worker's main process.

    Call after :func:`prepare` and before ``app.worker_main``.
    """
    from celery.signals import task_postrun, task_prerun, worker_process_shutdown, worker_ready
    from prometheus_client import CollectorRegistry, Histogram, multiprocess, start_http_server
    from prometheus_client.core import GaugeMetricFamily

    task_seconds = Histogram("freshindex_task_seconds", "Task wall time in the worker, by task", ["task"],
                             buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
    started: dict[str, float] = {}

    @task_prerun.connect(weak=False)
    def _start(task_id: str | None = None, **_: Any) -> None:
        if task_id:
            started[task_id] = time.monotonic()

    @task_postrun.connect(weak=False)
    def _stop(task_id: str | None = None, task: Any = None, **_: Any) -> None:
        t0 = started.pop(task_id or "", None)
        if t0 is not None and task is not None:
            task_seconds.labels(task.name).observe(time.monotonic() - t0)

    @worker_process_shutdown.connect(weak=False)
    def _dead(pid: int | None = None, **_: Any) -> None:
        multiprocess.mark_process_dead(pid or os.getpid())

    class QueueDepth:
        def collect(self) -> Iterable[Any]:
            family = GaugeMetricFamily("freshindex_queue_depth", "Messages waiting in a freshindex queue",
                                       labels=["queue"])
            try:
                for name, depth in sorted(queue_depths(app, queues).items()):
                    family.add_metric([name], depth)
            except Exception:  # broker down: export no depth rather than fail the scrape
                log.warning("queue depth unavailable", exc_info=True)
            yield family

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(QueueDepth())
    started_server: list[Callable[[], None]] = []

    @worker_ready.connect(weak=False)
    def _serve(**_: Any) -> None:
        if started_server:
            return
        start_http_server(port, addr=host, registry=registry)
        started_server.append(lambda: None)
        log.warning("worker metrics served", extra={"event": "worker_metrics", "port": port})
