"""What the builder and its step mixins share: their dependencies and the phase hook.

:class:`snapshots.builder.Builder` sets these attributes up; the mixins for
blue/green recycling (:mod:`snapshots.bluegreen`) and verification
(:mod:`snapshots.verify`) read them.  No behaviour of its own beyond
reporting a phase.
"""

from __future__ import annotations

from collections.abc import Callable

from freshindex.core.naming import Naming
from freshindex.core.types import Embedder
from freshindex.health.metrics import Metrics
from freshindex.health.observer import SyncObserver
from freshindex.registry.protocols import BuilderRegistry
from freshindex.vectorstore.base import VectorStore

#: Called with the name of each phase as the build reaches it (tests and tracing).
PhaseHook = Callable[[str], None]


class BuilderBase:
    """The builder's dependencies and settings, declared once for every part of it."""

    registry: BuilderRegistry
    store: VectorStore
    embedder: Embedder
    metrics: Metrics
    observer: SyncObserver  # hears the build's events: metrics and log lines are written there
    naming: Naming
    verify_sample: int
    keep_versions: int
    strategy: str
    reader_grace: float
    on_phase: PhaseHook | None

    def _phase(self, name: str) -> None:
        if self.on_phase is not None:
            self.on_phase(name)


__all__ = ["BuilderBase", "PhaseHook"]
