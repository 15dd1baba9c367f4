"""Task names, queues and routes: the vocabulary every Celery-facing module shares.

:mod:`workers.app` (which builds the app and routes) and :mod:`workers.tasks`
(which registers the shells) both import this module and not each other's
internals, and a process that only enqueues (the CLI following a sync, the
reaper) sends by name from here without importing Celery at all.  A name
here is a wire contract with workers of other versions: rename one only with
a rolling deploy plan.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from freshindex.settings import Settings

if TYPE_CHECKING:
    from freshindex.schedules.reaper import ReapActions


class Queue(StrEnum):
    SYNC = "sync"
    PARSE = "parse"
    OCR = "ocr"
    EMBED = "embed"
    BUILD = "build"


class TaskName(StrEnum):
    SYNC_SOURCE = "freshindex.sync_source"
    PROCESS_DOCUMENT = "freshindex.process_document"
    OCR_DOCUMENT = "freshindex.ocr_document"
    EMBED_DOCUMENT = "freshindex.embed_document"
    DISPATCH_DOCUMENTS = "freshindex.dispatch_documents"
    FINISH_SYNC = "freshindex.finish_sync"
    BUILD_SNAPSHOT = "freshindex.build_snapshot"
    POLL_SOURCES = "freshindex.poll_sources"
    REAP_RUNS = "freshindex.reap_runs"
    SWEEP_FRESHNESS = "freshindex.sweep_freshness"
    COLLECT_TOMBSTONES = "freshindex.collect_tombstones"
    RETAIN_SNAPSHOTS = "freshindex.retain_snapshots"
    RECONCILE_INDEX = "freshindex.reconcile_index"
    EVALUATE_GOLDEN_SETS = "freshindex.evaluate_golden_sets"


ROUTES = {
    TaskName.SYNC_SOURCE: Queue.SYNC,
    TaskName.FINISH_SYNC: Queue.SYNC,
    TaskName.POLL_SOURCES: Queue.SYNC,
    TaskName.REAP_RUNS: Queue.SYNC,
    TaskName.SWEEP_FRESHNESS: Queue.SYNC,
    TaskName.COLLECT_TOMBSTONES: Queue.SYNC,
    TaskName.RETAIN_SNAPSHOTS: Queue.BUILD,
    TaskName.RECONCILE_INDEX: Queue.BUILD,
    TaskName.PROCESS_DOCUMENT: Queue.PARSE,
    # With broker.stage_queues (workers/handoff.py): a scanned PDF goes on to OCR, new chunks to embedding.
    TaskName.OCR_DOCUMENT: Queue.OCR,
    TaskName.EMBED_DOCUMENT: Queue.EMBED,
    TaskName.DISPATCH_DOCUMENTS: Queue.PARSE,  # behind the batch it follows: fair dispatch (workers/dispatch.py)
    TaskName.BUILD_SNAPSHOT: Queue.BUILD,
    # A beat tick (no kb) only finds the due knowledge bases; each one's evaluation is sent here (build: it
    # has the model and the store open, and runs after the swap it evaluates).
    TaskName.EVALUATE_GOLDEN_SETS: Queue.BUILD,
}


def queue_name(settings: Settings, queue: Queue) -> str:
    return f"{settings.broker.queue_prefix}.{queue.value}"


def enqueue_actions(app: Any) -> ReapActions:
    """The reaper's actions that enqueue on ``app``'s broker, by task name.

    ``app`` is anything with Celery's ``send_task``; sending by name means any
    process can reap, with or without the task shells registered.  Whether
    the broker accepted a message is all this knows: a task that then fails
    is the worker's to retry or record.
    """
    from freshindex.schedules.reaper import ReapActions

    def resume(run: Any, key: str, etag: str | None, size: int, media_type: str | None = None) -> None:
        # The media type only where there is one: a worker of the previous release takes six arguments.
        args = [run.id, run.changeset_id, run.source_id, key, etag, size, *([media_type] if media_type else [])]
        app.send_task(str(TaskName.PROCESS_DOCUMENT), args=args)

    def redispatch(run: Any, start: int) -> None:
        app.send_task(str(TaskName.DISPATCH_DOCUMENTS), args=[run.id, run.changeset_id, run.source_id, start])

    return ReapActions(
        build=lambda kb, run_id: app.send_task(str(TaskName.BUILD_SNAPSHOT), args=[kb, run_id]),
        resume_document=resume,
        finish=lambda run_id: app.send_task(str(TaskName.FINISH_SYNC), args=[run_id]),
        redispatch=redispatch,
    )


__all__ = ["ROUTES", "Queue", "TaskName", "enqueue_actions", "queue_name"]
