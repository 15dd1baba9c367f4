"""What a caller may read of the knowledge bases: ``GET /v1/kbs/{kb}/health`` and ``GET /v1/snapshots``.

Tenants share a knowledge base by each registering sources into it; their
figures must not tell one tenant about another's documents. The rule:

* an **operator** (a caller without a tenant, i.e. a single-tenant deploy,
  or a member of ``auth.admin_group``) sees every knowledge base and every
  figure, as the registry holds them;
* a **tenant** caller sees only the knowledge bases that have a source of
  its tenant (another's answers 404, as an unknown one does), and of those
  only figures computed from its own sources: the health of its sources
  (last successful sync, documents in error, pending changesets, tombstone
  backlog, live chunks, held deletions, stale sources: ``registry.health(kb,
  sources=...)``);
* figures that a build computes over the whole knowledge base (a snapshot's
  point, upsert and delete counts and its failure reason; snapshots by
  status; held builds by check) cannot be split by source, so a tenant
  caller gets them only for a knowledge base where every source the registry
  holds (removed ones included) is its tenant's, and ``null`` on one it shares. A
  snapshot's identity, status and times stay visible: every cited answer
  names its snapshot anyway.

Why scoped figures rather than making health admin-only: a tenant needs
its own sources' freshness (the thin client's ``health()`` reads it); only
the figures that mix tenants are withheld. What this does not hide: that a
knowledge base is shared at all (the nulls say so), and its active snapshot
id and version (which advance with another tenant's builds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends

from freshindex.api import schema
from freshindex.api.auth import Identity
from freshindex.api.known_kbs import KnownKbs
from freshindex.api.services import ApiServices
from freshindex.core.errors import NotFoundError

#: Health fields a build computes over the whole knowledge base: withheld from a tenant on a shared one.
KB_WIDE_HEALTH = ("snapshots_by_status", "held_builds_by_check")
#: Snapshot fields counted over every source of the knowledge base: withheld likewise.
KB_WIDE_SNAPSHOT = ("point_count", "upserts", "deletes", "failure_reason")


def router(services: ApiServices, authorize: Callable[..., Identity], known: KnownKbs,
           require_kb: Callable[[str, str], str]) -> APIRouter:
    """The knowledge-base routes; ``authorize`` is the app's credential check, ``require_kb`` its kb check."""
    api = APIRouter()
    admin_group = services.settings.auth.admin_group

    def scope(identity: Identity) -> str | None:
        """The tenant whose figures ``identity`` may read; None: every figure (an operator)."""
        if identity.tenant is None or (admin_group and admin_group in identity.principal.groups):
            return None
        return identity.tenant

    def tenancy(tenant: str, kb: str | None = None) -> dict[str, tuple[set[str], bool]]:
        """Per knowledge base with a source of ``tenant``: its source ids, and whether it has another's too."""
        out: dict[str, tuple[set[str], bool]] = {}
        for s in services.registry.list_sources(kb):
            mine, shared = out.get(s.kb, (set(), False))
            if s.tenant == tenant:
                mine.add(s.id)
            out[s.kb] = (mine, shared or s.tenant != tenant)
        return {k: v for k, v in out.items() if v[0]}

    @api.get("/v1/kbs/{kb}/health", response_model=None, responses={
        **schema.ok(schema.KbHealthBody, "The knowledge base's freshness signals (a tenant: its sources')."),
        **schema.errors(401, 404, 429, 503)})
    def kb_health(kb: str, identity: Identity = Depends(authorize)) -> dict[str, Any]:
        tenant = scope(identity)
        if tenant is None:
            return services.registry.health(require_kb(kb, "kb_health"))
        found = tenancy(tenant, kb).get(kb) if known.contains(kb) else None
        if found is None:  # another tenant's knowledge base: answered as an unknown one
            services.metrics.unknown_kb_requests.labels("kb_health").inc()
            raise NotFoundError(f"unknown knowledge base {kb!r}")
        mine, shared = found
        health = services.registry.health(require_kb(kb, "kb_health"), sources=mine)
        if shared:
            health.update(dict.fromkeys(KB_WIDE_HEALTH))
        return health

    @api.get("/v1/snapshots", response_model=None, responses={
        **schema.ok(list[schema.SnapshotBody], "Snapshot summaries, newest first."), **schema.errors(401, 429, 503)})
    def snapshots(kb: str | None = None, identity: Identity = Depends(authorize)) -> list[dict[str, Any]]:
        found = services.registry.list_snapshots(kb)
        tenant = scope(identity)
        if tenant is None:
            return [s.as_dict() for s in found]
        visible = tenancy(tenant)
        out = []
        for snap in found:
            if snap.kb not in visible:
                continue
            body = snap.as_dict()
            if visible[snap.kb][1]:
                body.update(dict.fromkeys(KB_WIDE_SNAPSHOT))
            out.append(body)
        return out

    return api


__all__ = ["KB_WIDE_HEALTH", "KB_WIDE_SNAPSHOT", "router"]
