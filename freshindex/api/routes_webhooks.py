"""Signed webhooks that ask for a sync; :mod:`api.dispatcher` turns their tickets into syncs.

One endpoint per provider (``/v1/webhooks/{provider}/{source}``), each
verified with the source's own secret (``webhooks.secrets``, or
``webhooks.secrets_file``, followed without a restart: :class:`WebhookSecrets`),
never with the query API's credentials.  The providers are not listed here:
the connector specs declare them (``ConnectorSpec.webhook_providers``; git:
``github`` and ``gitlab``, s3: ``s3``, in :mod:`workers.connectors.webhooks`)
and the composition root hands them in (``Services.webhook_providers``); this
module adds :data:`GENERIC`, tied to no kind: JSON ``{"paths": [...]}`` (no
``paths`` = full listing) with ``X-Freshindex-Timestamp``,
``X-Freshindex-Delivery``, ``X-Freshindex-Signature:
sha256=<hmac(secret, f"{timestamp}.{raw body}")>``.  A provider that names
the kinds it takes answers 404 for a source of another kind.

:class:`WebhookIntake` is the decision, a plain function of (provider,
source, headers, body): it raises :class:`Rejected` with the HTTP status and
a reason from :data:`REASONS` (the only label values of
``freshindex_webhook_rejections_total``), or records the delivery and joins
the source's queued ticket.  A rejected request writes nothing.
:class:`api.dispatcher.Dispatcher` turns due tickets into syncs through a
callable the composition root gives it (inline or Celery), one at a time per source.

Replays: the delivery id headers are not signed, so a delivery is also
known by the sha256 of what its signature covers (:func:`delivery_digest`):
the timestamp and the body for generic and S3 (one signing scheme: the same
signed body is the same delivery on either endpoint), the body for GitHub
and GitLab.  The same content again, under any id, is answered 409 as a
duplicate id is, and counted as ``replayed_body`` (a repeated id stays
``replayed``).  Both are remembered for ``webhooks.replay_window_s``.

A source whose kind declares a ``ref_option`` follows one ref (git: its
``ref`` option): a verified push whose payload names another ref (``"ref": "refs/heads/feature"``) is answered 200
and enqueues nothing; a push to its ref syncs it, which fetches the ref.

What it does not guarantee: that a GitHub/GitLab replay older than
``webhooks.replay_window_s`` is caught (those carry no signed timestamp);
that a GitLab delivery is authentic beyond its token (``X-Gitlab-Token`` is
a bearer secret: whoever saw one request can sign any body); that two
deliveries whose signed content is byte-identical (a generic sender posting
the same body twice within one second) are both taken: the second is a
replay; that a sync reads only the named paths (today a ticket records their
union and the sync lists the whole source, which the etag diff keeps cheap).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from freshindex.api import schema
from freshindex.api.webhook_secrets import WebhookSecrets
from freshindex.core.errors import NotFoundError, RetryableError
from freshindex.core.webhooks import (
    REASONS,
    Rejected,
    WebhookEvent,
    WebhookProvider,
    WebhookProviders,
    check_timestamp,
    check_timestamped,
    delivery_digest,
    json_body,
    pushed_ref,
    ref_matches,
    sign_generic,
    sign_github,
    strings,
)
from freshindex.registry.webhooks import (
    DIGEST_PREFIX,
    DeliveryRequest,
    DuplicateDelivery,
    ReplayedBody,
    TicketJoin,
)

if TYPE_CHECKING:
    from freshindex.health.metrics import Metrics
    from freshindex.registry import Registry
    from freshindex.settings import WebhookSettings

log = logging.getLogger("freshindex.webhooks")

@dataclass(frozen=True)
class Accepted:
    """A taken request: ``ticket_id`` None when the event was verified but asks for no sync (ping)."""

    ticket_id: int | None
    joined: bool = False
    note: str | None = None


def generic_paths(body: bytes) -> list[str] | None:
    data = json_body(body)
    if not isinstance(data, dict):
        raise Rejected(400, "malformed", "body must be a JSON object")
    if data.get("paths") is None:
        return None
    return sorted(set(strings(data["paths"], "paths"))) or None


@dataclass(frozen=True)
class GenericEvents:
    """``{"paths": [...]}`` (no ``paths``: a full listing), signed with a timestamp; for a source of any kind."""

    name: str = "generic"
    kinds: frozenset[str] | None = None

    def read(self, secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
             max_skew_s: float) -> WebhookEvent:
        timestamp, digest = check_timestamped(self.name, secret, headers, body)
        paths = generic_paths(body)
        check_timestamp(timestamp, now=now, max_skew_s=max_skew_s)
        return WebhookEvent(headers.get("x-freshindex-delivery"), digest, paths, pushed_ref(body))


#: The provider every intake has, not tied to a source kind; the connector specs declare the others.
GENERIC = GenericEvents()


# -- group commit and the source check ----------------------------------------------------


class _Slot:
    __slots__ = ("done", "outcome", "request")

    def __init__(self, request: DeliveryRequest) -> None:
        self.request = request
        self.outcome: TicketJoin | Exception | None = None
        self.done = False


class DeliveryBatcher:
    """Group commit: deliveries verified by concurrent request threads are written in one transaction.

    Why: the registry commit is most of an accepted webhook's cost, and
    threads taking SQLite's write lock one by one spend most of their time in
    its busy handler.  The first caller to find no write in progress becomes
    the writer for everything queued so far (up to ``max_batch``); the others
    wait for their own outcome.  Each caller returns only after its own
    delivery row is committed (or raises what that request would have
    raised), so replay protection stays as durable as one commit per request,
    and a batch that fails (registry unreachable) fails every request in it.
    """

    def __init__(self, write: Callable[[list[DeliveryRequest]], list[TicketJoin | Exception]], *,
                 max_batch: int = 256, on_batch: Callable[[int], None] | None = None) -> None:
        self._write, self._max_batch, self._on_batch = write, max_batch, on_batch
        self._cond = threading.Condition()
        self._pending: list[_Slot] = []
        self._writing = False

    def submit(self, request: DeliveryRequest) -> TicketJoin:
        slot = _Slot(request)
        with self._cond:
            self._pending.append(slot)
        while True:
            with self._cond:
                while self._writing and not slot.done:
                    self._cond.wait()
                if slot.done:
                    break
                self._writing = True
                batch, self._pending = self._pending[:self._max_batch], self._pending[self._max_batch:]
            self._flush(batch)
        if isinstance(slot.outcome, Exception):
            raise slot.outcome
        assert slot.outcome is not None
        return slot.outcome

    def _flush(self, batch: list[_Slot]) -> None:
        outcomes: list[TicketJoin | Exception] | None = None
        try:
            outcomes = self._outcomes(batch)
        finally:
            # Always hand the writer's role back and wake the waiters, even on a BaseException:
            # a writer flag left set would stall every later webhook request.
            with self._cond:
                if outcomes is None:
                    outcomes = [RuntimeError("the webhook batch writer was interrupted") for _ in batch]
                for b, outcome in zip(batch, outcomes, strict=True):
                    b.outcome, b.done = outcome, True
                self._writing = False
                self._cond.notify_all()
        if self._on_batch is not None:
            self._on_batch(len(batch))

    def _outcomes(self, batch: list[_Slot]) -> list[TicketJoin | Exception]:
        """Each delivery's outcome from one write; a batch failing for a reason other than the registry
        being unreachable is written again one delivery at a time, so one request's bad data (a value the
        database refuses) fails that request alone."""
        try:
            return self._checked(batch)
        except RetryableError as exc:  # registry unreachable: every request in it fails (503), each its own copy
            return [exc if i == 0 else _copy(exc) for i in range(len(batch))]
        except Exception as exc:
            if len(batch) == 1:
                return [exc]
            log.warning("a webhook batch of %d failed; writing its deliveries one by one", len(batch), exc_info=True)
            out: list[TicketJoin | Exception] = []
            for b in batch:
                try:
                    out.extend(self._checked([b]))
                except Exception as one:
                    out.append(one)
            return out

    def _checked(self, batch: list[_Slot]) -> list[TicketJoin | Exception]:
        outcomes = list(self._write([b.request for b in batch]))
        if len(outcomes) != len(batch):
            raise RuntimeError(f"batch write gave {len(outcomes)} outcomes for {len(batch)} deliveries")
        return outcomes


def _copy(exc: Exception) -> Exception:
    """A copy of ``exc`` to raise in another thread (one object raised in many threads tangles its traceback)."""
    try:
        return copy.copy(exc)
    except Exception:
        return exc


class _KnownSources:
    """Source ids the registry had a moment ago, so a verified delivery costs no lookup before its write.

    Only presence is cached, for ``ttl`` seconds; an id not cached is always
    looked up.  This decides nothing alone: :meth:`Registry.accept_deliveries`
    checks the source again inside the writing transaction, so a source
    removed within ``ttl`` still gets its valid deliveries refused with 404
    (and a forged one for it a 401 instead of a 404 until then).
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self._ttl = ttl
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def fresh(self, source_id: str) -> bool:
        with self._lock:
            at = self._seen.get(source_id)
        return at is not None and time.monotonic() - at < self._ttl

    def remember(self, source_id: str) -> None:
        with self._lock:
            self._seen[source_id] = time.monotonic()


# -- the intake ----------------------------------------------------------------------------


class _IntakeServices(Protocol):
    @property
    def registry(self) -> Registry: ...

    @property
    def metrics(self) -> Metrics: ...


class WebhookIntake:
    """Verify one webhook request and record it against its source's queued ticket.

    Secrets come from :class:`WebhookSecrets` (``secrets_file`` is read now,
    and again when it changes; ``secrets_clock`` paces those checks).  The
    checks run in the order that leaks least: unknown source (no secret or
    not in the registry) 404, size 413, signature 401, body 400, timestamp
    409, replay 409.  Every refusal is counted by reason and writes nothing.
    Accepted deliveries of concurrent requests share one registry commit
    (:class:`DeliveryBatcher`).  ``providers`` (the composition root's,
    built from the connector specs, or a callable giving them, called on the
    first request so a process that takes no webhook loads no connector) are
    served with :data:`GENERIC`; None: :data:`GENERIC` alone.
    """

    def __init__(self, settings: WebhookSettings, services: _IntakeServices, *,
                 clock: Callable[[], float] = time.time, source_ttl_s: float = 5.0,
                 secrets_clock: Callable[[], float] = time.monotonic,
                 providers: Callable[[], WebhookProviders | None] | WebhookProviders | None = None) -> None:
        self.settings, self._services, self.clock = settings, services, clock
        self._providers_from = providers
        self._providers: WebhookProviders | None = None
        self._providers_lock = threading.Lock()
        self._secrets = WebhookSecrets(settings, clock=secrets_clock)
        self._known = _KnownSources(source_ttl_s)
        self._batcher = DeliveryBatcher(self._write, on_batch=lambda n: self.metrics.webhook_batch_size.observe(n))

    # Looked up per call: the HTTP app is built before the registry is (and a test's fake has none).
    @property
    def registry(self) -> Registry:
        return self._services.registry

    @property
    def metrics(self) -> Metrics:
        return self._services.metrics

    def _write(self, batch: list[DeliveryRequest]) -> list[TicketJoin | Exception]:
        """One group commit; ``now`` is this intake's clock, so the replay window follows it."""
        now = dt.datetime.fromtimestamp(self.clock(), dt.UTC)
        return list(self.registry.accept_deliveries(batch, now=now, replay_window_s=self.settings.replay_window_s))

    @property
    def providers(self) -> WebhookProviders:
        """:data:`GENERIC` and the providers given (loaded once, on first use: may block, see
        :attr:`providers_loaded`)."""
        if self._providers is None:
            with self._providers_lock:  # concurrent first requests load once
                if self._providers is None:
                    given = self._providers_from() if callable(self._providers_from) else self._providers_from
                    given = given or WebhookProviders()
                    self._providers = WebhookProviders({GENERIC.name: GENERIC, **given.providers},
                                                       given.ref_options)
        return self._providers

    @property
    def providers_loaded(self) -> bool:
        """True once :attr:`providers` answers without calling the loader (no thread hop needed)."""
        return self._providers is not None

    def provider(self, name: str) -> WebhookProvider:
        """The provider served at ``/v1/webhooks/{name}/...``, or 404."""
        found = self.providers.providers.get(name)
        if found is None:
            raise Rejected(404, "unknown_source", "no such webhook provider")
        return found

    def secret_for(self, source_id: str) -> str:
        """The source's secret, or 404 when it has none or the registry does not know it (may read the registry)."""
        secret = self._secrets.get(source_id)
        if not secret:
            raise Rejected(404, "unknown_source", "no such webhook source")
        if not self._known.fresh(source_id):
            try:
                removed = self.registry.get_source(source_id).removed
            except NotFoundError:
                removed = True
            if removed:  # a removed source takes no webhooks (`freshindex sources remove`)
                raise Rejected(404, "unknown_source", "no such webhook source")
            self._known.remember(source_id)
        return secret

    def _other_ref(self, provider: WebhookProvider, source_id: str, pushed: str | None) -> str | None:
        """Why a verified event does not concern ``source_id``, or None.

        A source of a kind the provider does not take is refused (404).  A
        push's ref (``refs/heads/main``, ``refs/tags/v2.0``; GitHub, GitLab,
        and a generic body that names one) must be the ref the source follows
        (the option its kind's ``ref_option`` names, git: ``ref``); a source
        without one, or a payload without a ref, syncs on any push.
        """
        kinds = provider.kinds
        if kinds is None and not pushed:
            return None
        try:
            source = self.registry.get_source(source_id)
        except NotFoundError:
            return None  # the ticket join answers 404
        if kinds is not None and source.kind not in kinds:
            raise Rejected(404, "unknown_source", f"no such {provider.name} webhook source")
        option = self.providers.ref_options.get(source.kind)
        wanted = str((source.options or {}).get(option) or "") if option and pushed else ""
        if not pushed or not wanted or wanted == "HEAD" or ref_matches(wanted, pushed):
            return None
        return f"push to {pushed[:200]}: {source_id} follows {wanted}, nothing to sync"

    def source_checked(self, source_id: str) -> bool:
        """True when :meth:`secret_for` would answer without reading the registry or the secrets file (no
        thread hop needed: this runs on the event loop)."""
        return bool(self._secrets.cached(source_id)) and self._known.fresh(source_id)

    def reject(self, exc: Rejected) -> Rejected:
        self.metrics.webhook_rejections.labels(exc.reason).inc()
        return exc

    def receive(self, provider: str, source_id: str, headers: Mapping[str, str], body: bytes) -> Accepted:
        """The whole decision for one request; raises :class:`Rejected` (counted) or returns what was done."""
        try:
            outcome = self._receive(provider, source_id, {k.lower(): v for k, v in headers.items()}, body)
        except Rejected as exc:
            raise self.reject(exc) from None
        except Exception:  # the registry write failed (503 from the app): nothing was recorded, the sender retries
            label = provider if provider in self.providers.providers else "unknown"
            self.metrics.webhook_events.labels(label, "failed").inc()
            raise
        self.metrics.webhook_events.labels(provider, "accepted" if outcome.ticket_id else "ignored").inc()
        return outcome

    def _receive(self, provider: str, source_id: str, h: Mapping[str, str], body: bytes) -> Accepted:
        handler = self.provider(provider)
        secret = self.secret_for(source_id)
        if len(body) > self.settings.max_body_bytes:
            raise Rejected(413, "too_large", f"body over {self.settings.max_body_bytes} bytes")
        event = handler.read(secret, h, body, now=self.clock(), max_skew_s=self.settings.max_skew_s)
        if event.note is not None:
            return Accepted(None, note=event.note)
        if (other := self._other_ref(handler, source_id, event.ref)) is not None:
            return Accepted(None, note=other)
        delivery, paths, digest = event.delivery, event.paths, event.digest
        if not delivery or len(delivery) > 255:
            raise Rejected(400, "malformed", "a delivery id header (1-255 characters) is required")
        if delivery.startswith(DIGEST_PREFIX):  # that key space holds the digests of signed content
            raise Rejected(400, "malformed", f"a delivery id may not start with {DIGEST_PREFIX!r}")
        if event.empty_note is not None and not paths:
            return Accepted(None, note=event.empty_note)
        try:
            join = self._batcher.submit(DeliveryRequest(source_id, delivery, paths, digest))
        except ReplayedBody:
            raise Rejected(409, "replayed_body", "this signed content was already received (under another "
                           "delivery id)") from None
        except DuplicateDelivery:
            raise Rejected(409, "replayed", "delivery id already received") from None
        except NotFoundError:  # removed since the check above
            raise Rejected(404, "unknown_source", "no such webhook source") from None
        return Accepted(join.ticket_id, joined=join.joined)


async def read_capped(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it is over ``limit`` bytes (Content-Length or bytes read).

    Never reads more than one chunk past the limit, whatever the client
    declared or sends.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                return None
        except ValueError:
            return None
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def router(intake: WebhookIntake) -> APIRouter:
    """The webhook routes; authenticated by their own signatures, never by the query API's credentials."""
    r = APIRouter()

    @r.post("/v1/webhooks/{provider}/{source_id}", status_code=202, response_model=None, responses={
        202: {"model": schema.WebhookAccepted, "description": "Verified: a sync ticket queued or joined."},
        200: {"model": schema.WebhookIgnored, "description": "Verified, asks for no sync (a ping)."},
        **{status: {"model": schema.WebhookRejected, "description": what} for status, what in (
            (401, "Missing or bad signature."), (404, "Unknown provider, or a source without a secret."),
            (409, "A replayed delivery or a stale timestamp."), (413, "The body is over webhooks.max_body_bytes."),
            (422, "A body that is not the provider's event."), (503, "The registry is down; retry."))}})
    async def webhook(provider: str, source_id: str, request: Request) -> JSONResponse:
        try:
            # Before reading the body: an unknown source costs us no bytes.  The first request loads the
            # providers (connector specs, maybe the registry or files): off the event loop.
            if intake.providers_loaded:
                intake.provider(provider)
            else:
                await run_in_threadpool(intake.provider, provider)
            if not intake.source_checked(source_id):
                await run_in_threadpool(intake.secret_for, source_id)
            body = await read_capped(request, intake.settings.max_body_bytes)
            if body is None:
                raise Rejected(413, "too_large", f"body over {intake.settings.max_body_bytes} bytes")
        except Rejected as exc:
            intake.reject(exc)
            return JSONResponse(status_code=exc.status, content={"error": exc.reason, "detail": exc.detail})
        try:
            out = await run_in_threadpool(intake.receive, provider, source_id, dict(request.headers), body)
        except Rejected as exc:
            return JSONResponse(status_code=exc.status, content={"error": exc.reason, "detail": exc.detail})
        if out.ticket_id is None:
            return JSONResponse(status_code=200, content={"ticket": None, "detail": out.note})
        return JSONResponse(status_code=202, content={"ticket": out.ticket_id, "joined": out.joined})

    return r


__all__ = ["GENERIC", "REASONS", "Accepted", "DeliveryBatcher", "GenericEvents", "Rejected", "WebhookIntake",
           "WebhookSecrets", "check_timestamp", "delivery_digest", "generic_paths", "read_capped", "ref_matches",
           "router", "sign_generic", "sign_github"]
