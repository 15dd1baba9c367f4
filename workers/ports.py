"""What the task shells and the runners need of the process's services.

The composition root (:class:`freshindex.services.Services`) sits above the
workers and satisfies these protocols; the workers only ever see the
protocols, so they import nothing of the root and a test can hand them any
object with these attributes.  The protocols describe shape, not lifetime:
whether an attribute is built on first use or given up front is the root's
business.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: importing this module loads no engine
    from freshindex.health.metrics import Metrics
    from freshindex.registry import Registry
    from freshindex.settings import Settings
    from freshindex.snapshots import Builder
    from freshindex.vectorstore import VectorStore
    from freshindex.workers.pipeline import PipelineContext


class PipelineServices(Protocol):
    """What every pipeline driver uses: the steps, the builder, the registry, the metrics."""

    @property
    def pipeline(self) -> PipelineContext: ...

    @property
    def builder(self) -> Builder: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def metrics(self) -> Metrics: ...


class TaskServices(PipelineServices, Protocol):
    """What :mod:`workers.tasks` uses: one per worker process, closed at its shutdown."""

    @property
    def store(self) -> VectorStore: ...

    def evaluate_golden_sets(self, kb: str) -> list[dict[str, Any]]:
        """Evaluate and record ``kb``'s registered golden sets not yet run on its serving snapshot."""
        ...

    def close(self) -> None: ...


#: Builds the worker process's services on first use (after the fork).
ServicesFactory = Callable[[], "TaskServices"]


class RunnerServices(PipelineServices, Protocol):
    """What :mod:`workers.runner` uses to run or follow a sync from one process."""

    @property
    def settings(self) -> Settings: ...

    def evaluate_golden_sets(self, kb: str) -> list[dict[str, Any]]:
        """Evaluate and record ``kb``'s registered golden sets not yet run on its serving snapshot."""
        ...


__all__ = ["PipelineServices", "RunnerServices", "ServicesFactory", "TaskServices"]
