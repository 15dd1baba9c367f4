"""FastAPI application factory.

``create_app(services)`` takes the process's services: anything with the
attributes of :class:`ApiServices` (in a process, the composition root
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
  events -> a coalesced sync ticket (:mod:`api.webhooks`).

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
request input never becomes a metric label.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import Depends, FastAPI, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from freshindex.api import schema, webhooks
from freshindex.api.auth import Authenticator, AuthError, Identity, narrow
from freshindex.api.limits import BodyTooLarge, RateLimited, RateLimits, RequestLimits, too_large_body
from freshindex.core.errors import FreshIndexError, NotFoundError, RetryableError

if TYPE_CHECKING:
    from freshindex.core.naming import Naming
    from freshindex.health.metrics import Metrics
    from freshindex.injection import InjectionClient
    from freshindex.registry import Registry
    from freshindex.settings import Settings
    from freshindex.vectorstore import VectorStore

log = logging.getLogger("freshindex.api")


class QueryRequest(BaseModel):
    question: str = Field(min_length=1, max_length=4000)
    kb: str | None = None
    # Narrow the credential's identity, never widen it (api.auth.narrow): the groups are intersected with
    # the credential's, and a principal other than the credential's is a 403.
    principal: str | None = None
    groups: list[str] = Field(default_factory=list)
    limit: int = Field(default=5, ge=1, le=50)

    @field_validator("question", "kb", "principal", "groups")
    @classmethod
    def _unicode(cls, value: Any) -> Any:
        # JSON lets a body escape a lone surrogate ("\\ud800"); such a string cannot be encoded, logged or
        # answered. Pydantic refuses it in some fields only: refuse it in every one (the handler's 400).
        for text in value if isinstance(value, list) else (value,):
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise PydanticCustomError("string_unicode", "not valid Unicode text") from None
        return value


class ApiServices(Protocol):
    """What the HTTP app uses; building each on first use is the caller's choice."""

    @property
    def settings(self) -> Settings: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def store(self) -> VectorStore: ...

    @property
    def naming(self) -> Naming: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def client(self) -> InjectionClient: ...


def create_app(services: ApiServices) -> FastAPI:
    settings = services.settings
    app = FastAPI(title="freshindex", version="0.1.0")
    token = settings.api.token.get_secret_value() if settings.api.token else None
    authenticator = Authenticator(settings.auth, _RegistryKeys(services), static_token=token,
                                  on_failure=lambda reason: services.metrics.auth_failures.labels(reason).inc())

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

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_request: Any, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse(status_code=413, content=too_large_body(exc.limit))

    @app.exception_handler(RateLimited)
    async def _rate_limited(_request: Any, exc: RateLimited) -> JSONResponse:
        services.metrics.api_limited.labels(exc.reason).inc()
        return JSONResponse(status_code=429, headers={"Retry-After": str(exc.retry_after)},
                            content={"error": "rate_limited", "detail": f"retry after {exc.retry_after} s"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Any, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        unicode = [e for e in errors if e.get("type") == "string_unicode"]
        if unicode:
            where = ".".join(str(p) for p in unicode[0].get("loc", ()))
            return JSONResponse(status_code=400, content={
                "error": "bad_unicode",
                "detail": f"{where}: not valid Unicode text (a lone surrogate escape such as \\ud800)"})
        # The errors echo the input: make every string encodable (a lone surrogate would make this a 500).
        return JSONResponse(status_code=422, content={"detail": _encodable(jsonable_encoder(
            errors, custom_encoder={bytes: lambda b: b.decode("utf-8", "backslashreplace")}))})

    @app.exception_handler(AuthError)
    async def _refused(_request: Any, exc: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": exc.www_authenticate} if exc.status == 401 else None
        error = {401: "unauthorized", 403: "forbidden"}.get(exc.status, "unavailable")
        return JSONResponse(status_code=exc.status, content={"error": error, "detail": exc.detail}, headers=headers)

    @app.exception_handler(FreshIndexError)
    async def _errors(_request: Any, exc: FreshIndexError) -> JSONResponse:
        status = 404 if isinstance(exc, NotFoundError) else 503 if isinstance(exc, RetryableError) else 400
        return JSONResponse(status_code=status, content={"error": type(exc).__name__, "detail": str(exc)})

    from freshindex.api import sources  # operator controls: authorize + auth.admin_group (api/sources.py)
    app.include_router(sources.router(services, authorize))
    # Webhooks carry their own per-source signatures, not the query API's credentials.
    app.include_router(webhooks.router(webhooks.WebhookIntake(settings.webhooks, services)))

    @app.get("/healthz", response_model=None, responses=schema.ok(schema.Alive, "The process is up."))
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    known = _KnownKbs(lambda: services.registry.knowledge_bases())

    def require_kb(kb: str, endpoint: str) -> str:
        if not known.contains(kb):
            services.metrics.unknown_kb_requests.labels(endpoint).inc()
            raise NotFoundError(f"unknown knowledge base {kb!r}")
        return kb

    @app.get("/readyz", response_model=None, responses={
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

    @app.get("/metrics", response_class=PlainTextResponse, responses={
        200: {"description": "Prometheus exposition.", "content": {"text/plain": {"schema": {"type": "string"}}}}})
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(services.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/query", response_model=None, responses={
        **schema.ok(schema.ContextPacketBody, "The context packet (or an insufficient-evidence one)."),
        **schema.errors(400, 401, 403, 404, 413, 422, 429, 503)})
    def query(req: QueryRequest, identity: Identity = Depends(authorize)) -> dict[str, Any]:
        # (a default, not Annotated[...]: the annotation is a string and `authorize` is local to create_app)
        try:
            principal = narrow(identity, req.principal, req.groups)
        except AuthError as exc:
            raise authenticator.refuse(exc) from None
        kb = require_kb(req.kb or settings.default_kb, "query")
        packet = services.client.retrieve(req.question, kb=kb, principal=principal, limit=req.limit)
        return packet.as_dict()  # its metrics: services.ServiceObserver, on every path

    @app.post("/v1/citations/check", response_model=None, responses={
        **schema.ok(schema.CitationReportBody, "The citation report."), **schema.errors(400, 401, 413, 429, 503)},
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": schema.CitationCheckRequest.model_json_schema()}}}})  # read capped by hand, not by FastAPI
    async def citations_check(request: Request, _identity: Identity = Depends(authorize)) -> JSONResponse:
        # The body is read capped before it is parsed: FastAPI's own body model would read it whole first.
        limit = settings.api.max_check_bytes
        body = await webhooks.read_capped(request, limit)
        if body is None:
            return JSONResponse(status_code=413, content={"error": "too_large", "detail": f"body over {limit} bytes"})
        # Parsing and checking are CPU work on up to max_check_bytes: off the event loop, in the threadpool.
        return await run_in_threadpool(_check_body, body)

    def _check_body(body: bytes) -> JSONResponse:
        from freshindex.injection.citations import check_answer

        try:
            data = json.loads(body)
        except RecursionError:  # nested deeper than the parser's recursion limit: not a packet either
            return JSONResponse(status_code=400, content={"error": "bad_json", "detail": "nested too deeply"})
        except (ValueError, UnicodeDecodeError) as exc:
            return JSONResponse(status_code=400, content={"error": "bad_json", "detail": str(exc)[:200]})
        if not isinstance(data, dict):
            return JSONResponse(status_code=400, content={"error": "CitationInputError",
                                                          "detail": 'the body is {"answer": ..., "packet": ...}'})
        # CitationInputError (a FreshIndexError) answers 400 through _errors; nothing is counted then.
        report = check_answer(data.get("answer"), data.get("packet"), on_report=services.metrics.count_citations)
        return JSONResponse(status_code=200, content=report.as_dict())

    def tenant_sources(identity: Identity, kb: str) -> set[str] | None:
        """The ids of ``kb``'s sources ``identity`` may see; None: every one (a caller without a tenant)."""
        if identity.tenant is None:
            return None
        return {s.id for s in services.registry.list_sources(kb) if s.tenant == identity.tenant}

    @app.get("/v1/kbs/{kb}/health", response_model=None, responses={
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

    @app.get("/v1/snapshots", response_model=None, responses={
        **schema.ok(list[schema.SnapshotBody], "Snapshot summaries, newest first."), **schema.errors(401, 429, 503)})
    def snapshots(kb: str | None = None, identity: Identity = Depends(authorize)) -> list[dict[str, Any]]:
        found = services.registry.list_snapshots(kb)
        if identity.tenant is not None:
            visible = {s.kb for s in services.registry.list_sources() if s.tenant == identity.tenant}
            found = [s for s in found if s.kb in visible]
        return [s.as_dict() for s in found]

    return app


def _rate_key(identity: Identity) -> str | None:
    """What a caller's rate is counted under: its key, or its principal; None for the anonymous (its peer)."""
    if identity.key_id is not None:
        return f"key:{identity.key_id}"
    if identity.method in ("jwt", "gateway"):
        return f"{identity.method}:{identity.tenant or ''}:{identity.principal.id}"
    return None


def _encodable(value: Any) -> Any:
    """``value`` with every string UTF-8 encodable: a lone surrogate becomes its ``\\udXXX`` escape text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    return value


class _RegistryKeys:
    """The registry's key check, reached only when a key is presented (the registry is built on first use)."""

    def __init__(self, services: ApiServices) -> None:
        self._services = services

    def verify_api_key(self, key: str) -> Any:
        return self._services.registry.verify_api_key(key)


class _KnownKbs:
    """The registry's knowledge bases, re-read at most every ``ttl`` seconds for names found in it.

    A name not in the cached set triggers one re-read (rate limited to one
    per ``miss_interval``), so a knowledge base registered a moment ago is
    found without a restart. What it does not do: notice removals before the
    ttl expires (a removed kb answers "no snapshot yet" until then).
    """

    def __init__(self, load: Any, *, ttl: float = 30.0, miss_interval: float = 1.0) -> None:
        self._load, self._ttl, self._miss_interval = load, ttl, miss_interval
        self._names: frozenset[str] = frozenset()
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def contains(self, kb: str) -> bool:
        now = time.monotonic()
        with self._lock:
            fresh = now - self._loaded_at < self._ttl
            if kb in self._names and fresh:
                return True
            if now - self._loaded_at < self._miss_interval:
                return kb in self._names
            self._names, self._loaded_at = frozenset(self._load()), now
            return kb in self._names
