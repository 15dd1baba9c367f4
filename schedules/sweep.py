"""The freshness sweep: stale labels, hard expiry, end of validity, supersedes.

Runs on beat (``freshindex.sweep_freshness``, every ``schedules.sweep_interval_s``)
and from ``freshindex sources sweep``.  Per pass:

1. each source's last verified time, last successful sync and last error are
   written onto its row from its run history (an unreachable source keeps
   serving its last good snapshot; :meth:`registry.Registry.source_freshness`
   labels it stale with ``last_verified_at``);
2. every document past its ``valid_until``, of a source unverified for its
   ``hard_expiry_s``, or superseded by a document now valid, is withdrawn:
   its chunks tombstoned at once (the query path stops serving them now) and
   their deletion staged, so the next build removes them.

3. mirrors whose canonical document changed or went are made to be re-read
   (``resync`` names their sources; the beat task enqueues those syncs), and
   identical copies indexed twice (two workers at once) are merged into one
   canonical document with mirrors.

What it does not do: build.  The withdrawal is visible at once through the
query path's recheck; the points leave the collection with the next build
(any sync's, the reaper's, or ``freshindex snapshots build``).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from freshindex.health.metrics import Metrics
from freshindex.registry.freshness import SourceFreshness
from freshindex.registry.withdrawals import Withdrawn

log = logging.getLogger("freshindex.sweep")


class SweepRegistry(Protocol):
    def refresh_source_freshness(self, now: dt.datetime | None = None) -> list[SourceFreshness]: ...

    def withdraw_due_documents(self, now: dt.datetime | None = None) -> list[Withdrawn]: ...

    def rehome_mirrors(self) -> list[tuple[str, str]]: ...

    def merge_twins(self, now: dt.datetime | None = None) -> list[Withdrawn]: ...


@dataclass(frozen=True)
class SweepReport:
    sources: tuple[SourceFreshness, ...] = ()
    withdrawn: tuple[Withdrawn, ...] = field(default_factory=tuple)
    #: (source, key) of mirrors whose canonical document changed or went: re-read by the next sync.
    rehomed: tuple[tuple[str, str], ...] = ()

    @property
    def resync(self) -> list[str]:
        """Sources to sync now so re-homed mirrors serve again (the beat task enqueues them)."""
        return sorted({source for source, _key in self.rehomed})

    @property
    def stale(self) -> list[str]:
        return [f.source_id for f in self.sources if f.stale and not f.removed]

    def as_dict(self) -> dict[str, Any]:
        return {"stale": self.stale, "withdrawn": [w.__dict__ for w in self.withdrawn],
                "rehomed": [list(r) for r in self.rehomed], "resync": self.resync}


def sweep(registry: SweepRegistry, *, metrics: Metrics | None = None, now: dt.datetime | None = None) -> SweepReport:
    """One freshness pass (idempotent: a second pass at the same time withdraws nothing)."""
    now = now or dt.datetime.now(dt.UTC)
    sources = registry.refresh_source_freshness(now)
    withdrawn = registry.withdraw_due_documents(now)
    rehomed = registry.rehome_mirrors()
    withdrawn = [*withdrawn, *registry.merge_twins(now)]
    kb_of = {f.source_id: f.kb for f in sources}
    for w in withdrawn:
        if metrics is not None and w.chunks:
            metrics.tombstones.labels(kb_of.get(w.source_id, ""), w.reason).inc(w.chunks)
        log.warning("document withdrawn", extra={"event": "document_withdrawn", "source": w.source_id, "key": w.key,
                                                 "reason": w.reason, "chunks": w.chunks})
    for f in sources:
        if f.stale and not f.removed:
            log.info("source stale", extra={"event": "source_stale", "source": f.source_id, "kb": f.kb,
                                            "reason": f.stale_reason, "last_verified_at": str(f.last_verified_at)})
    for source, key in rehomed:
        log.info("mirror re-homed", extra={"event": "mirror_rehomed", "source": source, "key": key})
    return SweepReport(tuple(sources), tuple(withdrawn), tuple(rehomed))


__all__ = ["SweepRegistry", "SweepReport", "sweep"]
