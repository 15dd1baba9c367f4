"""Per-query stage timing: the fixed set of stages a query's time is reported in, and the timer that reports it.

:class:`StageTimer` hands each stage's seconds to a sink (the
``freshindex_query_seconds`` histogram); a sink that raises is logged and
ignored.  What it does not do: decide what a stage of the query line is
(:mod:`injection.stages` lists those; these are the coarser metric labels).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["QUERY_STAGES", "StageSink", "StageTimer"]

log = logging.getLogger("freshindex.injection")

#: The stages a query's time is reported in (the ``stage`` label of ``freshindex_query_seconds``: a fixed set).
QUERY_STAGES = ("embed", "search", "recheck", "compose", "total")

#: (stage, seconds): one query's time in one stage of :data:`QUERY_STAGES`; must not raise.
StageSink = Callable[[str, float], None]


class StageTimer:
    """Times the stages of one query for a :data:`StageSink` (None: nothing is timed or reported).

    Why a class: the client times embed, search and recheck, :func:`compose`
    times itself, and a sink that raises must never fail a query (it is
    logged and ignored).
    """

    def __init__(self, sink: StageSink | None) -> None:
        self.sink = sink

    def report(self, stage: str, seconds: float) -> None:
        if self.sink is None:
            return
        if stage not in QUERY_STAGES:
            raise ValueError(f"unknown query stage {stage!r}; one of {', '.join(QUERY_STAGES)}")
        try:
            self.sink(stage, seconds)
        except Exception:  # a metrics sink must not fail the query it measures
            log.warning("the query stage sink failed for %s", stage, exc_info=True)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.report(name, time.perf_counter() - t0)
