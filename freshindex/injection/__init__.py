"""The injection client: question + principal -> safe, cited context block.

Two clients return the same :class:`ContextPacket`: :class:`InjectionClient`
runs retrieval in-process (it needs the vector store, the embedder and
numpy: the ``server`` install), :class:`FreshIndexClient` asks a running
``freshindex serve`` over HTTP (httpx only: the base install).

Names are imported on first use (PEP 562), so ``from freshindex import injection`` or
``from freshindex.injection.http import FreshIndexClient`` never loads the in-process
engine or its dependencies.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs only; at run time see __getattr__
    from freshindex.injection.client import InjectionClient
    from freshindex.injection.http import ClientError, FreshIndexClient, NotFound, Unauthorized, Unavailable
    from freshindex.injection.types import ContextPacket, Evidence, render_context

#: name -> submodule; relative, so it survives the move under the ``freshindex.`` namespace.
_WHERE = {
    "ContextPacket": "types",
    "Evidence": "types",
    "render_context": "types",
    "InjectionClient": "client",
    "FreshIndexClient": "http",
    "ClientError": "http",
    "NotFound": "http",
    "Unauthorized": "http",
    "Unavailable": "http",
}

__all__ = [
    "ClientError",
    "ContextPacket",
    "Evidence",
    "FreshIndexClient",
    "InjectionClient",
    "NotFound",
    "Unauthorized",
    "Unavailable",
    "render_context",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
