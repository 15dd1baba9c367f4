"""Recover sync runs whose worker died: resume them, close them, or build them.

A run is leased, not owned: the process working on it renews
``sync_runs.heartbeat_at`` (at plan time, while each document or build task
runs, see :class:`Heartbeat`), and a run nobody renewed for
``sync.run_lease_s`` is presumed dead (:meth:`registry.Registry.stalled_runs`).
:func:`reap` then, per stalled run:

* ``running``, distributed, with a recorded plan: re-enqueue
  ``process_document`` for every planned document without an outcome that
  was *lost* (tasks are idempotent, a copy the broker also redelivers
  changes nothing), or ``finish_sync`` when every document has one (the
  finishing task died).  A document is lost when a task began on it (its
  start marker, :meth:`registry.Registry.mark_document_started`) and no
  outcome followed: its worker died.  One never started is waiting in the
  queue; while the parse workers are alive (another run's document started,
  or its continuation sent a batch, within the lease:
  :meth:`registry.Registry.worked_runs`; the planner's and the reaper's
  renewals are no such evidence) it is not re-sent and the reap
  (``waiting``) does not count towards ``max_resumes``.  With no parse
  worker taking work, every outstanding document is re-sent, as lost.  The
  start markers of re-sent documents are cleared: their copies are queued;
* ``running``, dispatched in batches (fair dispatch, ``summary["dispatched"]``
  short of the plan): the same for the documents sent so far, and the
  ``dispatch_documents`` continuation from the cursor is re-enqueued (a copy
  of one still queued sends nothing).  While the parse workers are alive, a
  run with nothing lost is waiting in the queue behind other sources, not
  dead: such a redispatch does not count towards ``max_resumes``, so a long
  queue never closes a run;
* ``running`` without a plan, in embedded mode (nobody to hand documents
  to), or resumed ``max_resumes`` times already: close it as failed
  ("worker lost"), its unprocessed documents recorded as ``worker_lost`` so
  the next sync retries them, and build what it staged;
* finished with its build ``pending`` and no builder holding the lock:
  build again (enqueue ``build_snapshot``, or build in this process), and
  after ``max_resumes`` rebuilds mark the build failed (the alias stays).

It runs on beat (``freshindex.reap_runs``), when a sync starts, and from a
CLI following a run that stalls.  What it does not guarantee: that a worker
which is only slow (renewing less often than the lease) is not reaped; its
work is then done twice, never lost or duplicated in the index.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.enums import BuildStatus, RunStatus
from freshindex.core.errors import DocumentError, RetryableError
from freshindex.core.ids import document_id
from freshindex.health.metrics import Metrics
from freshindex.registry import DocumentFailure, SyncRunInfo
from freshindex.registry.protocols import ReaperRegistry

log = logging.getLogger("freshindex.reaper")

#: (run, key, etag, size, media type): put one planned document back on the queue.
ResumeDocument = Callable[[SyncRunInfo, str, "str | None", int, "str | None"], None]


@dataclass(frozen=True)
class ReapActions:
    """What the reaper may do with a run; the dispatcher decides how (injected).

    The Celery dispatcher's actions enqueue by task name
    (:func:`workers.names.enqueue_actions`); the inline runner builds in its
    own process.  The reaper itself imports no dispatcher.

    ``resume_document`` and ``finish`` are None in embedded mode: there is no
    queue to hand a dead run's documents to, so such a run is closed (the next
    sync adopts its staged changes and re-plans the rest).
    """

    build: Callable[[str, int], None]
    resume_document: ResumeDocument | None = None
    finish: Callable[[int], None] | None = None
    #: (run, start): enqueue the run's ``dispatch_documents`` continuation from ``start``.
    redispatch: Callable[[SyncRunInfo, int], None] | None = None


@dataclass(frozen=True)
class Reaped:
    run_id: int
    source_id: str
    kb: str
    action: str  # resumed | redispatched | waiting | finished | closed | rebuilt | build_failed
    documents: int = 0
    detail: str = ""


@dataclass(frozen=True)
class ReapReport:
    reaped: tuple[Reaped, ...] = field(default_factory=tuple)

    def count(self, action: str) -> int:
        return sum(1 for r in self.reaped if r.action == action)

    def as_dict(self) -> dict[str, Any]:
        return {"reaped": [r.__dict__ for r in self.reaped]}


def reap(registry: ReaperRegistry, actions: ReapActions, *, lease_s: float, metrics: Metrics | None = None,
         max_resumes: int = 3, now: dt.datetime | None = None) -> ReapReport:
    """Resume, close or rebuild every run stalled for ``lease_s`` seconds (at ``now``: a test's clock)."""
    done: list[Reaped] = []
    for run in (registry.stalled_runs(lease_s) if now is None else registry.stalled_runs(lease_s, now=now)):
        try:
            item = (_reap_running(registry, actions, run, lease_s, max_resumes) if run.status == RunStatus.RUNNING
                    else _reap_build(registry, actions, run, max_resumes))
        except Exception as exc:  # one bad run must not stop the others being recovered
            # The registry away or full is one line (its traceback at debug); anything else keeps its traceback.
            log.error("could not reap run %s: %s", run.id, exc, exc_info=not isinstance(exc, RetryableError))
            log.debug("could not reap run %s", run.id, exc_info=True)
            continue
        done.append(item)
        if metrics is not None:
            metrics.reaped_runs.labels(item.action).inc()
        log.warning(
            "run reaped",
            extra={"event": "run_reaped", "run": run.id, "source": run.source_id, "kb": run.kb,
                   "action": item.action, "documents": item.documents, "worker": run.worker, "detail": item.detail},
        )
    return ReapReport(tuple(done))


def _resumes_without_progress(run: SyncRunInfo, missing: int) -> int:
    """Resumes in a row after which the run's missing documents did not shrink.

    A reap while other runs were being worked on and nothing was lost
    (``queued``: the run's documents or continuation wait behind them)
    neither counts nor breaks the row."""
    n = 0
    for r in reversed(run.summary.get("reaps", [])):
        if r.get("action") not in ("resumed", "finished", "redispatched", "waiting") or r.get("missing") != missing:
            break
        if not r.get("queued"):
            n += 1
    return n


def _dispatch_cursor(run: SyncRunInfo) -> int | None:
    """How many planned documents fair dispatch has enqueued, when some are still to send (else None)."""
    summary = run.summary or {}
    cursor, planned = summary.get("dispatched"), summary.get("planned_keys")
    if cursor is None or planned is None or int(cursor) >= len(planned):
        return None
    return int(cursor)


def _reap_running(registry: ReaperRegistry, actions: ReapActions, run: SyncRunInfo, lease_s: float,
                  max_resumes: int) -> Reaped:
    missing = registry.unprocessed_documents(run.id)
    lost = f"worker lost: no heartbeat from {run.worker or 'its worker'} for {lease_s:.0f}s"
    cursor = _dispatch_cursor(run)
    # Fair dispatch: documents up to the cursor were enqueued; the rest wait for
    # a continuation, which may only be waiting in the queue behind other sources.
    batched = cursor is not None and bool(missing) and actions.redispatch is not None
    if missing is not None and actions.resume_document is not None and (batched or actions.finish is not None):
        sent = {k for k, _e, _z in run.summary["planned_keys"][:cursor]} if batched else None
        outstanding = [m for m in missing if sent is None or m[0] in sent]
        # Sent, no outcome: lost only if a task began on it (its worker died);
        # never started, it is still in the queue, behind other sources' work.
        started = registry.started_documents(run.id) if outstanding else {}
        lost_docs = [m for m in outstanding if m[0] in started]
        alive = any(r != run.id for r in registry.worked_runs(lease_s))
        # Without parse workers taking work, a document never started may as well be lost: re-send it.
        resend = lost_docs if alive else outstanding
        queued = alive and not lost_docs and (batched or bool(outstanding))
        stuck = _resumes_without_progress(run, len(missing))
        if queued or stuck < max_resumes:
            # Enqueue first, record after: a resume the broker refused (it is
            # down) is not counted against the run; the next check tries again.
            if not missing and actions.finish is not None:
                actions.finish(run.id)
            for key, etag, size, media_type in resend:
                actions.resume_document(run, key, etag, size, media_type)
            if batched and actions.redispatch is not None and cursor is not None:
                actions.redispatch(run, cursor)  # a copy of a queued continuation sends nothing
            again = [m[0] for m in resend if m[0] in started]
            if again:  # their copies are queued, not started, until a worker takes them
                registry.clear_started(run.id, again, up_to=max(started[k] for k in again))
            action = ("resumed" if resend else "redispatched" if batched else "finished" if not missing
                      else "waiting")
            extra: dict[str, Any] = {"dispatched": cursor} if batched else {}
            registry.record_reap(run.id, action, missing=len(missing), queued=queued,
                                 waiting=len(outstanding) - len(lost_docs), **extra)
            if queued:
                detail = (f"continuation from document {cursor} re-enqueued" if batched
                          else f"{len(outstanding)} documents waiting in the queue")
            else:
                detail = lost + (f"; continuation from document {cursor} re-enqueued" if batched else "")
            return Reaped(run.id, run.source_id, run.kb, action, documents=len(resend), detail=detail)
    stuck = _resumes_without_progress(run, len(missing)) if missing is not None else 0
    if missing is None:
        detail = f"{lost} (no plan recorded)"
    elif stuck >= max_resumes:
        detail = f"{lost} (resumed {stuck} times without progress)"
    else:
        detail = lost
    registry.record_reap(run.id, "closed")
    for key, _etag, size, _media in missing or ():
        # etag None: the next sync sees the document as changed and retries it.
        registry.record_failure(run.id, DocumentFailure(
            source_id=run.source_id, document_id=document_id(run.source_id, key), key=key,
            reason=DocumentError.WORKER_LOST, detail=detail, etag=None, size=size))
    _, finished_now = registry.finish_sync_run(run.id, error=detail)
    if finished_now:
        actions.build(run.kb, run.id)  # what the run staged before its worker died
    return Reaped(run.id, run.source_id, run.kb, "closed", documents=len(missing or ()), detail=detail)


def _reap_build(registry: ReaperRegistry, actions: ReapActions, run: SyncRunInfo, max_resumes: int) -> Reaped:
    rebuilds = sum(1 for r in run.summary.get("reaps", []) if r.get("action") == "rebuilt")
    if rebuilds >= max_resumes:
        detail = f"build lost {rebuilds} times; the changes stay staged for the next build"
        registry.record_reap(run.id, "build_failed")
        registry.set_run_build(run.id, status=BuildStatus.FAILED, snapshot_id=None, error=detail)
        return Reaped(run.id, run.source_id, run.kb, "build_failed", detail=detail)
    actions.build(run.kb, run.id)
    registry.record_reap(run.id, "rebuilt")
    return Reaped(run.id, run.source_id, run.kb, "rebuilt", detail=f"build pending, no heartbeat from {run.worker}")


class Heartbeat:
    """Renew a run's lease from a background thread while work on it runs.

    Beats on entry, every ``interval`` seconds, and on exit (so "after each
    document" holds).  A failed beat (registry blip) is logged and retried
    next period; it never fails the work.
    """

    def __init__(self, registry: ReaperRegistry, run_id: int, interval: float, worker: str | None = None) -> None:
        self.registry, self.run_id, self.interval, self.worker = registry, run_id, interval, worker
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        try:
            self.registry.heartbeat_run(self.run_id, self.worker)
        except RetryableError as exc:  # the registry away or full: said in one line; the work reports it
            log.warning("could not renew the lease of run %s: %s", self.run_id, exc)
        except Exception:
            log.warning("could not renew the lease of run %s", self.run_id, exc_info=True)

    def start(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat run {self.run_id}", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.beat()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


__all__ = ["Heartbeat", "ReapActions", "ReapReport", "Reaped", "reap"]
