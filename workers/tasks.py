"""Celery task shells around the pipeline functions.

A shell does four things and no more: find the process's :class:`Services`,
call one plain function with ids, translate the error tree into Celery's
retry-or-record, and chain to the next step.  Arguments are ids, keys and
etags (JSON); the payload lives in the registry.  New arguments must default
to ``None`` so a rolling deploy can mix old and new workers.

Completion without a chord: each ``process_document`` checks, after
recording its outcome, whether every planned document of its run has an
outcome; :meth:`registry.Registry.finish_sync_run` lets exactly one caller
finish the run, and that caller enqueues the build.  A document whose task
exhausts its retries records a failure, so a run always completes.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from celery import Celery, Task
from celery.signals import worker_process_shutdown

from core.errors import LockHeldError, PermanentError, RetryableError
from core.ids import document_id
from workers import pipeline
from workers.app import TaskName
from workers.services import Services

log = logging.getLogger("freshindex.tasks")

_MAX_RETRIES = 5


def _backoff(retries: int) -> float:
    return min(60.0, 2.0 ** retries)


def register(app: Celery) -> None:
    state: dict[str, Services] = {}

    def services() -> Services:
        # Built on first use inside each worker process (after the fork), so
        # no database connection or model crosses a fork.
        if "svc" not in state:
            state["svc"] = Services(app.freshindex_settings)  # type: ignore[attr-defined]
        return state["svc"]

    @worker_process_shutdown.connect(weak=False)
    def _close(**_: Any) -> None:
        if "svc" in state:
            state.pop("svc").close()

    def count(task: str, outcome: str) -> None:
        services().metrics.tasks.labels(task, outcome).inc()

    @app.task(bind=True, name=str(TaskName.SYNC_SOURCE), max_retries=_MAX_RETRIES)
    def sync_source(self: Task, source_id: str, trigger: str = "api") -> int:
        svc = services()
        try:
            plan = pipeline.plan_sync(svc.pipeline, source_id, trigger=trigger)
        except RetryableError as exc:
            count("sync_source", "retry")
            raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
        if not plan.documents:
            finish_sync.delay(plan.run_id)
        for doc in plan.documents:
            process_document.delay(plan.run_id, plan.changeset_id, source_id, doc.key, doc.etag, doc.size)
        count("sync_source", "ok")
        return plan.run_id

    @app.task(bind=True, name=str(TaskName.PROCESS_DOCUMENT), max_retries=_MAX_RETRIES)
    def process_document(self: Task, run_id: int, changeset_id: int, source_id: str, key: str,
                         etag: str | None = None, size: int = 0) -> str:
        svc = services()

        def failed(reason: str, detail: str) -> str:
            # The run must still complete: record the document as failed.
            svc.registry.record_failure(run_id, source_id=source_id, document_id=document_id(source_id, key),
                                        key=key, reason=reason, detail=detail, etag=None, size=size)
            return "failed"

        try:
            outcome = pipeline.process_document(svc.pipeline, run_id, changeset_id, source_id, key, etag, size)
            result = outcome.outcome
        except RetryableError as exc:
            if self.request.retries < self.max_retries:
                count("process_document", "retry")
                raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
            result = failed("retries_exhausted", str(exc))
        except PermanentError as exc:
            result = failed("permanent_error", str(exc))
        except Exception as exc:  # a bug must not strand the run: record it against the document
            log.exception("process_document crashed on %s/%s", source_id, key)
            result = failed("internal_error", f"{type(exc).__name__}: {exc}")
        count("process_document", result)
        done, planned = svc.registry.run_progress(run_id)
        if done >= planned:
            finish_sync.delay(run_id)
        return result

    @app.task(bind=True, name=str(TaskName.FINISH_SYNC), max_retries=_MAX_RETRIES)
    def finish_sync(self: Task, run_id: int) -> str:
        svc = services()
        try:
            run, finished_now = pipeline.finish_sync(svc.pipeline, run_id)
        except RetryableError as exc:
            raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
        if finished_now:
            build_snapshot.delay(run.kb, run_id)
        count("finish_sync", "ok")
        return run.status

    @app.task(bind=True, name=str(TaskName.BUILD_SNAPSHOT), max_retries=30)
    def build_snapshot(self: Task, kb: str, run_id: int | None = None, full: bool = False) -> str:
        svc = services()
        try:
            result = svc.builder.build(kb, actor=f"worker:{socket.gethostname()}",
                                       reason=f"sync run {run_id}" if run_id else "requested", full=bool(full))
        except LockHeldError as exc:
            count("build_snapshot", "retry")
            raise self.retry(exc=exc, countdown=min(30.0, 1.0 + self.request.retries)) from exc
        except RetryableError as exc:
            count("build_snapshot", "retry")
            raise self.retry(exc=exc, countdown=_backoff(self.request.retries)) from exc
        finally:
            # Close what the build opened: a worker process lives long and builds many versions.
            svc.store.release()
        if run_id is not None:
            status = result.status
            if status == "unchanged" and svc.registry.run_changeset_applied(run_id):
                status = "built"  # an earlier build already took this run's changes
            svc.registry.set_run_build(run_id, status=status, snapshot_id=result.snapshot_id, error=result.reason)
        count("build_snapshot", result.status)
        return result.status

    @app.task(bind=True, name=str(TaskName.POLL_SOURCES))
    def poll_sources(self: Task) -> list[str]:
        from schedules.plan import due_sources

        svc = services()
        due = due_sources(svc.registry)
        for source_id in due:
            sync_source.delay(source_id, "schedule")
        return due
