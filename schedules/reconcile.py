"""Reconciliation between the registry and the index: orphans both ways, withdrawn and counted.

On beat (``freshindex.reconcile_index``, every ``schedules.reconcile_interval_s``),
per knowledge base with an active snapshot, under its writer
lock (so no swap happens in between): the active collection's point ids are
compared with the registry (:meth:`registry.Registry.reconcile_index`).
A point without a live registry row is withdrawn (delete staged, removed by
the next build; the query path already drops it); a live chunk missing from
the index makes its document re-read by the next sync.

Schedules import neither the vector store nor the builder: the caller passes
``point_ids(kb)`` (the active collection's ids) and ``locked(kb)`` (a
context manager holding the writer lock).  A knowledge base whose lock is
held is skipped this pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from freshindex.health.metrics import Metrics

log = logging.getLogger("freshindex.reconcile")


class ReconcileRegistry(Protocol):
    def knowledge_bases(self) -> list[str]: ...

    def reconcile_index(self, kb: str, point_ids: Iterable[str]) -> dict[str, Any]: ...


def reconcile(registry: ReconcileRegistry, *, point_ids: Callable[[str], Iterable[str] | None],
              locked: Callable[[str], AbstractContextManager[Any]],
              metrics: Metrics | None = None) -> dict[str, dict[str, Any]]:
    """Per knowledge base: the counts of :meth:`registry.Registry.reconcile_index` (or ``skipped``).

    With ``metrics``, the orphans found are added to
    ``freshindex_reconcile_orphans_total`` by direction (``index``, ``registry``).
    """
    out: dict[str, dict[str, Any]] = {}
    for kb in registry.knowledge_bases():
        try:
            with locked(kb):
                ids = point_ids(kb)
                if ids is None:
                    continue  # no active snapshot yet
                report = registry.reconcile_index(kb, ids)
        except Exception as exc:  # a held lock or a store blip: the next pass tries again
            log.warning("reconciliation skipped for %s: %s", kb, exc,
                        extra={"event": "reconcile_skipped", "kb": kb, "detail": str(exc)})
            out[kb] = {"kb": kb, "skipped": str(exc)}
            continue
        out[kb] = report
        if metrics is not None:
            for direction in ("index", "registry"):
                metrics.reconcile_orphans.labels(kb, direction).inc(int(report.get(f"{direction}_orphans") or 0))
        if report["index_orphans"] or report["registry_orphans"]:
            log.warning("orphans withdrawn", extra={"event": "orphans_withdrawn", "kb": kb,
                                                    "index_orphans": report["index_orphans"],
                                                    "registry_orphans": report["registry_orphans"]})
    return out


__all__ = ["ReconcileRegistry", "reconcile"]
