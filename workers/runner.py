"""Run a whole sync (plan, documents, finish, build) and report it.

Two dispatchers run the same pipeline functions:

* :func:`sync_inline`: in this process, one document after another.  The
  embedded default: no broker, and the one process that opens the embedded
  vector store is the one that writes it.
* :func:`sync_distributed`: enqueue ``sync_source`` on the broker and follow
  the run in the registry until its build settles; Celery workers do the work.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import FreshIndexError, LockHeldError
from registry import DocumentErrorInfo, SnapshotInfo, SyncRunInfo
from snapshots import BuildResult
from workers import pipeline
from workers.services import Services

log = logging.getLogger("freshindex.runner")

Progress = Callable[[int, int, str], None]

EXIT_OK, EXIT_NOTHING_INDEXED, EXIT_BUILD_HELD = 0, 1, 3


@dataclass(frozen=True)
class SyncReport:
    source_id: str
    run: SyncRunInfo
    snapshot: SnapshotInfo | None
    build_status: str
    build_reason: str | None
    errors: tuple[DocumentErrorInfo, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.run.status == "failed":
            return EXIT_NOTHING_INDEXED
        if self.build_status == "failed":
            return EXIT_BUILD_HELD
        return EXIT_OK

    def as_dict(self) -> dict[str, Any]:
        s = self.run.summary
        snap = self.snapshot
        return {
            "source": self.source_id,
            "run_id": self.run.id,
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
                "strategy": snap.strategy if snap and self.build_status == "built" else None,
                "point_count": snap.point_count if snap else 0,
            },
            "active_snapshot": snap.id if snap else None,
            "errors": [
                {"key": e.key, "reason": e.reason, "detail": e.detail} for e in self.errors
            ],
            "seconds": round(self.seconds, 3),
            "error": self.run.error,
        }


def sync_inline(svc: Services, source_id: str, *, trigger: str = "cli", progress: Progress | None = None,
                build: bool = True) -> SyncReport:
    started = time.perf_counter()
    ctx = svc.pipeline
    plan = pipeline.plan_sync(ctx, source_id, trigger=trigger)
    total = len(plan.documents)
    for n, doc in enumerate(plan.documents, start=1):
        pipeline.process_document(ctx, plan.run_id, plan.changeset_id, source_id, doc.key, doc.etag, doc.size)
        if progress:
            progress(n, total, doc.key)
    run, _ = pipeline.finish_sync(ctx, plan.run_id)
    status, reason = "skipped", None
    if build:
        status, reason = _build(svc, plan.kb, plan.run_id)
    run = svc.registry.get_sync_run(plan.run_id)
    return SyncReport(
        source_id=source_id, run=run, snapshot=svc.registry.active_snapshot(plan.kb), build_status=status,
        build_reason=reason, errors=tuple(svc.registry.document_errors(run_id=plan.run_id)),
        seconds=time.perf_counter() - started,
    )


def _build(svc: Services, kb: str, run_id: int) -> tuple[str, str | None]:
    try:
        result: BuildResult = svc.builder.build(kb, actor="cli", reason=f"sync run {run_id}")
    except LockHeldError as exc:
        svc.registry.set_run_build(run_id, status="failed", snapshot_id=None, error=str(exc))
        return "failed", str(exc)
    status = result.status
    if status == "unchanged" and svc.registry.run_changeset_applied(run_id):
        status = "built"
    svc.registry.set_run_build(run_id, status=status, snapshot_id=result.snapshot_id, error=result.reason)
    return status, result.reason


def sync_distributed(svc: Services, app: Any, source_id: str, *, trigger: str = "cli", timeout: float = 3600.0,
                     progress: Progress | None = None, poll: float = 0.25) -> SyncReport:
    """Enqueue a sync on the broker and wait for its build to settle."""
    from workers.app import TaskName

    started = time.perf_counter()
    svc.registry.get_source(source_id)  # fail fast on an unknown source
    async_result = app.send_task(str(TaskName.SYNC_SOURCE), args=[source_id, trigger])
    try:
        run_id = int(async_result.get(timeout=timeout, propagate=True))
    except FreshIndexError:
        raise
    except Exception as exc:
        raise FreshIndexError(f"sync task failed: {exc}") from exc
    deadline = time.monotonic() + timeout
    last = -1
    while True:
        run = svc.registry.get_sync_run(run_id)
        done, planned = svc.registry.run_progress(run_id)
        if progress and done != last:
            progress(done, planned, "")
            last = done
        if run.done:
            break
        if time.monotonic() > deadline:
            raise FreshIndexError(f"sync run {run_id} did not finish within {timeout:.0f}s (still {run.status})")
        time.sleep(poll)
    snapshot = svc.registry.get_snapshot(run.snapshot_id) if run.snapshot_id else svc.registry.active_snapshot(run.kb)
    return SyncReport(
        source_id=source_id, run=run, snapshot=snapshot, build_status=run.build_status or "unknown",
        build_reason=run.build_error, errors=tuple(svc.registry.document_errors(run_id=run_id)),
        seconds=time.perf_counter() - started,
    )
