"""The end of a sync run, for the inline runner and the Celery tasks alike: finish the run
(:func:`finish_sync`), and decide and record what a build after it means (:func:`record_build`).

What it does not do: build (the builder does, :mod:`snapshots.builder`), or process a document
(:mod:`workers.pipeline`, which re-exports these names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from freshindex.core.enums import BuildStatus
from freshindex.core.errors import LockHeldError
from freshindex.registry.protocols import RunLedger
from freshindex.registry.records import SyncRunInfo
from freshindex.snapshots import BuildResult

if TYPE_CHECKING:
    from freshindex.workers.pipeline import PipelineContext


def finish_sync(ctx: PipelineContext, run_id: int) -> tuple[SyncRunInfo, bool]:
    """Finish the run; the flag is True for the one caller that finished it."""
    run, finished_now = ctx.registry.finish_sync_run(run_id)
    if not finished_now:
        return run, False
    ctx.observer.run_finished(run.source_id, run_id, run.status, run.finished_at, run.summary.get("documents", {}))
    return run, True


@dataclass(frozen=True)
class BuildRecord:
    """What the build after a run did, as recorded on the run."""

    status: BuildStatus
    reason: str | None
    snapshot_id: str | None


def record_build(registry: RunLedger, run_id: int | None, outcome: BuildResult | LockHeldError) -> BuildRecord:
    """Decide, and record on the run, what a build attempt means for it.

    The one rule the inline runner and the Celery ``build_snapshot`` task
    both follow:

    * the builder ran: its status, except that ``unchanged`` counts as
      ``built`` when an earlier build already applied this run's changeset;
    * another builder held the lock (after ``snapshots.lock_wait``): the
      build is *queued*: the run stays ``pending`` with the reason, its
      changeset stays staged, and the next build (the lock holder's
      successor, the reaper, or ``freshindex snapshots build``) applies it.
      It is not a verification failure.  The Celery shell also retries the
      task; the inline runner reports it and exits 0.

    With ``run_id`` None (a build asked for directly) nothing is recorded.
    What it does not guarantee: that a queued build is picked up before the
    run's lease (``sync.run_lease_s``) lets the reaper see it.
    """
    if isinstance(outcome, LockHeldError):
        record = BuildRecord(BuildStatus.PENDING, f"queued behind another builder: {outcome}", None)
        if run_id is not None:
            registry.set_run_build(run_id, status=record.status, snapshot_id=None, error=record.reason)
        return record
    status = BuildStatus(outcome.status)
    if run_id is not None and status is BuildStatus.UNCHANGED and registry.run_changeset_applied(run_id):
        status = BuildStatus.BUILT  # an earlier build already took this run's changes
    record = BuildRecord(status, outcome.reason, outcome.snapshot_id)
    if run_id is not None:
        registry.set_run_build(run_id, status=status, snapshot_id=outcome.snapshot_id, error=outcome.reason)
        if status is BuildStatus.BUILT and outcome.snapshot_id is not None:
            registry.record_run_lag(run_id)  # type: ignore[attr-defined]  # change observed -> visible
    return record


__all__ = ["BuildRecord", "finish_sync", "record_build"]
