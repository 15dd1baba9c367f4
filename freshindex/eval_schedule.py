"""The scheduled evaluation: each registered golden set asked on the snapshot its knowledge base serves.

Golden sets are registered per knowledge base in the registry (``freshindex golden-sets register``,
:mod:`registry.golden_sets`).  After each swap the build task sends ``freshindex.evaluate_golden_sets`` for
its knowledge base, and beat's ``evaluate-golden-sets`` tick (``schedules.eval_interval_s``) finds sets whose
knowledge base serves a snapshot they were not evaluated on (a CLI build, a rollback, a lost message); both
end in :func:`evaluate_due`, which asks every due set through :func:`freshindex.evaluation.evaluate` pinned to
that snapshot, keeps the result on the set's row and sets the ``freshindex_eval_*`` gauges of the process.

What it does not do: gate or undo a swap (the snapshot already serves; canaries gate before a swap), keep
more than the newest result of a set, or judge an LLM's answer.  Its questions are real queries, so they
count in the query metrics and the refusal audit of the process that asks them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from freshindex.core.errors import RetryableError

log = logging.getLogger("freshindex.eval_schedule")


def evaluate_set(services: Any, info: Any, snapshot_id: str, *,
                 clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """One registered set (a :class:`registry.golden_sets.GoldenSetInfo`) asked on ``snapshot_id``, recorded.

    A set that cannot be evaluated (a malformed text registered before a format change, a snapshot gone)
    is recorded as not passing, with its error, on that snapshot, so it is not retried until the next swap;
    a :class:`RetryableError` (the store or registry blinked) is raised for the task to retry.
    """
    from freshindex.evaluation import Thresholds, evaluate, parse_golden

    at = clock()
    try:
        golden = parse_golden(info.content.splitlines(), info.name)
        report = evaluate(services, golden, info.kb, snapshot=snapshot_id, limit=info.top_k,
                          thresholds=Thresholds.of(info.thresholds))
    except RetryableError:
        raise
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.warning("golden set %s of %s not evaluated: %s", info.name, info.kb, error,
                    extra={"event": "eval_failed", "kb": info.kb, "golden": info.name, "snapshot_id": snapshot_id})
        services.registry.record_golden_result(info.id, snapshot_id, passed=False, metrics=None, error=error)
        services.metrics.record_eval(info.kb, info.name, {"passed": False}, at=at, previous=info.last_metrics)
        return {"kb": info.kb, "golden": info.name, "snapshot_id": snapshot_id, "passed": False, "error": error}
    figures = report.metrics()
    services.registry.record_golden_result(info.id, snapshot_id, passed=report.passed, metrics=figures)
    services.metrics.record_eval(info.kb, info.name, {**figures, "passed": report.passed}, at=at,
                                 previous=info.last_metrics)
    log.info("golden set %s of %s evaluated on %s", info.name, info.kb, snapshot_id,
             extra={"event": "eval_done", "kb": info.kb, "golden": info.name, "snapshot_id": snapshot_id,
                    "passed": report.passed, "hit_ratio": figures["hit_ratio"],
                    "passage_ratio": figures["passage_ratio"], "failed_gates": report.failed_gates()})
    return {"kb": info.kb, "golden": info.name, "snapshot_id": snapshot_id, "passed": report.passed,
            "failed_gates": report.failed_gates(), **figures}


def evaluate_due(services: Any, kb: str | None = None, *, force: bool = False,
                 clock: Callable[[], float] = time.time) -> list[dict[str, Any]]:
    """Every registered set (of ``kb``) not yet evaluated on the snapshot its knowledge base serves, evaluated.

    ``force``: every set of a knowledge base that serves a snapshot, evaluated again.  Returns one summary
    per set asked (empty when none was due).
    """
    registry = services.registry
    if force:
        pairs = []
        for info in registry.list_golden_sets(kb):
            active = registry.active_snapshot(info.kb)
            if active is not None:
                pairs.append((info, str(active.id)))
    else:
        pairs = registry.due_golden_sets(kb)
    return [evaluate_set(services, info, snapshot_id, clock=clock) for info, snapshot_id in pairs]


__all__ = ["evaluate_due", "evaluate_set"]
