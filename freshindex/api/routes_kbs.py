"""What a caller may read of the knowledge bases: ``GET /v1/kbs/{kb}/health`` and ``GET /v1/snapshots``.

A caller whose credential names a tenant sees only the knowledge bases that
have a source of its tenant, and only its tenant's sources in their health
(another's answers 404, as an unknown one does); a caller without a tenant
sees every knowledge base.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends

from freshindex.api import schema
from freshindex.api.auth import Identity
from freshindex.api.known_kbs import KnownKbs
from freshindex.core.errors import NotFoundError


def router(services: Any, authorize: Callable[..., Identity], known: KnownKbs,
           require_kb: Callable[[str, str], str]) -> APIRouter:
    """The knowledge-base routes; ``authorize`` is the app's credential check, ``require_kb`` its kb check."""
    api = APIRouter()

    def tenant_sources(identity: Identity, kb: str) -> set[str] | None:
        """The ids of ``kb``'s sources ``identity`` may see; None: every one (a caller without a tenant)."""
        if identity.tenant is None:
            return None
        return {s.id for s in services.registry.list_sources(kb) if s.tenant == identity.tenant}

    @api.get("/v1/kbs/{kb}/health", response_model=None, responses={
        **schema.ok(schema.KbHealthBody, "The knowledge base's freshness signals."),
        **schema.errors(401, 404, 429, 503)})
    def kb_health(kb: str, identity: Identity = Depends(authorize)) -> dict[str, Any]:
        mine = tenant_sources(identity, kb) if known.contains(kb) else None
        if mine is not None and not mine:  # another tenant's knowledge base: answered as an unknown one
            services.metrics.unknown_kb_requests.labels("kb_health").inc()
            raise NotFoundError(f"unknown knowledge base {kb!r}")
        health = services.registry.health(require_kb(kb, "kb_health"))
        if mine is not None:
            for field in ("stale_sources", "deletions_held_by_source"):
                health[field] = {sid: v for sid, v in health[field].items() if sid in mine}
        return health

    @api.get("/v1/snapshots", response_model=None, responses={
        **schema.ok(list[schema.SnapshotBody], "Snapshot summaries, newest first."), **schema.errors(401, 429, 503)})
    def snapshots(kb: str | None = None, identity: Identity = Depends(authorize)) -> list[dict[str, Any]]:
        found = services.registry.list_snapshots(kb)
        if identity.tenant is not None:
            visible = {s.kb for s in services.registry.list_sources() if s.tenant == identity.tenant}
            found = [s for s in found if s.kb in visible]
        return [s.as_dict() for s in found]

    return api


__all__ = ["router"]
