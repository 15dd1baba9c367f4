"""Housekeeping on beat: tombstone garbage collection and snapshot retention.

* ``freshindex.collect_tombstones`` (every ``schedules.gc_interval_s``):
  per knowledge base, delete tombstones that no retained snapshot can need
  (:meth:`registry.Registry.collect_tombstones`: applied at or below the
  oldest version still serving or retained, and older than
  ``schedules.tombstone_retention_s``).  The tombstone backlog metric counts
  only unapplied tombstones, so GC never hides a backlog.
* ``freshindex.retain_snapshots`` (every ``schedules.retention_interval_s``):
  per knowledge base, keep ``snapshots.keep_versions`` built versions.  The
  pruning itself is the builder's (under the writer lock); schedules do not
  import snapshots, so it is passed in as ``retain``.  A knowledge base whose
  writer lock is held is skipped this pass (``retain`` raises, it is logged).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger("freshindex.gc")


class GcRegistry(Protocol):
    def knowledge_bases(self) -> list[str]: ...

    def collect_tombstones(self, kb: str, *, older_than: dt.datetime) -> int: ...


def collect_tombstones(registry: GcRegistry, *, retention_s: float, now: dt.datetime | None = None) -> dict[str, int]:
    """Tombstones deleted per knowledge base."""
    now = now or dt.datetime.now(dt.UTC)
    cutoff = now - dt.timedelta(seconds=retention_s)
    out = {}
    for kb in registry.knowledge_bases():
        n = registry.collect_tombstones(kb, older_than=cutoff)
        if n:
            log.info("tombstones collected", extra={"event": "tombstones_collected", "kb": kb, "count": n})
        out[kb] = n
    return out


def retain_snapshots(kbs: Iterable[str], retain: Callable[[str], list[str]]) -> dict[str, list[str]]:
    """Pruned snapshot ids per knowledge base; one that fails (lock held) is logged and skipped."""
    out: dict[str, list[str]] = {}
    for kb in kbs:
        try:
            out[kb] = list(retain(kb))
        except Exception as exc:  # a held lock or a store blip: the next pass tries again
            log.warning("retention skipped for %s: %s", kb, exc,
                        extra={"event": "retention_skipped", "kb": kb, "detail": str(exc)})
            continue
        if out[kb]:
            log.info("snapshots pruned", extra={"event": "snapshots_pruned", "kb": kb, "pruned": out[kb]})
    return out


__all__ = ["GcRegistry", "collect_tombstones", "retain_snapshots"]
