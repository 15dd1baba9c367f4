"""FastAPI application factory.

``create_app(services)`` takes the process's services: anything with the
attributes of :class:`api.services.ApiServices` (in a process, the composition root
:class:`freshindex.services.Services`; nothing is read from the environment
here, and nothing of the workers is imported, so the HTTP process never
loads the parsers or Celery).  Endpoints:

* ``GET /healthz``: the process is up;
* ``GET /readyz``: this process can serve (registry reachable, vector store
  open); each knowledge base's state is reported in the body, and one without
  a snapshot yet does not make the process unready;
* ``GET /metrics``: Prometheus exposition;
* ``POST /v1/query``: question (+ principal) -> cited context packet;
* ``POST /v1/citations/check``: a finished answer + the packet it was written
  from -> its invalid citations (``api.max_check_bytes`` bounds the body: 413;
  a body that is not an answer and a packet: 400);
* ``GET /v1/kbs/{kb}/health``: freshness signals of one knowledge base;
* ``GET /v1/snapshots``: snapshot manifests.
* ``POST /v1/webhooks/{github,gitlab,s3,generic}/{source}``: signed change
  events -> a coalesced sync ticket (:mod:`api.routes_webhooks`).

Every route is under :mod:`api.limits` first, before authentication: a body
over its route's cap is 413 (``api.max_query_bytes`` for a query,
``api.max_check_bytes`` for a citations check, ``webhooks.max_body_bytes``,
``api.max_body_bytes`` for the rest), more than ``api.max_in_flight``
requests at once is 503; then each authenticated caller (or, failing that,
its peer address) is rate limited (``api.rate_limit_*``: 429).  A request
whose body does not validate is 422, or 400 when its text is not valid
Unicode (a lone surrogate escape).

A caller whose credential names a tenant sees only the knowledge bases that
have a source of its tenant, and only its tenant's sources in their health
(another's answers 404, as an unknown one does); a caller without a tenant
sees every knowledge base.

Who calls the query endpoints is decided by :mod:`api.auth` from the
credential (API key, JWT, trusted gateway headers; ``auth.mode``), never
from the body: a query's ``principal`` and ``groups`` can only narrow the
credential's groups. With ``auth.mode=none`` every caller is anonymous
(public sources only) and the legacy ``api.token``, when set, is required.
Webhook routes are not under this: they check their own signatures.

A knowledge base named in a request must be known to the registry (a source
or a snapshot of it): an unknown one is a 404 before anything is counted, so
request input never becomes a metric label (:mod:`api.known_kbs`).

The routes live in one router module per concern, each built by a
``router(...)`` factory over the services and the app's ``authorize``
dependency (:mod:`api.routes_probes`, :mod:`api.routes_query`,
:mod:`api.routes_kbs`, :mod:`api.routes_sources`, :mod:`api.routes_webhooks`); the error
answers in :mod:`api.error_handlers`. ``create_app`` composes them.
"""


from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request, Security

from freshindex.api import (
    error_handlers,
    routes_kbs,
    routes_probes,
    routes_query,
    routes_sources,
    routes_webhooks,
    schema,
)
from freshindex.api.auth import Authenticator, AuthError, Identity
from freshindex.api.known_kbs import KnownKbs, kb_check
from freshindex.api.limits import RateLimits, RequestLimits
from freshindex.api.services import ApiServices

if TYPE_CHECKING:
    from freshindex.core.webhooks import WebhookProviders

log = logging.getLogger("freshindex.api")


def create_app(services: ApiServices) -> FastAPI:
    settings = services.settings
    app = FastAPI(title="freshindex", version="0.1.0")
    token = settings.api.token.get_secret_value() if settings.api.token else None
    authenticator = Authenticator(settings.auth, _RegistryKeys(services), static_token=token,
                                  on_failure=lambda reason: services.metrics.auth_failures.labels(reason).inc())
    _limit_requests(app, services)
    api = settings.api
    rates = RateLimits(api.rate_limit_burst, api.rate_limit_per_s) if api.rate_limit_burst else None

    def authorize(request: Request, _key: Any = Security(schema.API_KEY), _jwt: Any = Security(schema.JWT)) -> Identity:
        # (the two schemes declare the credentials in the OpenAPI document; they decide nothing)
        # request.client is the TCP peer: `freshindex serve` runs uvicorn without proxy_headers, so no
        # X-Forwarded-For rewrites it (gateway mode trusts the peer address, nothing else).
        peer = request.client.host if request.client else None
        try:
            identity = authenticator.authenticate(request.headers, peer)
        except AuthError:
            if rates is not None:  # failed attempts count against the peer: guessing keys is rate limited too
                rates.hit(f"peer:{peer}", "rate_peer")
            raise
        if rates is not None:
            key = _rate_key(identity)
            rates.hit(key or f"peer:{peer}", "rate_credential" if key else "rate_peer")
        return identity

    error_handlers.install(app, services)
    # operator controls: authorize + auth.admin_group (api/routes_sources.py)
    app.include_router(routes_sources.router(services, authorize))
    # Webhooks carry their own per-source signatures, not the query API's credentials.
    # Providers beyond the generic one come from the connector specs, through the services (api reads no
    # spec), looked up on the first webhook request.
    app.include_router(routes_webhooks.router(routes_webhooks.WebhookIntake(
        settings.webhooks, services, providers=lambda: _webhook_providers(services))))
    app.include_router(routes_probes.router(services))
    known = KnownKbs(lambda: services.registry.knowledge_bases())
    require_kb = kb_check(services, known)
    app.include_router(routes_query.router(services, authorize, authenticator, require_kb))
    app.include_router(routes_kbs.router(services, authorize, known, require_kb))
    return app


def _webhook_providers(services: ApiServices) -> WebhookProviders | None:
    """The providers the connector specs declare (``Services.webhook_providers``); None from services
    without them (a test's stand-in): the generic provider alone."""
    load = getattr(services, "webhook_providers", None)
    return load() if callable(load) else None


def _limit_requests(app: FastAPI, services: ApiServices) -> None:
    """Body caps per route and the in-flight cap (:mod:`api.limits`), before authentication; probes exempt."""
    settings = services.settings
    api = settings.api

    def cap_for(path: str) -> int:
        if path == "/v1/query":
            return api.max_query_bytes
        if path == "/v1/citations/check":
            return api.max_check_bytes
        if path.startswith("/v1/webhooks/"):
            return settings.webhooks.max_body_bytes
        return api.max_body_bytes

    def limited(reason: str, path: str) -> None:
        services.metrics.api_limited.labels(reason).inc()
        if reason == "too_large" and path.startswith("/v1/webhooks/"):  # still a webhook rejection too
            services.metrics.webhook_rejections.labels("too_large").inc()
        log.info("request limited: %s", reason, extra={"event": "request_limited", "reason": reason})

    app.add_middleware(RequestLimits, cap_for=cap_for, max_in_flight=api.max_in_flight, on_limited=limited,
                       exempt=frozenset({"/healthz", "/readyz", "/metrics"}))


def _rate_key(identity: Identity) -> str | None:
    """What a caller's rate is counted under: its key, or its principal; None for the anonymous (its peer)."""
    if identity.key_id is not None:
        return f"key:{identity.key_id}"
    if identity.method in ("jwt", "gateway"):
        return f"{identity.method}:{identity.tenant or ''}:{identity.principal.id}"
    return None


class _RegistryKeys:
    """The registry's key check, reached only when a key is presented (the registry is built on first use)."""

    def __init__(self, services: ApiServices) -> None:
        self._services = services

    def verify_api_key(self, key: str) -> Any:
        return self._services.registry.verify_api_key(key)


__all__ = ["ApiServices", "create_app"]
