"""The probes: ``GET /healthz`` (the process is up), ``GET /readyz`` (it can serve), ``GET /metrics``.

No credential: a kubelet or a Prometheus scrape calls them, and the request
limits exempt them (:mod:`api.limits`); except that ``/metrics`` asks for the
bearer token ``api.metrics_token`` when one is set, since it carries every
knowledge base's figures, which tenants of a shared deployment must not read. ``/metrics`` also carries the free
space under the data folder and the embedded vector store's folder
(``freshindex_disk_free_bytes{dir}``, alert ``FreshindexDiskLow``); it does
not measure a registry or a Qdrant server elsewhere.
"""

from __future__ import annotations

import hmac
import logging

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, PlainTextResponse

from freshindex.api import schema
from freshindex.api.services import ApiServices
from freshindex.core.errors import FreshIndexError

log = logging.getLogger("freshindex.api")


def router(services: ApiServices) -> APIRouter:
    """The probe routes over ``services`` (registry, store, naming, metrics: each reached per request)."""
    api = APIRouter()

    @api.get("/healthz", response_model=None, responses=schema.ok(schema.Alive, "The process is up."))
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/readyz", response_model=None, responses={
        **schema.ok(schema.Ready, "This process can serve; each knowledge base's state."),
        503: {"model": schema.NotReady, "description": "The registry or the vector store is unreachable."}})
    def readyz() -> JSONResponse:
        """Ready = this process can answer queries; per-kb state is information, not a verdict.

        A knowledge base without a snapshot is answered with an
        insufficient-evidence packet by any replica, so it must not take every
        replica out of its Service (which it did when readiness required a
        snapshot for every knowledge base). This does not prove that any
        particular knowledge base answers well: see ``/v1/kbs/KB/health``.
        """
        try:
            services.registry.ping()
            kbs = services.registry.knowledge_bases()
        except Exception as exc:  # a probe answers 503, never 500
            return _unready("registry", exc)
        try:
            services.store.list_collections()
        except Exception as exc:
            return _unready("vector_store", exc)
        states: dict[str, str] = {}
        for kb in kbs:
            try:
                collection = services.store.get_alias(services.naming.alias(kb))
            except FreshIndexError as exc:
                states[kb] = f"alias unreadable: {exc}"
                continue
            if collection is None:
                states[kb] = "no snapshot yet"
            else:
                states[kb] = f"serving {services.naming.snapshot_of(collection) or collection}"
        return JSONResponse(status_code=200, content={"ready": True, "kbs": states})

    def _unready(dependency: str, exc: Exception) -> JSONResponse:
        services.metrics.readiness_failures.labels(dependency).inc()
        log.warning("not ready: %s: %s", dependency, exc,
                    extra={"event": "readiness_failed", "dependency": dependency, "detail": str(exc)})
        return JSONResponse(status_code=503, content={"ready": False, "dependency": dependency, "detail": str(exc)})

    @api.get("/metrics", response_class=PlainTextResponse, responses={
        200: {"description": "Prometheus exposition.", "content": {"text/plain": {"schema": {"type": "string"}}}},
        401: {"description": "api.metrics_token is set and the request does not carry it."}})
    def metrics(authorization: str | None = Header(default=None)) -> PlainTextResponse:
        # Watched here, not when the router is built: building the app (and its OpenAPI document) reaches no service.
        settings = services.settings
        token = settings.api.metrics_token
        if token is not None and not hmac.compare_digest(
                (authorization or "").encode(), f"Bearer {token.get_secret_value()}".encode()):
            return PlainTextResponse("a bearer token is required (api.metrics_token)\n", status_code=401,
                                     headers={"WWW-Authenticate": "Bearer"})
        services.metrics.watch_disk("data", settings.data_dir)
        if settings.vector_store.kind in ("edge", "local"):
            services.metrics.watch_disk("vectors", settings.vector_path)
        return PlainTextResponse(services.metrics.render(), media_type="text/plain; version=0.0.4")

    return api


__all__ = ["router"]
