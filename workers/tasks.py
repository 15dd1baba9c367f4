"""Celery task shells around the pipeline functions.

A shell does four things and no more: find the process's services (built by
the factory the application edge passed to :func:`register`, see
:mod:`workers.ports`),
call one plain function with ids, translate the error tree into Celery's
retry-or-record, and chain to the next step.  Arguments are ids, keys and
etags (JSON); the payload lives in the registry.  New arguments must default
to ``None`` so a rolling deploy can mix old and new workers.

Fair dispatch: a sync enqueues at most ``broker.dispatch_batch`` document
tasks, then a ``dispatch_documents`` continuation on the same (FIFO) parse
queue, behind them; when a worker takes it, that batch has left the queue,
and it enqueues the next batch and continuation from the plan the registry
holds (``planned_keys``).  So the documents of a small source synced during a
huge one wait behind at most one batch per busy source, not behind the whole
huge source, with no queue per source to manage.

Completion without a chord: each ``process_document`` checks, after
recording its outcome, whether every planned document of its run has an
outcome; :meth:`registry.Registry.finish_sync_run` lets exactly one caller
finish the run, and that caller enqueues the build.  A document whose task
exhausts its retries records a failure, so a run always completes.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

from celery import Celery, Task
from celery.signals import task_postrun, task_prerun, worker_process_shutdown
from celery.utils.time import get_exponential_backoff_interval

from freshindex.core.enums import RunStatus
from freshindex.core.errors import ConfigError, LockHeldError, PermanentError, RetryableError, StaleTaskError
from freshindex.core.ids import document_id
from freshindex.schedules.gc import collect_tombstones as collect_tombstones_
from freshindex.schedules.gc import retain_snapshots as retain_snapshots_
from freshindex.schedules.plan import due_sources
from freshindex.schedules.reaper import Heartbeat, reap
from freshindex.schedules.reconcile import reconcile
from freshindex.schedules.sweep import sweep
from freshindex.workers import pipeline
from freshindex.workers.names import TaskName, enqueue_actions
from freshindex.workers.ports import ServicesFactory, TaskServices

log = logging.getLogger("freshindex.tasks")



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


def register(app: Celery, services_factory: ServicesFactory | None = None) -> None:
    """Register every task shell on ``app``; each worker process calls ``services_factory`` once.

    Without a factory the shells are registered (so the app can route and
    inspect them) but running one raises :class:`ConfigError`: this module
    builds no services of its own.
    """
    # Tasks are registered with shared=False: Celery's default adds every
    # shared task to each app created later in the process, so a second app
    # (a test, a CLI that only sends) would run the first app's shells and services.
    state: dict[str, TaskServices] = {}
    settings = app.freshindex_settings  # type: ignore[attr-defined]
    broker = settings.broker
    max_retries = broker.task_max_retries

    def backoff(retries: int) -> float:
        return retry_countdown(retries, broker.retry_backoff_max)

    def services() -> TaskServices:
        # Built on first use inside each worker process (after the fork), so
        # no database connection or model crosses a fork.
        if "svc" not in state:
            if services_factory is None:
                raise ConfigError("this Celery app was built without services; start workers with "
                                  "`freshindex worker` or `celery -A freshindex.celery worker`")
            state["svc"] = services_factory()
        return state["svc"]

    @worker_process_shutdown.connect(weak=False)
    def _close(**_: Any) -> None:
        if "svc" in state:
            state.pop("svc").close()

    # Leases (see schedules/reaper.py): while a task works on a run, a thread
    # renews the run's heartbeat, so a worker killed mid-task is noticed
    # after ``sync.run_lease_s`` instead of the broker's visibility timeout.
    beats: dict[str, Heartbeat] = {}
    leases: dict[str, ThrottledLease] = {}

    def _run_of(task: Task, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        if task.name in (TaskName.PROCESS_DOCUMENT, TaskName.FINISH_SYNC, TaskName.DISPATCH_DOCUMENTS):
            return kwargs.get("run_id", args[0] if args else None)
        if task.name == TaskName.BUILD_SNAPSHOT:
            return kwargs.get("run_id", args[1] if len(args) > 1 else None)
        return None

    @task_prerun.connect(weak=False)
    def _beat_start(task_id: str = "", task: Task | None = None, args: tuple[Any, ...] = (),
                    kwargs: dict[str, Any] | None = None, **_: Any) -> None:
        if task is None or task.app is not app:
            return
        run_id = _run_of(task, tuple(args or ()), dict(kwargs or {}))
        if run_id is not None:
            interval = settings.sync.heartbeat_interval_s
            if "lease" not in leases:
                leases["lease"] = ThrottledLease(services().registry, interval / 2)
            beats[task_id] = Heartbeat(leases["lease"], int(run_id), interval).start()  # type: ignore[arg-type]

    @task_postrun.connect(weak=False)
    def _beat_stop(task_id: str = "", **_: Any) -> None:
        beat = beats.pop(task_id, None)
        if beat is not None:
            beat.stop()

    def count(task: str, outcome: str) -> None:
        services().metrics.tasks.labels(task, outcome).inc()

    def dispatch(run_id: int, changeset_id: int, source_id: str, documents: list[tuple[str, str | None, int]],
                 start: int, worked: bool = True) -> int:
        """Enqueue ``documents[start:]`` up to one batch, and the continuation behind it if more remain;
        returns how many document tasks were sent.  ``worked``: sent by a parse-queue worker (a
        continuation), evidence for the reaper that the parse workers are alive; the planner's is not."""
        size = broker.dispatch_batch or len(documents)
        batch = documents[start:start + size]
        # Batched: advance the run's dispatch cursor first (it renews the lease, so the
        # continuation has a full lease to reach the head of the queue, and of two
        # copies of one continuation only the first sends); the reaper resumes from it.
        if (start > 0 or start + size < len(documents)) and \
                not services().registry.advance_dispatch(run_id, start, min(start + size, len(documents)),
                                                         worked=worked):
            return 0
        for key, etag, doc_size in batch:
            process_document.delay(run_id, changeset_id, source_id, key, etag, doc_size)
        if start + size < len(documents):
            dispatch_documents.delay(run_id, changeset_id, source_id, start + size)
        return len(batch)

    @app.task(bind=True, shared=False, name=str(TaskName.SYNC_SOURCE), max_retries=max_retries)
    def sync_source(self: Task, source_id: str, trigger: str = "api",
                    report: bool | None = None) -> int | dict[str, Any]:
        """Plan a run of ``source_id`` and fan out its documents; returns the run id.

        When a live run of the source is already running, no run is opened:
        its id is returned (joined) and the caller follows it.  With
        ``report`` the result is ``{"run_id": ..., "joined": ...}`` (older
        callers get the bare id).
        """
        svc = services()

        def result(run_id: int, joined: bool) -> int | dict[str, Any]:
            return {"run_id": run_id, "joined": joined} if report else run_id

        try:
            plan = pipeline.plan_sync(svc.pipeline, source_id, trigger=trigger)
        except RetryableError as exc:
            count("sync_source", "retry")
            raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
        except StaleTaskError as exc:  # a later run adopted this one while it planned
            pipeline.record_stale(svc.pipeline, "sync_source", exc, source=source_id)
            count("sync_source", "stale")
            return result(exc.run_id, False)
        if plan.joined:
            count("sync_source", "joined")
            return result(plan.run_id, True)
        if not plan.documents:
            finish_sync.delay(plan.run_id)
        dispatch(plan.run_id, plan.changeset_id, source_id, [(d.key, d.etag, d.size) for d in plan.documents], 0,
                 worked=False)
        count("sync_source", "ok")
        return result(plan.run_id, False)

    @app.task(bind=True, shared=False, name=str(TaskName.PROCESS_DOCUMENT), max_retries=max_retries)
    def process_document(self: Task, run_id: int, changeset_id: int, source_id: str, key: str,
                         etag: str | None = None, size: int = 0) -> str:
        svc = services()

        def failed(reason: str, detail: str) -> str:
            # The run must still complete: record the document as failed.
            try:
                svc.registry.record_failure(run_id, source_id=source_id, document_id=document_id(source_id, key),
                                            key=key, reason=reason, detail=detail, etag=None, size=size,
                                            changeset_id=changeset_id)
            except StaleTaskError as exc:
                pipeline.record_stale(svc.pipeline, "process_document", exc, source=source_id, key=key)
                return "stale"
            return "failed"

        try:
            # The start marker: from here on the document is being worked on, not
            # waiting in the queue; without an outcome after the lease, its worker died.
            svc.registry.mark_document_started(run_id, key)
            outcome = pipeline.process_document(svc.pipeline, run_id, changeset_id, source_id, key, etag, size)
            result = outcome.outcome
        except RetryableError as exc:
            if self.max_retries is None or self.request.retries < self.max_retries:  # None: Celery's "forever"
                count("process_document", "retry")
                raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
            result = failed("retries_exhausted", str(exc))
        except PermanentError as exc:
            result = failed("permanent_error", str(exc))
        except Exception as exc:  # a bug must not strand the run: record it against the document
            log.exception("process_document crashed on %s/%s", source_id, key)
            result = failed("internal_error", f"{type(exc).__name__}: {exc}")
        count("process_document", result)
        if result == "stale":
            # The run is closed (finished, or adopted by a later run): it was
            # finished and built by others; enqueueing finish_sync would only
            # trigger a spurious build.
            return result
        done, planned = svc.registry.run_progress(run_id)
        if done >= planned:
            finish_sync.delay(run_id)
        return result

    @app.task(bind=True, shared=False, name=str(TaskName.DISPATCH_DOCUMENTS), max_retries=max_retries,
              autoretry_for=(RetryableError,), retry_backoff=True, retry_backoff_max=broker.retry_backoff_max,
              retry_jitter=True)
    def dispatch_documents(self: Task, run_id: int, changeset_id: int, source_id: str, start: int) -> int:
        """The next batch of a run's planned documents (see "Fair dispatch" above); 0 once the run is closed.

        A closed run (finished, or adopted by a later run that re-planned its
        unprocessed documents) gets nothing more.  A second copy of a
        continuation (a redelivery, or the reaper's re-enqueue of one that
        waited longer than the lease) sends nothing: the run's dispatch
        cursor has moved on (:meth:`registry.Registry.advance_dispatch`).
        """
        svc = services()
        run = svc.registry.get_sync_run(run_id)
        planned = (run.summary or {}).get("planned_keys")
        if run.status != RunStatus.RUNNING or planned is None:
            count("dispatch_documents", "stale")
            return 0
        sent = dispatch(run_id, changeset_id, source_id, [(k, e, int(z)) for k, e, z in planned], int(start))
        count("dispatch_documents", "ok" if sent else "duplicate")
        return sent

    # Celery's own retry options fit here: nothing to record when retries run out.
    @app.task(bind=True, shared=False, name=str(TaskName.FINISH_SYNC), max_retries=max_retries, autoretry_for=(RetryableError,),
              retry_backoff=True, retry_backoff_max=broker.retry_backoff_max, retry_jitter=True)
    def finish_sync(self: Task, run_id: int) -> str:
        svc = services()
        run, finished_now = pipeline.finish_sync(svc.pipeline, run_id)
        if finished_now:
            build_snapshot.delay(run.kb, run_id)
        count("finish_sync", "ok")
        return run.status

    @app.task(bind=True, shared=False, name=str(TaskName.BUILD_SNAPSHOT), max_retries=30)
    def build_snapshot(self: Task, kb: str, run_id: int | None = None, full: bool = False) -> str:
        svc = services()
        try:
            result = svc.builder.build(kb, actor=f"worker:{socket.gethostname()}",
                                       reason=f"sync run {run_id}" if run_id else "requested", full=bool(full))
        except LockHeldError as exc:
            pipeline.record_build(svc.registry, run_id, exc)  # queued: the run stays pending
            count("build_snapshot", "retry")
            raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
        except RetryableError as exc:
            count("build_snapshot", "retry")
            raise self.retry(exc=exc, countdown=backoff(self.request.retries)) from exc
        finally:
            # Close what the build opened: a worker process lives long and builds many versions.
            svc.store.release()
        pipeline.record_build(svc.registry, run_id, result)
        count("build_snapshot", result.status)
        return result.status

    @app.task(bind=True, shared=False, name=str(TaskName.POLL_SOURCES))
    def poll_sources(self: Task) -> list[str]:
        svc = services()
        due = due_sources(svc.registry, lease_s=settings.sync.run_lease_s)
        for source_id in due:
            sync_source.delay(source_id, "schedule")
        return due

    @app.task(bind=True, shared=False, name=str(TaskName.REAP_RUNS))
    def reap_runs(self: Task) -> dict[str, Any]:
        """Resume, close or rebuild runs whose worker died (on beat; idempotent)."""
        svc = services()
        report = reap(svc.registry, enqueue_actions(app), lease_s=settings.sync.run_lease_s, metrics=svc.metrics)
        count("reap_runs", "ok")
        return report.as_dict()

    # -- freshness and housekeeping on beat (schedules/sweep.py, schedules/gc.py) --

    @app.task(bind=True, shared=False, name=str(TaskName.SWEEP_FRESHNESS))
    def sweep_freshness(self: Task) -> dict[str, Any]:
        """Stale labels, hard expiry, end of validity, supersedes (idempotent)."""
        svc = services()
        report = sweep(svc.registry, metrics=svc.metrics)
        for source_id in report.resync:  # mirrors whose canonical document went: re-read them now
            sync_source.delay(source_id, "sweep")
        count("sweep_freshness", "ok")
        return report.as_dict()

    @app.task(bind=True, shared=False, name=str(TaskName.COLLECT_TOMBSTONES))
    def collect_tombstones(self: Task) -> dict[str, int]:
        """Delete tombstones no retained snapshot needs (idempotent)."""
        svc = services()
        done = collect_tombstones_(svc.registry, retention_s=settings.schedules.tombstone_retention_s)
        count("collect_tombstones", "ok")
        return done

    @app.task(bind=True, shared=False, name=str(TaskName.RETAIN_SNAPSHOTS))
    def retain_snapshots(self: Task) -> dict[str, list[str]]:
        """Keep ``snapshots.keep_versions`` built versions per knowledge base, under its writer lock."""
        svc = services()

        def retain(kb: str) -> list[str]:
            with svc.builder.lock(kb):
                return svc.builder.retain(kb)

        try:
            done = retain_snapshots_(svc.registry.knowledge_bases(), retain)
        finally:
            svc.store.release()
        count("retain_snapshots", "ok")
        return done

    @app.task(bind=True, shared=False, name=str(TaskName.RECONCILE_INDEX))
    def reconcile_index(self: Task) -> dict[str, Any]:
        """Orphans both ways between the registry and each active collection, withdrawn (idempotent)."""
        svc = services()

        def point_ids(kb: str) -> list[str] | None:
            active = svc.registry.active_snapshot(kb)
            return None if active is None else list(svc.store.iter_ids(active.collection))

        try:
            done = reconcile(svc.registry, point_ids=point_ids, locked=svc.builder.lock,
                             metrics=svc.metrics)
        finally:
            svc.store.release()
        count("reconcile_index", "ok")
        return done
