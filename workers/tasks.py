"""Celery task shells around the pipeline functions.

A shell does four things and no more: take the process's services (built by
the factory the application edge passed to :func:`register`, see
:mod:`workers.ports`), call one plain function with ids, translate the error
tree into retry-or-record, and chain to the next step.  Services, retry,
counting and the run lease belong to the shells' base class
(:class:`workers.task_base.ShellTask`); the fair-dispatch rule to
:mod:`workers.dispatch`.  Arguments are ids, keys and etags (JSON); the
payload lives in the registry.  New arguments must default to ``None`` so a
rolling deploy can mix old and new workers.

Completion without a chord: each ``process_document`` checks, after
recording its outcome, whether every planned document of its run has an
outcome; :meth:`registry.Registry.finish_sync_run` lets exactly one caller
finish the run, and that caller enqueues the build.  A document whose task
exhausts its retries records a failure, so a run always completes.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Any

from celery import Celery
from celery.signals import worker_process_shutdown

from freshindex.core.errors import LockHeldError, PermanentError, RetryableError, StaleTaskError
from freshindex.core.ids import document_id
from freshindex.registry import DocumentFailure, DocumentOutcome
from freshindex.schedules.gc import collect_tombstones as collect_tombstones_
from freshindex.schedules.gc import retain_snapshots as retain_snapshots_
from freshindex.schedules.plan import due_sources
from freshindex.schedules.reaper import reap
from freshindex.schedules.reconcile import reconcile
from freshindex.schedules.sweep import sweep
from freshindex.settings import Settings
from freshindex.workers import dispatch, embed_stage, pipeline, planner
from freshindex.workers.handoff import Stage, StageHandoff
from freshindex.workers.names import TaskName, enqueue_actions
from freshindex.workers.ports import ServicesFactory
from freshindex.workers.task_base import ShellTask, TaskRuntime

log = logging.getLogger("freshindex.tasks")


def _media_arg(media_type: str | None) -> tuple[str, ...]:
    """A document task's optional last argument: sent only when there is a media type, so a worker of
    the previous release (six arguments) takes every document without one during a rolling deploy."""
    return (media_type,) if media_type else ()


def _send_batch(task: ShellTask, run_id: int, changeset_id: int, source_id: str,
                documents: Sequence[dispatch.Planned], start: int, *, worked: bool = True) -> int:
    """Fair dispatch (:func:`workers.dispatch.send_batch`) with this app's document task and continuation."""
    return dispatch.send_batch(
        task.services.registry, task.settings.broker.dispatch_batch, run_id, documents, start,
        send_document=lambda key, etag, size, media_type: task.send(
            TaskName.PROCESS_DOCUMENT, run_id, changeset_id, source_id, key, etag, size, *_media_arg(media_type)),
        send_continuation=lambda nxt: task.send(TaskName.DISPATCH_DOCUMENTS, run_id, changeset_id, source_id, nxt),
        worked=worked)


def sync_source(self: ShellTask, source_id: str, trigger: str = "api",
                report: bool | None = None) -> int | dict[str, Any]:
    """Plan a run of ``source_id`` and fan out its documents; returns the run id.

    When a live run of the source is already running, no run is opened:
    its id is returned (joined) and the caller follows it.  With
    ``report`` the result is ``{"run_id": ..., "joined": ...}`` (older
    callers get the bare id).
    """
    svc = self.services

    def result(run_id: int, joined: bool) -> int | dict[str, Any]:
        return {"run_id": run_id, "joined": joined} if report else run_id

    try:
        plan = planner.plan_sync(svc.pipeline, source_id, trigger=trigger)
    except RetryableError as exc:
        self.retry_later(exc)
    except StaleTaskError as exc:  # a later run adopted this one while it planned
        pipeline.record_stale(svc.pipeline, "sync_source", exc, source=source_id)
        self.count("stale")
        return result(exc.run_id, False)
    if plan.joined:
        self.count("joined")
        return result(plan.run_id, True)
    if not plan.documents:
        self.send(TaskName.FINISH_SYNC, plan.run_id)
    _send_batch(self, plan.run_id, plan.changeset_id, source_id,
                [(d.key, d.etag, d.size, d.media_type) for d in plan.documents], 0, worked=False)
    self.count("ok")
    return result(plan.run_id, False)


def process_document(self: ShellTask, run_id: int, changeset_id: int, source_id: str, key: str,
                     etag: str | None = None, size: int = 0, media_type: str | None = None) -> str:
    """One document of a run: every stage here, or (``broker.stage_queues``) fetch and parse, then hand on.

    ``media_type``: the listing's, which picks the parser of a key without an
    extension one reads (None from a planner of the previous release)."""
    stage = Stage.PARSE if self.settings.broker.stage_queues else Stage.ALL
    return _document_task(self, run_id, changeset_id, source_id, (key, etag, size, media_type),
                          lambda: pipeline.process_document(self.services.pipeline, pipeline.DocumentTask(
                              run_id, changeset_id, source_id, key, etag, size, media_type), stage))


def ocr_document(self: ShellTask, run_id: int, changeset_id: int, source_id: str, key: str,
                 etag: str | None = None, size: int = 0, media_type: str | None = None) -> str:
    """A document whose PDF needs OCR, handed on by the parse stage: read it with OCR, chunk, hand on to embed."""
    return _document_task(self, run_id, changeset_id, source_id, (key, etag, size, media_type),
                          lambda: pipeline.process_document(self.services.pipeline, pipeline.DocumentTask(
                              run_id, changeset_id, source_id, key, etag, size, media_type), Stage.OCR))


def embed_document(self: ShellTask, run_id: int, changeset_id: int, source_id: str, key: str,
                   etag: str | None, size: int, payload: dict[str, Any]) -> str:
    """Chunks handed on by the parse or ocr stage: embed the new ones, stage the document, record its outcome."""
    return _document_task(self, run_id, changeset_id, source_id, (key, etag, size, None),
                          lambda: embed_stage.embed_document(self.services.pipeline, run_id, changeset_id, source_id,
                                                             key, etag, size, payload))


def _hand_on(self: ShellTask, handoff: StageHandoff, run_id: int, changeset_id: int, source_id: str,
             doc: dispatch.Planned) -> str:
    """Send the document's next stage; its start marker goes, since it now waits in a queue, not in a worker."""
    # Cleared before sending, so the next stage's own marker is never the one cleared; meanwhile the
    # reaper counts the document as queued (never started), which it is.
    key, etag, size, media_type = doc
    self.services.registry.clear_started(run_id, [key], up_to=dt.datetime.now(dt.UTC))
    args: tuple[Any, ...] = (run_id, changeset_id, source_id, key, etag, size)
    if handoff.stage is Stage.OCR:  # it parses again: with the media type that picked its parser
        self.send(TaskName.OCR_DOCUMENT, *args, *_media_arg(media_type))
    else:
        self.send(TaskName.EMBED_DOCUMENT, *args, handoff.payload)
    return f"to_{handoff.stage}"


def _document_task(self: ShellTask, run_id: int, changeset_id: int, source_id: str, doc: dispatch.Planned,
                   call: Callable[[], DocumentOutcome]) -> str:
    """The shell every document stage shares: start marker, retry or record, hand-off, finishing the run.

    ``doc``: the document's key, etag, size and media type (None where the stage has no use for it)."""
    svc = self.services
    key, size = doc[0], doc[2]

    def failed(reason: str, detail: str) -> str:
        # The run must still complete: record the document as failed.
        try:
            svc.registry.record_failure(run_id, DocumentFailure(
                source_id=source_id, document_id=document_id(source_id, key), key=key, reason=reason,
                detail=detail, etag=None, size=size), changeset_id=changeset_id)
        except StaleTaskError as exc:
            pipeline.record_stale(svc.pipeline, "process_document", exc, source=source_id, key=key)
            return "stale"
        return "failed"

    try:
        # The start marker: from here on the document is being worked on, not
        # waiting in the queue; without an outcome after the lease, its worker died.
        svc.registry.mark_document_started(run_id, key)
        result = call().outcome
    except StageHandoff as handoff:  # no outcome yet: the next stage records it
        result = _hand_on(self, handoff, run_id, changeset_id, source_id, doc)
        self.count(result)
        return result
    except RetryableError as exc:
        if self.can_retry():
            self.retry_later(exc)
        result = failed("retries_exhausted", str(exc))
    except PermanentError as exc:
        result = failed("permanent_error", str(exc))
    except Exception as exc:  # a bug must not strand the run: record it against the document
        log.exception("%s crashed on %s/%s", self.name, source_id, key)
        result = failed("internal_error", f"{type(exc).__name__}: {exc}")
    self.count(result)
    if result == "stale":
        # The run is closed (finished, or adopted by a later run): it was
        # finished and built by others; enqueueing finish_sync would only
        # trigger a spurious build.
        return result
    done, planned = svc.registry.run_progress(run_id)
    if done >= planned:
        self.send(TaskName.FINISH_SYNC, run_id)
    return result


def dispatch_documents(self: ShellTask, run_id: int, changeset_id: int, source_id: str, start: int) -> int:
    """The next batch of a run's planned documents (:mod:`workers.dispatch`); 0 once the run is closed.

    A closed run (finished, or adopted by a later run that re-planned its
    unprocessed documents) gets nothing more.  A second copy of a
    continuation (a redelivery, or the reaper's re-enqueue of one that
    waited longer than the lease) sends nothing: the run's dispatch
    cursor has moved on (:meth:`registry.Registry.advance_dispatch`).
    """
    try:
        planned = dispatch.planned_documents(self.services.registry.get_sync_run(run_id))
        if planned is None:
            self.count("stale")
            return 0
        sent = _send_batch(self, run_id, changeset_id, source_id, planned, int(start))
    except RetryableError as exc:
        self.retry_later(exc)
    self.count("ok" if sent else "duplicate")
    return sent


def finish_sync(self: ShellTask, run_id: int) -> str:
    try:
        run, finished_now = pipeline.finish_sync(self.services.pipeline, run_id)
        if finished_now:
            self.send(TaskName.BUILD_SNAPSHOT, run.kb, run_id)
    except RetryableError as exc:
        self.retry_later(exc)
    self.count("ok")
    return run.status


def build_snapshot(self: ShellTask, kb: str, run_id: int | None = None, full: bool = False) -> str:
    svc = self.services
    try:
        result = svc.builder.build(kb, actor=f"worker:{socket.gethostname()}",
                                   reason=f"sync run {run_id}" if run_id else "requested", full=bool(full))
    except LockHeldError as exc:
        pipeline.record_build(svc.registry, run_id, exc)  # queued: the run stays pending
        self.retry_later(exc)
    except RetryableError as exc:
        self.retry_later(exc)
    finally:
        # Close what the build opened: a worker process lives long and builds many versions.
        svc.store.release()
    pipeline.record_build(svc.registry, run_id, result)
    self.count(result.status)
    if result.status == "built":
        _send_evaluation(self, kb)
    return result.status


def _send_evaluation(self: ShellTask, kb: str) -> None:
    """After a swap, the evaluation of ``kb``'s due golden sets; a failure to send is logged, not the build's
    (the snapshot serves; beat's ``evaluate-golden-sets`` tick sends it later)."""
    try:
        if self.services.registry.due_golden_sets(kb):
            self.send(TaskName.EVALUATE_GOLDEN_SETS, kb)
    except Exception:
        log.warning("evaluation after the swap of %s not sent; beat's tick will", kb, exc_info=True)


def poll_sources(self: ShellTask) -> list[str]:
    due = due_sources(self.services.registry, lease_s=self.settings.sync.run_lease_s)
    for source_id in due:
        self.send(TaskName.SYNC_SOURCE, source_id, "schedule")
    return due


def reap_runs(self: ShellTask) -> dict[str, Any]:
    """Resume, close or rebuild runs whose worker died (on beat; idempotent)."""
    svc = self.services
    report = reap(svc.registry, enqueue_actions(self.app), lease_s=self.settings.sync.run_lease_s,
                  metrics=svc.metrics)
    self.count("ok")
    return report.as_dict()


# -- freshness and housekeeping on beat (schedules/sweep.py, schedules/gc.py) --

def sweep_freshness(self: ShellTask) -> dict[str, Any]:
    """Stale labels, hard expiry, end of validity, supersedes (idempotent)."""
    svc = self.services
    report = sweep(svc.registry, metrics=svc.metrics)
    for source_id in report.resync:  # mirrors whose canonical document went: re-read them now
        self.send(TaskName.SYNC_SOURCE, source_id, "sweep")
    self.count("ok")
    return report.as_dict()


def collect_tombstones(self: ShellTask) -> dict[str, int]:
    """Delete tombstones no retained snapshot needs (idempotent)."""
    done = collect_tombstones_(self.services.registry, retention_s=self.settings.schedules.tombstone_retention_s)
    self.count("ok")
    return done


def retain_snapshots(self: ShellTask) -> dict[str, list[str]]:
    """Keep ``snapshots.keep_versions`` built versions per knowledge base, under its writer lock."""
    svc = self.services

    def retain(kb: str) -> list[str]:
        with svc.builder.lock(kb):
            return svc.builder.retain(kb)

    try:
        done = retain_snapshots_(svc.registry.knowledge_bases(), retain)
    finally:
        svc.store.release()
    self.count("ok")
    return done


def reconcile_index(self: ShellTask) -> dict[str, Any]:
    """Orphans both ways between the registry and each active collection, withdrawn (idempotent)."""
    svc = self.services

    def point_ids(kb: str) -> list[str] | None:
        active = svc.registry.active_snapshot(kb)
        return None if active is None else list(svc.store.iter_ids(active.collection))

    try:
        done = reconcile(svc.registry, point_ids=point_ids, locked=svc.builder.lock, metrics=svc.metrics)
    finally:
        svc.store.release()
    self.count("ok")
    return done


def evaluate_golden_sets(self: ShellTask, kb: str | None = None) -> dict[str, Any]:
    """The registered golden sets of ``kb`` not yet evaluated on the snapshot it serves, evaluated and recorded.

    Without ``kb`` (beat's tick) it only finds the knowledge bases with a due set and sends each its own
    evaluation (on the build queue).  Idempotent: a set already evaluated on the serving snapshot is skipped,
    so a redelivery or a tick after the build task's own send evaluates nothing twice.
    """
    svc = self.services
    if kb is None:
        kbs = sorted({info.kb for info, _ in svc.registry.due_golden_sets()})
        for name in kbs:
            self.send(TaskName.EVALUATE_GOLDEN_SETS, name)
        self.count("ok")
        return {"sent": kbs}
    try:
        done = svc.evaluate_golden_sets(kb)
    except RetryableError as exc:
        self.retry_later(exc)
    finally:
        svc.store.release()
    self.count("ok")
    return {"kb": kb, "evaluated": done}


def _options(settings: Settings) -> dict[Callable[..., Any], dict[str, Any]]:
    """Each shell's task options: its name, its retries (Celery's default 3 where none is given)
    and which argument is the run it works on (``run_arg``, for the lease)."""
    retries = settings.broker.task_max_retries
    return {
        sync_source: {"name": TaskName.SYNC_SOURCE, "max_retries": retries},
        process_document: {"name": TaskName.PROCESS_DOCUMENT, "max_retries": retries, "run_arg": 0},
        ocr_document: {"name": TaskName.OCR_DOCUMENT, "max_retries": retries, "run_arg": 0},
        embed_document: {"name": TaskName.EMBED_DOCUMENT, "max_retries": retries, "run_arg": 0},
        dispatch_documents: {"name": TaskName.DISPATCH_DOCUMENTS, "max_retries": retries, "run_arg": 0},
        finish_sync: {"name": TaskName.FINISH_SYNC, "max_retries": retries, "run_arg": 0},
        build_snapshot: {"name": TaskName.BUILD_SNAPSHOT, "max_retries": 30, "run_arg": 1},
        poll_sources: {"name": TaskName.POLL_SOURCES},
        reap_runs: {"name": TaskName.REAP_RUNS},
        sweep_freshness: {"name": TaskName.SWEEP_FRESHNESS},
        collect_tombstones: {"name": TaskName.COLLECT_TOMBSTONES},
        retain_snapshots: {"name": TaskName.RETAIN_SNAPSHOTS},
        reconcile_index: {"name": TaskName.RECONCILE_INDEX},
        evaluate_golden_sets: {"name": TaskName.EVALUATE_GOLDEN_SETS, "max_retries": retries},
    }


def register(app: Celery, services_factory: ServicesFactory | None = None) -> None:
    """Register every task shell on ``app``; each worker process calls ``services_factory`` once.

    Without a factory the shells are registered (so the app can route and
    inspect them) but running one raises :class:`ConfigError`: this module
    builds no services of its own.
    """
    runtime = TaskRuntime(app.freshindex_settings, services_factory)  # type: ignore[attr-defined]
    worker_process_shutdown.connect(runtime.close, weak=False)
    # shared=False: Celery's default adds every shared task to each app created later in the
    # process, so a second app (a test, a CLI that only sends) would run the first app's shells.
    for shell, options in _options(runtime.settings).items():
        options["name"] = str(options["name"])
        app.task(bind=True, shared=False, base=ShellTask, runtime=runtime, **options)(shell)


__all__ = ["register"]
