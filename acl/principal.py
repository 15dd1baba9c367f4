"""Principals and ACL filters.

Every point carries ``acl``: the groups of its source that may read it
(``public`` for everyone).  A query runs with a principal, and the filter
built here goes *into* the vector query, so a denied chunk is never even a
candidate: the caller cannot tell "denied" from "nothing found".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from freshindex.vectorstore.base import FieldMatch, Filter

PUBLIC = "public"


@dataclass(frozen=True)
class Principal:
    """A caller: an id for the audit log and the groups it belongs to."""

    id: str = "anonymous"
    groups: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, principal_id: str = "anonymous", groups: Iterable[str] = ()) -> Principal:
        return cls(principal_id, frozenset(g for g in groups if g))

    @property
    def readable(self) -> tuple[str, ...]:
        return tuple(sorted(self.groups | {PUBLIC}))


def query_filter(principal: Principal, *, kb: str | None = None) -> Filter:
    must = [FieldMatch("acl", principal.readable)]
    if kb is not None:
        must.append(FieldMatch("kb", (kb,)))
    return Filter(must=tuple(must))


def visible(principal: Principal, payload: Mapping[str, Any]) -> bool:
    """The same rule as :func:`query_filter`, for rechecking a hit before return."""
    acl = payload.get("acl") or []
    return bool(set(acl) & set(principal.readable))
