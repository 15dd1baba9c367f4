"""Contract suites an implementation of an extension point subclasses (as Haystack's ``DocumentStoreBaseTests``).

One class per extension point, each a plain class of ``test_*`` methods that
pytest runs once a test module subclasses it under a ``Test`` name and
supplies the small factory it asks for::

    from freshindex.testing import ConnectorContract

    class TestMyConnector(ConnectorContract):
        def make_connector(self, tmp_path, cursor): ...
        def put(self, name, data): ...
        def remove(self, name): ...

- :class:`ConnectorContract` (``freshindex.testing.connectors``): list, fetch,
  deletions, etags, keys that escape, ``for_run``;
- :class:`ParserContract` (``freshindex.testing.parsers``): declared names,
  version, a sample parsed into blocks, bad input refused as ``DocumentError``;
- :class:`EmbedderContract` (``freshindex.testing.embedders``): dimension,
  determinism, batch equals one by one, empty input;
- :class:`VectorStoreContract` (``freshindex.testing.vectorstores``): the
  ``VectorStore`` protocol's guarantees;
- :class:`RegistryContract` (``freshindex.testing.registry``): every
  protocol and store of the registry (catalog, run ledger, staging, chunks,
  snapshots, locks, source state, twins, golden sets, webhooks, refusals,
  API keys), on a migrated registry.

The base classes are not collected by pytest (their names do not start with
``Test``).  This package imports pytest, a test extra (``freshindex[test]``):
nothing else in freshindex imports it, and each suite's module is imported
only when its class is first asked for, so a connector's suite does not load
the registry or a vector store.

What it does not do: run anything by itself, start services (a subclass
brings its S3 server, its PostgreSQL database), or check performance; each
suite's docstring says what it leaves to the implementation's own tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from freshindex.testing.connectors import ConnectorContract, MemoryCursor
    from freshindex.testing.embedders import EmbedderContract
    from freshindex.testing.parsers import ParserContract
    from freshindex.testing.registry import RegistryContract
    from freshindex.testing.vectorstores import VectorStoreContract

_HOMES = {
    "ConnectorContract": "connectors",
    "MemoryCursor": "connectors",
    "EmbedderContract": "embedders",
    "ParserContract": "parsers",
    "RegistryContract": "registry",
    "VectorStoreContract": "vectorstores",
}

__all__ = ["ConnectorContract", "EmbedderContract", "MemoryCursor", "ParserContract", "RegistryContract",
           "VectorStoreContract"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'freshindex.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"freshindex.testing.{home}"), name)
