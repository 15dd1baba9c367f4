"""One observer for everything the write side tells the outside: a sync's steps and the builds after it.

The steps (:mod:`workers.pipeline`, :mod:`workers.planner`, the embed stage)
and the builder (:mod:`snapshots.builder` and its mixins,
:mod:`snapshots.lifecycle`) report typed events to a :class:`SyncObserver`
and never write a metric themselves; :class:`MetricsObserver` is the one
place where those events become Prometheus series
(:class:`health.metrics.Metrics`) and structured log lines, each with the
name, labels and fields it had when the steps wrote it inline.  A new
measurement of the write side is one method here, as a per-query one is one
method of :class:`injection.observer.QueryObserver` (the Dramatiq
middleware idea: one layer, one label set).

What it does not carry: log lines that explain one step's choice (a move
candidate that could not be read, an optimise that failed, a reconcile's
free-form warnings) stay with their step; the task shells' own counters
(``freshindex_tasks_total``) and the reaper's stay where they are.  Events
are measurements only: :class:`SyncObservers` logs an observer that raises
and goes on; a lone :class:`MetricsObserver` raises as the inline calls did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from freshindex.core.enums import SUCCESSFUL_RUNS, BuildStatus, DocumentOutcomeKind
from freshindex.core.errors import DocumentError

if TYPE_CHECKING:
    import datetime as dt

    from freshindex.health.metrics import Metrics

__all__ = ["MetricsObserver", "SyncObserver", "SyncObservers"]

#: The loggers the events are written to: the ones the steps used (log pipelines filter on them).
pipeline_log = logging.getLogger("freshindex.pipeline")
build_log = logging.getLogger("freshindex.build")
snapshots_log = logging.getLogger("freshindex.snapshots")
log = logging.getLogger("freshindex.health")


class SyncObserver:
    """Hears each step of a sync and each build; subclass and override what you record (defaults: nothing).

    Arguments are ids, counts and reasons (no registry records), so any part may report and any
    observer may listen without importing the workers.
    """

    # -- a run -----------------------------------------------------------------

    def run_started(self, source: str, run: int) -> None:
        """A run was opened for ``source`` and is about to list it."""

    def run_joined(self, source: str, run: int) -> None:
        """A live run of ``source`` was already running: this plan joined it and planned nothing."""

    def listing_failed(self, source: str, run: int, error: str) -> None:
        """Listing ``source`` failed; the run was closed as ``failed``."""

    def run_planned(self, source: str, run: int, counts: Mapping[str, int]) -> None:
        """The plan: ``listed``, ``planned``, ``deleted``, ``deletions_held``, ``moved``, ``excluded``."""

    def deletions_confirmed(self, source: str, run: int, deleting: int, confirmed: int) -> None:
        """A person's confirmation let ``deleting`` deletions past the guard."""

    def deletions_held(self, source: str, run: int, reason: str, counts: Mapping[str, int]) -> None:
        """The guard held the run's deletions (``deleting``, ``live``, ``listed``, ``moved``)."""

    def run_finished(self, source: str, run: int, status: str, finished_at: dt.datetime | None,
                     documents: Mapping[str, Any]) -> None:
        """The run ended with ``status``; ``documents`` is its summary's counts by outcome."""

    def stale_task(self, task: str, run: int, changeset: int | None, why: str, stale_tasks: int,
                   context: Mapping[str, object]) -> None:
        """A task of a run that takes no more writes was fenced off (``stale_tasks``: the run's count, -1 unknown)."""

    # -- a document ------------------------------------------------------------

    def fetch_retried(self, source: str) -> None:
        """A fetch from ``source`` failed transiently and is tried again."""

    def worker_crashed(self, source: str, key: str, run: int, crashes: int) -> None:
        """An attempt on the document was left open: the process working on it died."""

    def document_abandoned(self, source: str, key: str, detail: str) -> None:
        """Past the crash limit: recorded as ``worker_crashed`` and skipped until it changes."""

    def document_failed(self, source: str, key: str, reason: str, detail: str) -> None:
        """Bad input recorded against the document (``reason``: a :class:`core.errors.DocumentError` reason)."""

    def document_skipped(self, source: str, key: str, reason: str, detail: str) -> None:
        """Nothing to index in the document, on purpose (a skip reason)."""

    def skips_recorded(self, source: str, reason: str, n: int) -> None:
        """``n`` listed keys recorded as skipped at once (the source's patterns leave them out)."""

    def acl_unresolved(self, source: str, key: str, reason: str, detail: str) -> None:
        """An unchanged document's ACL could not be resolved: it keeps its previous one and is failed."""

    def document_outcome(self, source: str, outcome: str) -> None:
        """A document's outcome without more to say (``unchanged``, ``mirrored``, ``deleted``)."""

    def ocr_read(self, source: str, pages: int, low_confidence: int) -> None:
        """A parse read ``pages`` scanned pages by OCR, ``low_confidence`` of them under the floor."""

    def embedded(self, model: str, embedded: int, reused: int, seconds: float) -> None:
        """A document's added chunks: ``embedded`` by ``model`` in ``seconds``, ``reused`` from the vector cache."""

    def tombstoned(self, kb: str, why: str, n: int) -> None:
        """``n`` tombstones staged in ``kb`` (``why``: ``superseded`` or ``deleted``)."""

    def document_staged(self, source: str, key: str, outcome: str, counts: Mapping[str, int]) -> None:
        """A change staged with ``outcome`` (``counts``: ``embedded``, ``reused``, ``tombstones``)."""

    def document_moved(self, source: str, run: int, old_key: str, new_key: str) -> None:
        """A vanished document's content reappeared under ``new_key``."""

    # -- a build ---------------------------------------------------------------

    def build_started(self, kb: str, snapshot: str, strategy: str, upserts: int, deletes: int) -> None:
        """A build of ``snapshot`` began writing (``strategy``: full, incremental or bluegreen)."""

    def swapped(self, kb: str) -> None:
        """The alias of ``kb`` was moved (a build's swap, a rollback, a roll forward)."""

    def build_finished(self, kb: str, snapshot: str, previous_collection: str | None, seconds: float) -> None:
        """``snapshot`` serves ``kb``, ``seconds`` after the build took the lock."""

    def build_failed(self, kb: str, snapshot: str, check: str, reason: str) -> None:
        """The build was held (verification ``check`` or the error's class); the last good version serves."""

    def build_abandoned(self, kb: str) -> None:
        """A version left half-built by a builder that died was failed by reconcile."""

    def standby_busy(self, kb: str, collection: str) -> None:
        """A reader still had the standby open: this build copied the active version instead of recycling."""

    def verification_failed(self, kb: str, check: str) -> None:
        """A check of a version failed outside a build (``freshindex snapshots verify``)."""

    def alias_moved(self, kb: str, snapshot: str, previous_collection: str | None, actor: str, reason: str) -> None:
        """A person moved the alias to ``snapshot`` (rollback or roll forward), after :meth:`swapped`."""


#: Every event of :class:`SyncObserver`, in declaration order.
EVENTS: tuple[str, ...] = tuple(name for name, value in vars(SyncObserver).items()
                                if callable(value) and not name.startswith("_"))


class SyncObservers(SyncObserver):
    """Several observers heard in order; an observer that raises is logged, never fails the step.

    Every event of :class:`SyncObserver` is forwarded (the methods are made from :data:`EVENTS`).
    """

    def __init__(self, *observers: SyncObserver | None) -> None:
        self.observers = tuple(o for o in observers if o is not None)

    def call(self, method: str, *args: Any, **kwargs: Any) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args, **kwargs)
            except Exception:  # a measurement must not fail the sync it measures
                log.warning("sync observer %s.%s failed", type(observer).__name__, method, exc_info=True)


def _forward(name: str) -> Callable[..., None]:
    def event(self: SyncObservers, *args: Any, **kwargs: Any) -> None:
        self.call(name, *args, **kwargs)

    event.__name__ = event.__qualname__ = name
    event.__doc__ = getattr(SyncObserver, name).__doc__
    return event


for _name in EVENTS:
    setattr(SyncObservers, _name, _forward(_name))


class MetricsObserver(SyncObserver):
    """What every sync and build records in this process: the Prometheus series and the structured log lines.

    Series, labels and log fields are those the steps wrote inline before
    (``freshindex_documents_total{source,outcome}``, ``..._tombstones_written_total{kb,reason}``,
    ``..._builds_total{kb,outcome}``, ...); each log line goes to the logger its step used.
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    # -- a run -----------------------------------------------------------------

    def run_started(self, source: str, run: int) -> None:
        pipeline_log.info("sync started", extra={"event": "sync_started", "source": source, "run": run})

    def run_joined(self, source: str, run: int) -> None:
        pipeline_log.info("sync joined", extra={"event": "sync_joined", "source": source, "run": run})

    def listing_failed(self, source: str, run: int, error: str) -> None:
        self.metrics.sync_runs.labels(source, "failed").inc()
        pipeline_log.warning("sync failed", extra={"event": "sync_list_failed", "source": source, "run": run,
                                                   "error": error})

    def run_planned(self, source: str, run: int, counts: Mapping[str, int]) -> None:
        pipeline_log.info("sync planned", extra={"event": "sync_planned", "source": source, "run": run, **counts})

    def deletions_confirmed(self, source: str, run: int, deleting: int, confirmed: int) -> None:
        pipeline_log.warning("deletions confirmed", extra={"event": "deletions_confirmed", "source": source,
                                                           "run": run, "deleting": deleting, "confirmed": confirmed})

    def deletions_held(self, source: str, run: int, reason: str, counts: Mapping[str, int]) -> None:
        self.metrics.deletions_held.labels(source).inc()
        pipeline_log.warning("deletions held", extra={"event": "deletions_held", "source": source, "run": run,
                                                      **counts, "reason": reason})

    def run_finished(self, source: str, run: int, status: str, finished_at: dt.datetime | None,
                     documents: Mapping[str, Any]) -> None:
        self.metrics.sync_runs.labels(source, status).inc()
        if status in SUCCESSFUL_RUNS and finished_at is not None:
            self.metrics.last_sync.labels(source).set(finished_at.timestamp())
        pipeline_log.info("sync finished", extra={"event": "sync_finished", "source": source, "run": run,
                                                  "status": status, **documents})

    def stale_task(self, task: str, run: int, changeset: int | None, why: str, stale_tasks: int,
                   context: Mapping[str, object]) -> None:
        self.metrics.stale_tasks.labels(task).inc()
        pipeline_log.warning("stale task fenced off", extra={"event": "stale_task", "task": task, "run": run,
                                                             "changeset": changeset, "why": why,
                                                             "stale_tasks": stale_tasks, **context})

    # -- a document ------------------------------------------------------------

    def fetch_retried(self, source: str) -> None:
        self.metrics.fetch_retries.labels(source).inc()

    def worker_crashed(self, source: str, key: str, run: int, crashes: int) -> None:
        self.metrics.worker_crashes.labels(source).inc()
        pipeline_log.warning("worker died on a document", extra={"event": "document_crashed_worker", "source": source,
                                                                 "key": key, "run": run, "crashes": crashes})

    def document_abandoned(self, source: str, key: str, detail: str) -> None:
        self.metrics.document_errors.labels(source, DocumentError.WORKER_CRASHED).inc()
        self.metrics.documents.labels(source, "failed").inc()
        pipeline_log.error("document failed", extra={"event": "document_failed", "source": source, "key": key,
                                                     "reason": DocumentError.WORKER_CRASHED, "detail": detail})

    def document_failed(self, source: str, key: str, reason: str, detail: str) -> None:
        self.metrics.document_errors.labels(source, reason).inc()
        self.metrics.documents.labels(source, "failed").inc()
        pipeline_log.warning("document failed", extra={"event": "document_failed", "source": source, "key": key,
                                                       "reason": reason, "detail": detail})

    def document_skipped(self, source: str, key: str, reason: str, detail: str) -> None:
        self.metrics.documents_skipped.labels(source, reason).inc()
        self.metrics.documents.labels(source, DocumentOutcomeKind.SKIPPED).inc()
        pipeline_log.info("document skipped", extra={"event": "document_skipped", "source": source, "key": key,
                                                     "reason": reason, "detail": detail})

    def skips_recorded(self, source: str, reason: str, n: int) -> None:
        self.metrics.documents_skipped.labels(source, reason).inc(n)

    def acl_unresolved(self, source: str, key: str, reason: str, detail: str) -> None:
        self.metrics.document_errors.labels(source, reason).inc()
        pipeline_log.warning("document ACL not resolved", extra={"event": "acl_unresolved", "source": source,
                                                                 "key": key, "reason": reason, "detail": detail})

    def document_outcome(self, source: str, outcome: str) -> None:
        self.metrics.documents.labels(source, outcome).inc()

    def ocr_read(self, source: str, pages: int, low_confidence: int) -> None:
        self.metrics.ocr_pages.labels(source).inc(pages)
        self.metrics.ocr_low_confidence_pages.labels(source).inc(low_confidence)

    def embedded(self, model: str, embedded: int, reused: int, seconds: float) -> None:
        self.metrics.chunks_embedded.labels(model).inc(embedded)
        self.metrics.chunks_reused.labels(model).inc(reused)
        self.metrics.embed_seconds.labels(model).inc(seconds)

    def tombstoned(self, kb: str, why: str, n: int) -> None:
        self.metrics.tombstones.labels(kb, why).inc(n)

    def document_staged(self, source: str, key: str, outcome: str, counts: Mapping[str, int]) -> None:
        self.metrics.documents.labels(source, outcome).inc()
        pipeline_log.debug("document staged", extra={"event": "document_staged", "source": source, "key": key,
                                                     "outcome": outcome, **counts})

    def document_moved(self, source: str, run: int, old_key: str, new_key: str) -> None:
        self.metrics.documents_moved.labels(source).inc()
        pipeline_log.info("document moved", extra={"event": "document_moved", "source": source, "run": run,
                                                   "from": old_key, "to": new_key})

    # -- a build ---------------------------------------------------------------

    def build_started(self, kb: str, snapshot: str, strategy: str, upserts: int, deletes: int) -> None:
        build_log.info("build started", extra={"event": "build_started", "kb": kb, "snapshot": snapshot,
                                               "strategy": strategy, "upserts": upserts, "deletes": deletes})

    def swapped(self, kb: str) -> None:
        self.metrics.alias_swaps.labels(kb).inc()

    def build_finished(self, kb: str, snapshot: str, previous_collection: str | None, seconds: float) -> None:
        self.metrics.builds.labels(kb, BuildStatus.BUILT).inc()
        self.metrics.build_seconds.labels(kb).observe(seconds)
        build_log.info("snapshot active", extra={"event": "snapshot_active", "kb": kb, "snapshot": snapshot,
                                                 "previous_collection": previous_collection,
                                                 "seconds": round(seconds, 3)})

    def build_failed(self, kb: str, snapshot: str, check: str, reason: str) -> None:
        self.metrics.builds.labels(kb, BuildStatus.FAILED).inc()
        self.metrics.verification_failures.labels(kb, check).inc()
        build_log.error("build held", extra={"event": "build_failed", "kb": kb, "snapshot": snapshot,
                                             "check": check, "reason": reason})

    def build_abandoned(self, kb: str) -> None:
        self.metrics.builds.labels(kb, "abandoned").inc()

    def standby_busy(self, kb: str, collection: str) -> None:
        self.metrics.standby_busy.labels(kb).inc()
        build_log.warning("a reader still has %s open: copying the active version instead of recycling it",
                          collection, extra={"event": "standby_busy", "kb": kb})

    def verification_failed(self, kb: str, check: str) -> None:
        self.metrics.verification_failures.labels(kb, check).inc()

    def alias_moved(self, kb: str, snapshot: str, previous_collection: str | None, actor: str, reason: str) -> None:
        snapshots_log.warning("alias moved", extra={"event": "alias_swapped", "kb": kb, "snapshot": snapshot,
                                                    "previous_collection": previous_collection, "actor": actor,
                                                    "reason": reason})
