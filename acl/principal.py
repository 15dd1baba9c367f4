"""Principals and ACL filters.

Every point carries ``acl`` (the tokens that may read it: ``public`` for
everyone, a group name, or ``user:<id>`` for one principal) and ``tenant``.
A query runs with a principal, and the filter built here goes *into* the
vector query, so a denied chunk is never even a candidate: the caller cannot
tell "denied" from "nothing found".  Tenants never mix: a principal of tenant
A matches only points of tenant A, whatever their ACL says.

The filter matches what the *point* says; the registry's current ACL (which a
``sources update --acl`` changes before any rebuild) is applied after the
query by :mod:`acl.access`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from freshindex.vectorstore.base import FieldMatch, Filter

PUBLIC = "public"
ANONYMOUS = "anonymous"
DEFAULT_TENANT = "default"
USER_PREFIX = "user:"


@dataclass(frozen=True)
class Principal:
    """A caller: an id for the audit log, the groups it belongs to, and its tenant."""

    id: str = ANONYMOUS
    groups: frozenset[str] = field(default_factory=frozenset)
    tenant: str = DEFAULT_TENANT

    @classmethod
    def of(cls, principal_id: str = ANONYMOUS, groups: Iterable[str] = (), *,
           tenant: str | None = None) -> Principal:
        return cls(principal_id or ANONYMOUS, frozenset(g for g in groups if g and ":" not in g),
                   tenant or DEFAULT_TENANT)

    @property
    def anonymous(self) -> bool:
        return self.id == ANONYMOUS

    @property
    def readable(self) -> tuple[str, ...]:
        """The ACL tokens this principal holds: its groups, ``public`` and (unless anonymous) ``user:<id>``."""
        tokens = set(self.groups) | {PUBLIC}
        if not self.anonymous:
            tokens.add(USER_PREFIX + self.id)
        return tuple(sorted(tokens))

    @property
    def scope(self) -> str:
        """One string for everything the principal's access depends on (a cache key part)."""
        return "\x1f".join((self.tenant, self.id, *sorted(self.groups)))


def query_filter(principal: Principal, *, kb: str | None = None) -> Filter:
    must = [FieldMatch("tenant", (principal.tenant,)), FieldMatch("acl", principal.readable)]
    if kb is not None:
        must.append(FieldMatch("kb", (kb,)))
    return Filter(must=tuple(must))


def allows(principal: Principal, acl: Iterable[str], tenant: str | None) -> bool:
    """Whether ``principal`` may read something with ``acl`` in ``tenant`` (the one rule, everywhere)."""
    if tenant != principal.tenant:  # strict: a point written without a tenant matches no one
        return False
    return not set(principal.readable).isdisjoint(acl)


def visible(principal: Principal, payload: Mapping[str, Any]) -> bool:
    """The same rule as :func:`query_filter`, for rechecking a hit before return."""
    return allows(principal, payload.get("acl") or (), payload.get("tenant"))
