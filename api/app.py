"""FastAPI application factory.

``create_app(services)`` takes the process's :class:`workers.services.Services`
(nothing is read from the environment here).  Endpoints:

* ``GET /healthz``: the process is up;
* ``GET /readyz``: registry reachable and every knowledge base has a snapshot;
* ``GET /metrics``: Prometheus exposition;
* ``POST /v1/query``: question (+ principal) -> cited context packet;
* ``GET /v1/kbs/{kb}/health``: freshness signals of one knowledge base;
* ``GET /v1/snapshots``: snapshot manifests.

When ``api.token`` is set, ``/v1`` endpoints need ``Authorization: Bearer``.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field

from acl import Principal
from core.errors import FreshIndexError, NotFoundError, RetryableError
from workers.services import Services


class QueryRequest(BaseModel):
    question: str = Field(min_length=1, max_length=4000)
    kb: str | None = None
    principal: str = "anonymous"
    groups: list[str] = Field(default_factory=list)
    limit: int = Field(default=5, ge=1, le=50)


def create_app(services: Services) -> FastAPI:
    settings = services.settings
    app = FastAPI(title="freshindex", version="0.1.0")
    token = settings.api.token.get_secret_value() if settings.api.token else None

    def authorize(authorization: Annotated[str | None, Header()] = None) -> None:
        if token is None:
            return
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(status_code=401, detail="missing or wrong bearer token")

    @app.exception_handler(FreshIndexError)
    async def _errors(_request: Any, exc: FreshIndexError) -> JSONResponse:
        status = 404 if isinstance(exc, NotFoundError) else 503 if isinstance(exc, RetryableError) else 400
        return JSONResponse(status_code=status, content={"error": type(exc).__name__, "detail": str(exc)})

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        try:
            services.registry.ping()
            kbs = services.registry.knowledge_bases()
            missing = [kb for kb in kbs if services.store.get_alias(services.naming.alias(kb)) is None]
        except FreshIndexError as exc:
            return JSONResponse(status_code=503, content={"status": "unavailable", "detail": str(exc)})
        status = 200 if not missing else 503
        return JSONResponse(status_code=status, content={"status": "ready" if not missing else "not_ready",
                                                         "kbs": kbs, "without_snapshot": missing})

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(services.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/query", dependencies=[Depends(authorize)])
    def query(req: QueryRequest) -> dict[str, Any]:
        kb = req.kb or settings.default_kb
        packet = services.client.retrieve(req.question, kb=kb, principal=Principal.of(req.principal, req.groups),
                                          limit=req.limit)
        services.metrics.queries.labels(kb, "insufficient" if packet.insufficient else "answered").inc()
        for reason, n in packet.dropped.items():
            services.metrics.recheck_drops.labels(kb, reason).inc(n)
        return packet.as_dict()

    @app.get("/v1/kbs/{kb}/health", dependencies=[Depends(authorize)])
    def kb_health(kb: str) -> dict[str, Any]:
        return services.registry.health(kb)

    @app.get("/v1/snapshots", dependencies=[Depends(authorize)])
    def snapshots(kb: str | None = None) -> list[dict[str, Any]]:
        return [_snapshot_dict(s) for s in services.registry.list_snapshots(kb)]

    return app


def _snapshot_dict(s: Any) -> dict[str, Any]:
    return {
        "id": s.id, "kb": s.kb, "version": s.version, "parent_id": s.parent_id, "status": s.status,
        "strategy": s.strategy, "point_count": s.point_count, "embedding_model": s.embedding_model,
        "upserts": s.upserts, "deletes": s.deletes, "created_at": s.created_at.isoformat() if s.created_at else None,
        "activated_at": s.activated_at.isoformat() if s.activated_at else None, "failure_reason": s.failure_reason,
    }
