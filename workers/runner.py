"""Run a whole sync (plan, documents, finish, build) and report it.

Two dispatchers run the same pipeline functions:

* :func:`sync_inline`: in this process, one document after another.  The
  embedded default: no broker, and the one process that opens the embedded
  vector store is the one that writes it.
* :func:`sync_distributed`: enqueue ``sync_source`` on the broker and follow
  the run in the registry until its build settles; Celery workers do the work.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.enums import SUCCESSFUL_RUNS, BuildStatus, DocumentOutcomeKind, RunStatus
from freshindex.core.errors import FreshIndexError, LockHeldError, RetryableError, StaleTaskError
from freshindex.core.exit_codes import ExitCode
from freshindex.registry import DocumentErrorInfo, SnapshotInfo, SyncRunInfo
from freshindex.registry.runs import lease_alive
from freshindex.schedules.reaper import Heartbeat
from freshindex.snapshots import BuildResult
from freshindex.workers import pipeline, planner
from freshindex.workers.batch import RunBatch
from freshindex.workers.ports import RunnerServices
from freshindex.workers.steps.pool import LinePool, portable, usable_cores

log = logging.getLogger("freshindex.runner")

Progress = Callable[[int, int, str], None]

#: Kept for callers that import the names; the codes live in :class:`core.exit_codes.ExitCode`.
EXIT_OK, EXIT_NOTHING_INDEXED, EXIT_BUILD_HELD = ExitCode.OK, ExitCode.FAILED, ExitCode.VERIFICATION_HELD
EXIT_DELETIONS_HELD = ExitCode.DELETIONS_HELD


#: At most this many skipped documents are listed in a sync report (all of them: ``documents list --skipped``).
MAX_LISTED = 100


def _by_reason(items: tuple[DocumentErrorInfo, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in items:
        out[e.reason] = out.get(e.reason, 0) + 1
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class SyncReport:
    source_id: str
    run: SyncRunInfo
    snapshot: SnapshotInfo | None
    build_status: str
    build_reason: str | None
    errors: tuple[DocumentErrorInfo, ...] = field(default_factory=tuple)
    seconds: float = 0.0
    #: This request found a live run of the source and followed it instead
    #: of opening its own: ``run`` (and the exit code) is that run's.
    joined: bool = False
    #: Documents this run recorded as skipped (excluded, empty, no parser), with the reason: not errors.
    skipped: tuple[DocumentErrorInfo, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> ExitCode:
        """The process exit code for this sync (a queued build, ``pending``, is OK)."""
        if self.run.status == RunStatus.FAILED:
            return ExitCode.FAILED
        if self.run.status == RunStatus.HELD:
            return ExitCode.DELETIONS_HELD
        if self.build_status == BuildStatus.FAILED:
            return ExitCode.VERIFICATION_HELD
        return ExitCode.OK

    def _pending_deletion(self) -> dict[str, Any] | None:
        held = self.run.summary.get("held") if self.run.status == RunStatus.HELD else None
        if not held:
            return None
        return {"documents": int(held.get("deletions", 0)), "keys": list(held.get("keys") or [])}

    def as_dict(self) -> dict[str, Any]:
        s = self.run.summary
        snap = self.snapshot
        return {
            "source": self.source_id,
            "run_id": self.run.id,
            "joined": self.joined,
            "status": self.run.status,
            "documents": s.get("documents", {}),
            "documents_changed": s.get("documents_changed", 0),
            "chunks_embedded": s.get("chunks_embedded", 0),
            "chunks_reused": s.get("chunks_reused", 0),
            "chunks_unchanged": s.get("chunks_kept", 0),
            "chunks_moved": s.get("chunks_moved", 0),
            "rechunked": s.get("rechunked", {}),
            "tombstones_written": s.get("tombstones", 0),
            "build": {
                "status": self.build_status,
                "reason": self.build_reason,
                "snapshot_id": snap.id if snap else None,
                "strategy": snap.strategy if snap and self.build_status == BuildStatus.BUILT else None,
                "point_count": snap.point_count if snap else 0,
            },
            "active_snapshot": snap.id if snap else None,
            "errors": [
                {"key": e.key, "reason": e.reason, "detail": e.detail} for e in self.errors
            ],
            "skipped": [{"key": e.key, "reason": e.reason, "detail": e.detail} for e in self.skipped[:MAX_LISTED]],
            "skipped_by_reason": _by_reason(self.skipped),
            # Documents whose content reappeared under a new key: the old key went in this build.
            "moves": list(s.get("moves") or []),
            # A crawl cut short by a bound or deadline (nothing it did not reach was deleted).
            "listing_truncated": s.get("listing_truncated"),
            # The deletion guard held these: they keep serving, labelled "pending deletion" in the context.
            "pending_deletion": self._pending_deletion(),
            "seconds": round(self.seconds, 3),
            "error": self.run.error,
            "ended": describe_end(self.run),
            "held_reason": self.run.held_reason,
        }


def sync_inline(svc: RunnerServices, source_id: str, *, trigger: str = "cli", progress: Progress | None = None,
                build: bool = True, poll: float = 0.25) -> SyncReport:
    """Sync ``source_id`` in this process, or follow the live run another sync opened.

    One sync per source at a time (:meth:`registry.Registry.open_or_join_run`):
    when a run of the source is running and renewing its lease, this call
    opens nothing and waits for that run to end (build included), then
    reports it with ``joined=True``.  If the joined run stops renewing its
    lease before it ends, this call syncs the source itself.  While this
    process works on its own run it renews the run's heartbeat.
    """
    started = time.perf_counter()
    ctx = svc.pipeline
    _reap(svc, None)  # close runs whose process died, build what they staged
    plan = planner.plan_sync(ctx, source_id, trigger=trigger)
    if plan.joined:
        joined = _follow_joined(svc, plan.run_id, progress=progress, poll=poll)
        if joined is None:  # it died: do the work here (its changes are adopted)
            return sync_inline(svc, source_id, trigger=trigger, progress=progress, build=build, poll=poll)
        snapshot = (svc.registry.get_snapshot(joined.snapshot_id) if joined.snapshot_id
                    else svc.registry.active_snapshot(joined.kb))
        log.info("sync joined a running run", extra={"event": "sync_joined", "source": source_id,
                                                      "run": joined.id, "status": joined.status})
        return SyncReport(
            source_id=source_id, run=joined, snapshot=snapshot, build_status=joined.build_status or "none",
            build_reason=joined.build_error, errors=tuple(svc.registry.document_errors(run_id=joined.id)),
            skipped=tuple(svc.registry.document_skips(run_id=joined.id)),
            seconds=time.perf_counter() - started, joined=True,
        )
    total = len(plan.documents)
    status: str = BuildStatus.SKIPPED
    reason: str | None = None
    with Heartbeat(svc.registry, plan.run_id, svc.settings.sync.heartbeat_interval_s):
        stale = None
        # The next documents are fetched, parsed, chunked and embedded in threads while this one is staged
        # (workers/ahead.py), so the model works while this loop writes the registry; with a pool of
        # processes (pipeline.processes) four documents ahead per process, so parsing uses every core, and
        # further while documents found unchanged ahead wait for the loop (ParseAhead.wants).
        ahead = _working_ahead(svc, ctx, total)
        # The run's refusal, source and records read, and unchanged documents' touches written, a batch at a time.
        batch = RunBatch(svc.registry, plan.run_id, plan.changeset_id, source_id, [d.key for d in plan.documents])
        batch.sidecars = plan.sidecars  # ACL resolution reads only the sidecars the listing saw
        ctx = dataclasses.replace(ctx, ahead=ahead, batch=batch)
        queued = 1  # the next document to hand ahead (the first is the loop's own)
        try:
            for n, doc in enumerate(plan.documents, start=1):
                while ahead is not None and queued < total and ahead.wants(queued - n):
                    nxt = plan.documents[queued]
                    ahead.submit(ctx, source_id, nxt.key, run_id=plan.run_id, etag=nxt.etag,
                                 media_type=nxt.media_type, size=nxt.size or 0)
                    queued += 1
                outcome = pipeline.process_document(ctx, pipeline.DocumentTask(
                    plan.run_id, plan.changeset_id, source_id, doc.key, doc.etag, doc.size, doc.media_type))
                if outcome.outcome == DocumentOutcomeKind.STALE:
                    # Another process closed this run (it looked dead to it):
                    # every further write would be refused too.
                    stale = outcome.error_detail
                    break
                if progress:
                    progress(n, total, doc.key)
            if stale is None:
                stale = _write_held(ctx, batch)
            else:
                batch.drop()  # refused: nothing more is written, the held documents' attempts closed
        except BaseException as exc:
            if ahead is not None:
                ahead.abandon()  # not waited for: a thread may be sitting out a remote model's Retry-After
            batch.release()  # the touches held, written if the registry takes them: as each was before
            _close_aborted(svc, plan.run_id, exc)
            raise
        if ahead is not None:
            ahead.discard()
        if stale is None:
            run, _ = pipeline.finish_sync(ctx, plan.run_id)
            if build:
                status, reason = _build(svc, plan.kb, plan.run_id)
            else:
                # Settled on purpose: a joiner stops waiting, the reaper does not build it.
                svc.registry.set_run_build(plan.run_id, status=BuildStatus.SKIPPED, snapshot_id=None)
        else:
            reason = f"not built here: {stale}"
    run = svc.registry.get_sync_run(plan.run_id)
    return SyncReport(
        source_id=source_id, run=run, snapshot=svc.registry.active_snapshot(plan.kb), build_status=status,
        build_reason=reason, errors=tuple(svc.registry.document_errors(run_id=plan.run_id)),
        skipped=tuple(svc.registry.document_skips(run_id=plan.run_id)),
        seconds=time.perf_counter() - started,
    )


def _write_held(ctx: pipeline.PipelineContext, batch: RunBatch) -> str | None:
    """Write the touches ``batch`` holds, before the run is finished; why not when the run no longer takes them."""
    try:
        batch.flush()
    except StaleTaskError as exc:
        pipeline.record_stale(ctx, "sync_inline", exc, source=batch.source_id)
        return exc.why
    return None


def _working_ahead(svc: RunnerServices, ctx: pipeline.PipelineContext, total: int) -> pipeline.ParseAhead | None:
    """The working-ahead threads of an inline sync (``sync.parse_ahead``), with a pool of
    ``pipeline.processes`` processes (0: the usable cores) that runs the document line when it is more than
    one, the sync plans at least ``pipeline.pool_min_documents`` and the line pickles
    (:func:`workers.steps.pool.portable`); else threads only, as with 1."""
    if not svc.settings.sync.parse_ahead or total <= 1:
        return None
    processes = svc.settings.pipeline.processes or usable_cores()
    pool = None
    if processes > 1 and total >= svc.settings.pipeline.pool_min_documents:
        if portable(ctx.line):
            pool = LinePool(min(processes, total - 1))
            if not pool.works():
                pool.close(wait=False)
                pool = None
                log.warning("document line parsed in threads: its worker processes did not start or read with "
                            "other parsers", extra={"event": "parse_pool_off"})
        else:
            log.info("document line parsed in threads: it does not pickle into processes (a chunker counting "
                     "with the embedder's own tokenizer)", extra={"event": "parse_pool_off"})
    return pipeline.ParseAhead(embed=True, pool=pool)


def _follow_joined(svc: RunnerServices, run_id: int, *, progress: Progress | None, poll: float) -> SyncRunInfo | None:
    """Wait for a run another process works on to end (its build settled).

    Returns the ended run, or None once the run stopped renewing its lease
    (heartbeat, or start/finish before the first beat, older than
    ``sync.run_lease_s``) without ending.
    """
    lease = svc.settings.sync.run_lease_s
    last = -1
    while True:
        run = svc.registry.get_sync_run(run_id)
        if run.done or run.status not in (RunStatus.RUNNING, *SUCCESSFUL_RUNS, RunStatus.FAILED):
            return run  # ended, or parked (held) for a person: report it as it is
        done, planned = svc.registry.run_progress(run_id)
        if progress and done != last:
            progress(done, planned, "")
            last = done
        if not lease_alive(run, now=dt.datetime.now(dt.UTC), lease_s=lease):
            log.warning("joined run stopped renewing its lease", extra={"event": "joined_run_stalled",
                                                                        "run": run_id, "worker": run.worker})
            return None
        time.sleep(poll)


def _close_aborted(svc: RunnerServices, run_id: int, exc: BaseException) -> None:
    """Close a run whose inline loop raised (registry down, a bug, Ctrl-C) as ``failed``.

    Fetch errors never get here (they are recorded per document).  Without
    this the run would stay ``running`` and its source would look busy until
    its lease ran out.  Best effort: if the registry itself is down, the
    lease (``sync.run_lease_s``) is what frees the source.
    """
    error = f"inline sync aborted: {type(exc).__name__}: {exc}"
    try:
        run, finished_now = svc.registry.finish_sync_run(run_id, error=error)
        svc.registry.set_run_build(run_id, status=BuildStatus.FAILED, snapshot_id=None, error=error)
        if finished_now:
            svc.metrics.sync_runs.labels(run.source_id, "failed").inc()
    except RetryableError as down:  # the registry is down or full: one line, the lease frees the source
        log.warning("could not close aborted run %s: %s", run_id, down,
                    extra={"event": "sync_abort_unrecorded", "run": run_id})
        log.debug("could not close aborted run %s", run_id, exc_info=True)  # a registry's own bug shows here
    except Exception:
        log.exception("could not close aborted run %s", run_id)
    log.error("sync aborted", extra={"event": "sync_aborted", "run": run_id, "error": error})


def _build(svc: RunnerServices, kb: str, run_id: int) -> tuple[str, str | None]:
    """Build after an inline run and record it (:func:`pipeline.record_build` decides what it means).

    A lock held by another builder (after ``snapshots.lock_wait``) queues
    the build instead of failing it: the report says ``pending`` with the
    reason and the sync exits 0; exit 3 stays reserved for verification.
    """
    try:
        outcome: BuildResult | LockHeldError = svc.builder.build(kb, actor="cli", reason=f"sync run {run_id}")
    except LockHeldError as exc:
        outcome = exc
        log.warning("build queued behind another builder", extra={"event": "build_queued", "kb": kb,
                                                                  "run": run_id, "reason": str(exc)})
    record = pipeline.record_build(svc.registry, run_id, outcome)
    if record.status == "built":
        _evaluate_after_swap(svc, kb)
    return record.status, record.reason


def _evaluate_after_swap(svc: RunnerServices, kb: str) -> None:
    """The golden sets registered on ``kb``, asked on the snapshot this sync just swapped to (as the build
    task sends them on a worker); a failure is logged, never the sync's: its snapshot already serves."""
    try:
        svc.evaluate_golden_sets(kb)
    except Exception:
        log.exception("golden sets of %s not evaluated after the swap", kb)


def sync_distributed(svc: RunnerServices, app: Any, source_id: str, *, trigger: str = "cli", timeout: float = 3600.0,
                     progress: Progress | None = None, poll: float = 0.25,
                     on_poll: Callable[[SyncRunInfo], None] | None = None) -> SyncReport:
    """Enqueue a sync on the broker and follow its run until it ends.

    Returns as soon as the run ends, however it ends: finished with its
    build settled (built, unchanged, failed), held, failed, closed by the
    reaper ("worker lost") or abandoned (a later run adopted its changes);
    ``SyncReport.as_dict()["ended"]`` says which.  While following, a run
    whose lease (``sync.run_lease_s``) runs out is handed to the reaper from
    here, so recovery from a dead worker does not wait for beat.  Raises
    :class:`FreshIndexError` only if the run is still going after ``timeout``.
    ``on_poll`` sees the run as read at every poll (the CLI shows the build's
    stages from it).
    """
    from freshindex.workers.names import TaskName

    started = time.perf_counter()
    svc.registry.get_source(source_id)  # fail fast on an unknown source
    lease = svc.settings.sync.run_lease_s
    _reap(svc, app)
    before = max((r.id for r in svc.registry.sync_runs(source_id, limit=1)), default=0)
    # report=True: the result says whether the task joined a live run of the source.
    async_result = app.send_task(str(TaskName.SYNC_SOURCE), args=[source_id, trigger], kwargs={"report": True})
    deadline = time.monotonic() + timeout
    run_id = _await_run(svc, async_result, source_id, before, deadline, poll)
    last, next_check = -1, time.monotonic() + lease
    while True:
        try:
            run = svc.registry.get_sync_run(run_id)
            done, planned = svc.registry.run_progress(run_id)
        except RetryableError as exc:  # the registry blinked: keep following
            log.warning("cannot read run %s: %s", run_id, exc)
            time.sleep(max(poll, 1.0))
            continue
        if progress and done != last:
            progress(done, planned, "")
            last = done
        if on_poll is not None:
            on_poll(run)
        if run.status != RunStatus.RUNNING and run.build_status != BuildStatus.PENDING:
            break
        now = time.monotonic()
        if now >= next_check:
            next_check = now + max(1.0, lease / 4)
            if _reap(svc, app, only=run_id):
                log.warning("followed run stalled; reaped", extra={"event": "run_stalled", "run": run_id,
                                                                   "source": source_id, "worker": run.worker})
        if now > deadline:
            raise FreshIndexError(f"sync run {run_id} did not finish within {timeout:.0f}s (still {run.status})")
        time.sleep(poll)
    snapshot = svc.registry.get_snapshot(run.snapshot_id) if run.snapshot_id else svc.registry.active_snapshot(run.kb)
    log.info("sync followed to its end", extra={"event": "sync_followed", "run": run_id, "source": source_id,
                                                 "ended": describe_end(run)})
    return SyncReport(
        source_id=source_id, run=run, snapshot=snapshot, build_status=run.build_status or "none",
        build_reason=run.build_error, errors=tuple(svc.registry.document_errors(run_id=run_id)),
        skipped=tuple(svc.registry.document_skips(run_id=run_id)),
        seconds=time.perf_counter() - started, joined=_joined(async_result, run_id),
    )


def _result_run_id(value: Any) -> int:
    # sync_source(report=True) answers {"run_id", "joined"}; an older worker the bare id.
    return int(value["run_id"]) if isinstance(value, dict) else int(value)


def _joined(async_result: Any, run_id: int) -> bool:
    """Whether our ``sync_source`` joined ``run_id`` instead of opening it.

    Known only from the task's result; when the result backend cannot say
    (an older worker, the backend away) the report says not joined.
    """
    try:
        value = async_result.get(timeout=5, propagate=False)
    except Exception:
        return False
    return isinstance(value, dict) and bool(value.get("joined")) and _result_run_id(value) == run_id


def _await_run(svc: RunnerServices, async_result: Any, source_id: str, before: int, deadline: float,
               poll: float) -> int:
    """The id of the run our ``sync_source`` opened: from its result, or from
    the registry as soon as the run appears (its worker may die before it
    can return; the run is then recovered by lease like any other)."""
    while True:
        newer = [r.id for r in svc.registry.sync_runs(source_id, limit=1) if r.id > before]
        if newer:
            return newer[0]
        try:
            ready = async_result.ready()
        except Exception as exc:  # the result backend is away: the registry still answers
            log.warning("result backend unreachable: %s", exc)
            ready = False
        if ready:
            try:
                return _result_run_id(async_result.get(timeout=5, propagate=True))
            except FreshIndexError:
                raise
            except Exception as exc:
                raise FreshIndexError(f"sync task failed: {exc}") from exc
        if time.monotonic() > deadline:
            raise FreshIndexError(f"the sync of {source_id} did not start within the timeout")
        time.sleep(poll)


def _reap(svc: RunnerServices, app: Any | None, *, only: int | None = None) -> bool:
    """Recover stalled runs before (or while) a sync runs; never fails the sync.

    With ``only``, reap only if that run is among the stalled; returns
    whether anything was reaped.  ``app`` None: embedded mode (build here,
    close what cannot be resumed).
    """
    from freshindex.schedules.reaper import ReapActions, reap
    from freshindex.workers.names import enqueue_actions

    try:
        lease = svc.settings.sync.run_lease_s
        if only is not None and all(r.id != only for r in svc.registry.stalled_runs(lease)):
            return False
        def build_here(kb: str, run_id: int) -> None:
            _build(svc, kb, run_id)

        actions = enqueue_actions(app) if app is not None else ReapActions(build=build_here)
        return bool(reap(svc.registry, actions, lease_s=lease, metrics=svc.metrics).reaped)
    except Exception as exc:  # a broker or registry blip: the next check (or beat) tries again
        log.warning("reaping stalled runs failed: %s", exc, exc_info=not isinstance(exc, RetryableError))
        log.debug("reaping stalled runs failed", exc_info=True)
        return False


def describe_end(run: SyncRunInfo) -> str:
    """How a run ended, in a few words (``succeeded``, ``failed: worker lost ...``)."""
    if run.status == RunStatus.RUNNING:
        return str(RunStatus.RUNNING)
    how = run.status
    if run.error and run.error.startswith("abandoned"):
        how = "abandoned"
    detail = run.held_reason or run.error
    if run.status not in (RunStatus.FAILED, RunStatus.HELD) or not detail:
        detail = f"build {run.build_status}" + (f": {run.build_error}" if run.build_error else "")
    return f"{how}: {detail}"
