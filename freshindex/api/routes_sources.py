"""Operator controls over HTTP: ``/v1/sources`` (list, show, trigger, pause, resume, remove, runs, policy).

The same registry calls as ``freshindex sources ...`` (:mod:`registry.freshness`).
Every route needs the query API's credential (the app's ``authorize``
dependency) *and* membership of ``auth.admin_group``; with no admin group
configured the operator API answers 403 to everyone, so turning
authentication on never opens it by accident.  A trigger does not run the
sync in the request: it joins the source's webhook ticket (the same
coalescer as ``/v1/webhooks``) and answers 202 with the ticket id; the
dispatcher ``freshindex serve`` runs starts it.  Follow it with
``freshindex syncs show TICKET``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from freshindex.api import schema
from freshindex.api.auth import Identity
from freshindex.api.services import ApiServices
from freshindex.registry.reports import sync_runs


class PolicyRequest(BaseModel):
    """A freshness policy change; a field left out stays as it is, null clears it."""

    poll_interval_s: int | None = Field(default=None, gt=0)
    stale_after_s: int | None = Field(default=None, gt=0)
    hard_expiry_s: int | None = Field(default=None, gt=0)


def router(services: ApiServices, authorize: Callable[..., Identity]) -> APIRouter:
    """The ``/v1/sources`` routes; ``authorize`` is the app's credential check."""
    admin_group = services.settings.auth.admin_group

    def admin(identity: Identity = Depends(authorize)) -> Identity:
        if not admin_group:
            raise HTTPException(403, "the operator API is off: set auth.admin_group")
        if admin_group not in identity.principal.groups:
            raise HTTPException(403, f"operating sources needs membership of {admin_group!r}")
        return identity

    api = APIRouter(prefix="/v1/sources", dependencies=[Depends(admin)])

    def registry() -> Any:
        return services.registry

    @api.get("", response_model=None, responses={**schema.ok(schema.SourcesBody, "Every source's freshness."), **schema.errors(401, 403, 404, 429)})
    def list_sources(kb: str | None = None) -> dict[str, Any]:
        return {"sources": [f.as_dict() for f in registry().source_freshness(kb)]}

    @api.get("/{source_id}", response_model=None,
             responses={**schema.ok(schema.SourceFreshnessBody, "The source's freshness."), **schema.errors(401, 403, 404, 429)})
    def show(source_id: str) -> dict[str, Any]:
        return registry().source_freshness(source_id=source_id)[0].as_dict()

    @api.post("/{source_id}/sync", status_code=202, response_model=None, responses={
        **schema.ok(schema.SyncTriggered, "Queued (or joined the queued ticket).", 202), **schema.errors(401, 403, 404, 429),
        409: {"model": schema.ErrorBody, "description": "The source was removed."}})
    def trigger(source_id: str) -> JSONResponse:
        fresh = registry().source_freshness(source_id=source_id)[0]
        if fresh.removed:
            raise HTTPException(409, f"source {source_id!r} was removed")
        join = registry().accept_delivery(source_id, f"api-{uuid.uuid4().hex}", None)
        return JSONResponse(status_code=202, content={
            "ticket": join.ticket_id, "coalesced": join.joined, "paused": fresh.paused,
            "detail": "waits until the source is resumed" if fresh.paused else "queued"})

    @api.post("/{source_id}/pause", response_model=None,
              responses={**schema.ok(schema.SourceFreshnessBody, "Paused."), **schema.errors(401, 403, 404, 429)})
    def pause(source_id: str) -> dict[str, Any]:
        return registry().set_source_paused(source_id, True).as_dict()

    @api.post("/{source_id}/resume", response_model=None,
              responses={**schema.ok(schema.SourceFreshnessBody, "Resumed."), **schema.errors(401, 403, 404, 429), **schema.errors(400)})
    def resume(source_id: str) -> dict[str, Any]:
        return registry().set_source_paused(source_id, False).as_dict()

    @api.delete("/{source_id}", response_model=None,
                responses={**schema.ok(schema.SourceRemoved, "Removed: its documents withdrawn."), **schema.errors(401, 403, 404, 429),
                           **schema.errors(400)})
    def remove(source_id: str, confirm: bool = Query(default=False)) -> dict[str, Any]:
        if not confirm:
            raise HTTPException(400, "removing a source withdraws all of its documents: add ?confirm=true")
        withdrawn = registry().remove_source(source_id)
        return {"source": source_id, "documents": len(withdrawn), "chunks": sum(w.chunks for w in withdrawn)}

    @api.get("/{source_id}/runs", response_model=None,
             responses={**schema.ok(schema.RunsBody, "The source's sync runs, newest first."), **schema.errors(401, 403, 404, 429)})
    def runs(source_id: str, limit: int = Query(default=20, ge=1, le=500)) -> dict[str, Any]:
        return {"runs": sync_runs(registry(), source=source_id, limit=limit)}

    @api.put("/{source_id}/policy", response_model=None,
             responses={**schema.ok(schema.SourceFreshnessBody, "The policy as now in force."), **schema.errors(401, 403, 404, 429)})
    def policy(source_id: str, body: PolicyRequest) -> dict[str, Any]:
        return registry().set_freshness_policy(source_id, **body.model_dump(exclude_unset=True)).as_dict()

    return api


__all__ = ["PolicyRequest", "router"]
