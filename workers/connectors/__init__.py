"""Source connectors: list object refs, fetch bytes.

A connector reports what is there (keys with etags and sizes), or, with a
cursor, what changed and what it knows was deleted (a partial
:class:`SourceListing`), and hands over bytes; the planner decides what to
process.  Keys are checked by :func:`check_key` before anything is fetched,
whatever the connector.

Which connector a source gets is decided by its kind through the registry
(:mod:`workers.connectors.registry`): one :class:`ConnectorSpec` per kind.
Besides :class:`Connector` (``list`` and ``fetch``), a connector may implement
the optional hooks below; the pipeline uses a hook when the connector has it
(``isinstance(conn, AclTags)``; the protocols are runtime-checkable) and
declares it in its spec's ``hooks``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from freshindex.core.errors import DocumentError
from freshindex.core.types import ObjectRef
from freshindex.workers.connectors.listing import SourceListing, last_cursor, listing_of
from freshindex.workers.connectors.registry import (
    ConnectorEnv,
    ConnectorOption,
    ConnectorSpec,
    StateStore,
    build_connector,
    kinds,
    register,
    spec_for,
    unregister,
)


@runtime_checkable
class Connector(Protocol):
    """What every source kind offers: a listing and the bytes of one listed key."""

    def list(self) -> Iterator[ObjectRef] | SourceListing:
        """Every object (an iterator of refs), or a :class:`SourceListing`: complete, or partial (what
        changed since its cursor, and the deletions it knows of; :mod:`workers.connectors.listing`)."""
        ...

    def fetch(self, key: str) -> bytes: ...


@runtime_checkable
class AclTags(Protocol):
    """A connector whose objects carry ``acl-*`` tags (S3 metadata and tagging), read by ACL resolution."""

    def acl_tags(self, key: str) -> dict[str, str]: ...


@runtime_checkable
class Sidecars(Protocol):
    """A connector that sets aside ACL sidecar files (``.freshindex-acl.json``) while listing."""

    sidecar_keys: set[str]


@runtime_checkable
class UnlistedPrefixes(Protocol):
    """A connector that could not list some key prefixes: nothing under them counts as deleted.

    ``unlisted_reason`` (optional attribute) says why, in a few words (``max_pages=1000``,
    ``crawl_deadline_s=3600``): the run's summary keeps it as ``listing_truncated``.
    """

    unlisted_prefixes: frozenset[str]


@runtime_checkable
class ChunkMeta(Protocol):
    """A connector that stamps every chunk of a document with fields of its own (a git ``commit``)."""

    def chunk_meta(self, key: str) -> dict[str, Any]: ...


@runtime_checkable
class RunScoped(Protocol):
    """A connector whose reads depend on what one run's listing planned (a git commit, a crawl's pages).

    ``for_run(run_id)`` answers a connector that reads exactly what run ``run_id`` listed, in whichever
    process the document task runs, however long that process has lived: nothing one run listed is
    read by a later one (invariant 9).  When that state cannot be had here (the planned commit cannot
    be fetched), its ``fetch`` raises a retryable :class:`SourceError`; it never reads another revision,
    so a change is never recorded as unchanged.  Use :func:`for_run` rather than calling it directly.
    """

    def for_run(self, run_id: int) -> Connector: ...


def for_run(connector: Connector, run_id: int | None) -> Connector:
    """``connector`` as run ``run_id`` planned it (:class:`RunScoped`); itself for a connector without per-run state."""
    if run_id is not None and isinstance(connector, RunScoped):
        return connector.for_run(run_id)
    return connector


def check_key(key: str) -> str:
    """Refuse keys that could escape a folder or confuse a citation."""
    if not key or len(key) > 1024:
        raise DocumentError(DocumentError.UNSAFE_KEY, "empty or over-long key")
    if any(ord(c) < 32 for c in key) or "\\" in key:
        raise DocumentError(DocumentError.UNSAFE_KEY, f"control character or backslash in key {key!r}")
    if key.startswith("/") or any(part in ("..", ".") for part in key.split("/")):
        raise DocumentError(DocumentError.UNSAFE_KEY, f"key {key!r} escapes its source (absolute or '..')")
    return key


__all__ = ["AclTags", "ChunkMeta", "Connector", "ConnectorEnv", "ConnectorOption", "ConnectorSpec", "RunScoped",
           "Sidecars", "SourceListing", "StateStore", "UnlistedPrefixes", "build_connector", "check_key", "for_run", "kinds",
           "last_cursor", "listing_of", "register", "spec_for", "unregister"]
