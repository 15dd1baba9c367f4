"""What a connector's ``list()`` may return: every object (complete) or what changed since its cursor (partial).

A connector's ``list()`` returns an iterator of :class:`ObjectRef` (a complete
listing: whatever the registry knows and the listing lacks is deleted), or a
:class:`SourceListing`:

* ``SourceListing.complete(refs, cursor=...)``: the same meaning, with a
  cursor to list from next time;
* ``SourceListing.partial(changed, deleted, cursor)``: the objects added or
  changed since the cursor the connector read (:func:`last_cursor`), the keys
  it knows were deleted, and the new cursor.  The planner tombstones only
  those keys, never "whatever is absent"; the documents it does not mention
  stay as they are.

The cursor is recorded as the run's pending source state (``{"listing":
cursor}``, :mod:`registry.source_state`) and promoted only when the run
succeeds (or is partial), so a run that fails, is held or is killed lists
again from the older cursor next time.  A connector reads the last promoted
one with :func:`last_cursor` (None: list completely).

A partial listing offers again, besides what it names, the documents whose
last attempt failed and is still unapplied (:func:`workers.planner._unapplied`).

What it does not do: check that a partial listing's deletions were really
deleted (the connector's word is taken), nor store anything itself.  Nor does
a partial listing revisit the documents it does not name when the pipeline's
version (a parser, the chunker, ``pipeline.steps``), the source's
``--include``/``--exclude`` patterns or its ACL options change: those reach
only the documents a listing names.  An incremental connector should list
completely now and then (no built-in kind lists partially yet); after such a
change, ``freshindex sources add --replace`` forgets the source's state, so
its next listing is complete and every document is compared again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.types import ObjectRef
from freshindex.workers.connectors.registry import StateStore

#: The key of the source state holding the listing cursor.
CURSOR_KEY = "listing"


@dataclass(frozen=True)
class SourceListing:
    """One listing: ``refs`` (all objects, or those changed), ``deleted`` (partial only), ``cursor``."""

    refs: tuple[ObjectRef, ...]
    is_complete: bool = True
    deleted: frozenset[str] = field(default_factory=frozenset)
    cursor: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[ObjectRef]:
        """The listed refs (a caller that only reads what is there, a probe, iterates as before)."""
        return iter(self.refs)

    @classmethod
    def complete(cls, refs: Iterable[ObjectRef], *, cursor: dict[str, Any] | None = None) -> SourceListing:
        """Every object of the source: what is absent was deleted."""
        return cls(tuple(refs), True, frozenset(), cursor)

    @classmethod
    def partial(cls, changed: Iterable[ObjectRef], deleted: Iterable[str], cursor: dict[str, Any]) -> SourceListing:
        """What changed since the last cursor: added or changed objects, deleted keys (a key both
        changed and deleted counts as changed), and where the next listing starts."""
        refs = tuple(changed)
        keys = {r.key for r in refs}
        return cls(refs, False, frozenset(k for k in deleted if k not in keys), dict(cursor))


def listing_of(result: Iterable[ObjectRef] | SourceListing) -> SourceListing:
    """What ``list()`` returned, as a :class:`SourceListing` (an iterator of refs is a complete listing)."""
    return result if isinstance(result, SourceListing) else SourceListing.complete(result)


def last_cursor(state: StateStore | None) -> dict[str, Any] | None:
    """The cursor the source's last successful run listed to, or None (list completely)."""
    if state is None:
        return None
    cursor = state.get().get(CURSOR_KEY)
    return dict(cursor) if isinstance(cursor, dict) else None


__all__ = ["CURSOR_KEY", "SourceListing", "last_cursor", "listing_of"]
