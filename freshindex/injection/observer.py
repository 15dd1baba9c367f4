"""One observer for everything a query tells the outside: metrics, the denial audit, benches.

:class:`InjectionClient` calls a :class:`QueryObserver` at fixed points of
every retrieval, whichever path asked (the library, the CLI, ``serve``, the
MCP tool), so a per-query metric or audit is one method of one class:
override it in the observer the composition root builds
(``freshindex.services.ServiceObserver``) and every path has it. The
methods do nothing by default.

Every method but :meth:`QueryObserver.denied` is a measurement: one that
raises is logged and the query goes on (:meth:`Observers.call`).  ``denied``
feeds the audit trail, which must not be lost quietly: it raises through.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from freshindex.acl.access import DenialRecord
    from freshindex.injection.refusal import RefusalReason, Signals
    from freshindex.injection.types import ContextPacket

__all__ = ["Observers", "QueryObserver"]

log = logging.getLogger("freshindex.injection")


class QueryObserver:
    """Hears each query; subclass and override what you record (every method defaults to nothing)."""

    def stage(self, stage: str, seconds: float) -> None:
        """A stage of the query took ``seconds`` (embed, search, recheck, compose, total)."""

    def denied(self, records: Sequence[DenialRecord]) -> None:
        """Hits the caller may not read (the audit trail). Raising fails the query: audits are not dropped."""

    def empty_recall(self, kb: str) -> None:
        """The engine found hits but none the caller may read."""

    def decided(self, kb: str, reason: RefusalReason | None, signals: Signals | None) -> None:
        """The refusal's decision: ``reason`` None when the question is answered; ``signals`` when computed."""

    def insufficient(self, kb: str, nearest_source: str | None, reason: RefusalReason) -> None:
        """An insufficient-evidence packet, with the registry source of the nearest readable candidate."""

    def finished(self, kb: str, packet: ContextPacket) -> None:
        """The packet the caller gets (answered or not), its ``withheld`` counts included."""


class Observers(QueryObserver):
    """Several observers heard in order; a measurement that fails is logged, never fails the query."""

    def __init__(self, *observers: QueryObserver | None) -> None:
        self.observers = tuple(o for o in observers if o is not None)

    def call(self, method: str, *args: object) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args)
            except Exception:  # a measurement must not fail the query it measures
                log.warning("query observer %s.%s failed", type(observer).__name__, method, exc_info=True)

    def stage(self, stage: str, seconds: float) -> None:
        self.call("stage", stage, seconds)

    def denied(self, records: Sequence[DenialRecord]) -> None:
        for observer in self.observers:
            observer.denied(records)

    def empty_recall(self, kb: str) -> None:
        self.call("empty_recall", kb)

    def decided(self, kb: str, reason: RefusalReason | None, signals: Signals | None) -> None:
        self.call("decided", kb, reason, signals)

    def insufficient(self, kb: str, nearest_source: str | None, reason: RefusalReason) -> None:
        self.call("insufficient", kb, nearest_source, reason)

    def finished(self, kb: str, packet: ContextPacket) -> None:
        self.call("finished", kb, packet)
