"""Worker metrics over HTTP: every pool process's counters, task latency and outcomes, queues, heartbeat.

A Celery worker runs its tasks in child processes, each with its own
:class:`~freshindex.health.metrics.Metrics`; a scrape of one process would see
one child's share.  prometheus-client's multiprocess mode keeps each
process's values in memory-mapped files under one directory, and the worker's
main process serves their sum (:class:`MultiProcessCollector`) on
``broker.worker_metrics_bind``:``broker.worker_metrics_port``.  Added to that:

* ``freshindex_task_seconds{task}``: task wall time, observed in the child that ran it;
* ``freshindex_task_runs_total{task,state}``: finished task executions by Celery state
  (``SUCCESS``, ``FAILURE``, ``RETRY``, ...), so a task that raised counts as a failure;
* read from the broker at scrape time: ``freshindex_queue_depth{queue}`` (messages
  waiting) and, on Redis, ``freshindex_queue_head_age_seconds{queue}`` (how long the
  next message to be delivered has been the next one, see :class:`HeadAges`);
* ``freshindex_worker_heartbeat_age_seconds``: seconds since the worker's consumer
  last touched its heartbeat file (``workers/probe.py``); it grows while the exporter
  still answers when the worker is wedged or cut off from the broker;
* ``freshindex_disk_free_bytes{dir}`` and ``freshindex_disk_size_bytes{dir}``: the file
  systems of the worker's data and vector folders, read at scrape time (the
  ``FreshindexDiskLow`` alert watches workers' volumes as well as ``serve``'s).

No series carries a ``pid`` label: gauges that live in the pool children
declare a ``multiprocess_mode`` that aggregates (``max``), and the
scrape-time gauges are computed once in the main process.

Multiprocess mode is chosen when prometheus-client is first imported, so
:func:`prepare` must run before anything imports it (the ``worker`` command
calls it first).  What it does not do: aggregate across hosts (Prometheus
does, by scraping every worker), or keep the values of a child after the
worker restarts (the directory is emptied at start).
"""

from __future__ import annotations

import json
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


def queue_heads(app: Any, queues: Iterable[str]) -> dict[str, str | None] | None:
    """The identity of the next message each queue delivers (None: empty); None on a broker without a peek.

    Redis only: kombu pushes on the left and pops on the right, so the
    oldest waiting message is the list's last element; its identity is kombu's
    ``delivery_tag``, unique per message.  AMQP has no way to look at a queue
    without taking from it, so there this returns None.
    """
    with app.connection_for_read() as conn:
        if conn.transport.driver_type != "redis":
            return None
        client = conn.default_channel.client
        out: dict[str, str | None] = {}
        for name in queues:
            raw = client.lindex(name, -1)
            if raw is None:
                out[name] = None
                continue
            try:
                out[name] = str(json.loads(raw)["properties"]["delivery_tag"])
            except (ValueError, KeyError, TypeError):  # not a kombu message: its bytes are its identity
                out[name] = raw.hex()[:64] if isinstance(raw, bytes) else str(raw)[:64]
        return out


class HeadAges:
    """Seconds each queue's head message has been its head, as seen by the scrapes of this exporter.

    A queue whose head has not changed between two scrapes is not being
    consumed (with late acks and prefetch 1 a worker takes the next message
    only when it has a free slot), so this is the "how long has the queue
    been stuck" signal.  What it does not give: the age of the message since
    it was published (kombu messages carry no publish time), and it starts at
    0 for a head first seen by this exporter (after a restart, on the first
    scrape), so it is a lower bound with the scrape interval as resolution.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[str, float]] = {}

    def observe(self, queue: str, head: str | None) -> float:
        now = self._clock()
        if head is None:
            self._seen.pop(queue, None)
            return 0.0
        seen = self._seen.get(queue)
        if seen is None or seen[0] != head:
            self._seen[queue] = (head, now)
            return 0.0
        return now - seen[1]


def heartbeat_age(path: Path | None, now: Callable[[], float] = time.time) -> float | None:
    """Seconds since ``path`` was last touched (None: no heartbeat file yet)."""
    if path is None:
        return None
    try:
        return max(0.0, now() - path.stat().st_mtime)
    except OSError:
        return None


def install(app: Any, *, port: int, queues: list[str], host: str = "127.0.0.1",
            heartbeat: Path | None = None, disk: dict[str, Path] | None = None) -> None:
    """Wire the task metrics and start the exporter in the worker's main process on ``host:port``.

    Call after :func:`prepare` and before ``app.worker_main``.  ``heartbeat``:
    the worker's heartbeat file (``workers.probe.heartbeat_path``), exported as its age;
    ``disk``: folders by name (``data``, ``vectors``) whose file systems' free space is exported.
    """
    from celery.signals import task_postrun, task_prerun, worker_process_shutdown, worker_ready
    from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess, start_http_server
    from prometheus_client.core import GaugeMetricFamily

    from freshindex.health.metrics import DiskCollector

    task_seconds = Histogram("freshindex_task_seconds", "Task wall time in the worker, by task", ["task"],
                             buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
    task_runs = Counter("freshindex_task_runs_total", "Finished task executions by Celery state (SUCCESS, "
                        "FAILURE: the task raised, RETRY, ...)", ["task", "state"])
    started: dict[str, float] = {}

    @task_prerun.connect(weak=False)
    def _start(task_id: str | None = None, **_: Any) -> None:
        if task_id:
            started[task_id] = time.monotonic()

    @task_postrun.connect(weak=False)
    def _stop(task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any) -> None:
        t0 = started.pop(task_id or "", None)
        if task is None:
            return
        if t0 is not None:
            task_seconds.labels(task.name).observe(time.monotonic() - t0)
        task_runs.labels(task.name, state or "UNKNOWN").inc()

    @worker_process_shutdown.connect(weak=False)
    def _dead(pid: int | None = None, **_: Any) -> None:
        multiprocess.mark_process_dead(pid or os.getpid())

    heads = HeadAges()

    class BrokerAndHeartbeat:
        """Scrape-time gauges of the main process: queue depth and head age, heartbeat age."""

        def collect(self) -> Iterable[Any]:
            depth = GaugeMetricFamily("freshindex_queue_depth", "Messages waiting in a freshindex queue",
                                      labels=["queue"])
            try:
                for name, n in sorted(queue_depths(app, queues).items()):
                    depth.add_metric([name], n)
            except Exception:  # broker down: export no depth rather than fail the scrape
                log.warning("queue depth unavailable", exc_info=True)
            yield depth
            age = GaugeMetricFamily("freshindex_queue_head_age_seconds",
                                    "Seconds the next message of a queue has been its next message (0: empty); "
                                    "Redis brokers only", labels=["queue"])
            try:
                found = queue_heads(app, queues)
                for name, head in sorted((found or {}).items()):
                    age.add_metric([name], heads.observe(name, head))
            except Exception:
                log.warning("queue head age unavailable", exc_info=True)
            yield age
            beat = heartbeat_age(heartbeat)
            if beat is not None:
                yield GaugeMetricFamily("freshindex_worker_heartbeat_age_seconds",
                                        "Seconds since the worker's consumer touched its heartbeat file",
                                        value=beat)

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(BrokerAndHeartbeat())
    volumes = DiskCollector()
    volumes.paths.update(disk or {})
    registry.register(volumes)
    started_server: list[Callable[[], None]] = []

    @worker_ready.connect(weak=False)
    def _serve(**_: Any) -> None:
        if started_server:
            return
        start_http_server(port, addr=host, registry=registry)
        started_server.append(lambda: None)
        log.warning("worker metrics served", extra={"event": "worker_metrics", "host": host, "port": port})
