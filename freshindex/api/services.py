"""What the HTTP app needs of the process's services: the :class:`ApiServices` protocol.

Every route module, the error handlers and the known-KB check depend on this
protocol, not on the composition root (:class:`freshindex.services.Services`
is one implementation, a test's stand-in another).  It builds nothing and
imports nothing of the app or its routes (so no route imports the app back),
and says nothing of when each service is built: that is the caller's choice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from freshindex.core.naming import Naming
    from freshindex.health.metrics import Metrics
    from freshindex.injection import InjectionClient
    from freshindex.registry import Registry
    from freshindex.settings import Settings
    from freshindex.vectorstore import VectorStore


class ApiServices(Protocol):
    """What the HTTP app uses; building each on first use is the caller's choice."""

    @property
    def settings(self) -> Settings: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def store(self) -> VectorStore: ...

    @property
    def naming(self) -> Naming: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def client(self) -> InjectionClient: ...


__all__ = ["ApiServices"]
