"""Signed webhooks that ask for a sync; :mod:`api.dispatcher` turns their tickets into syncs.

Four endpoints (``/v1/webhooks/{github,gitlab,s3,generic}/{source}``), each
verified with the source's own secret (``webhooks.secrets``, or
``webhooks.secrets_file``, followed without a restart: :class:`WebhookSecrets`),
never with the query API's credentials:

* GitHub: ``X-Hub-Signature-256: sha256=<hmac(secret, raw body)>``,
  ``X-GitHub-Delivery``, ``X-GitHub-Event`` (``push`` syncs, ``ping`` and
  other events are answered 200 and enqueue nothing);
* GitLab: ``X-Gitlab-Token`` (compared in constant time), delivery id from
  ``X-Gitlab-Event-UUID`` or ``Idempotency-Key``;
* S3 event notifications posted directly, and generic JSON
  (``{"paths": [...]}``, no ``paths`` = full listing): ``X-Freshindex-Timestamp``,
  ``X-Freshindex-Delivery``, ``X-Freshindex-Signature:
  sha256=<hmac(secret, f"{timestamp}.{raw body}")>``.  (S3 signs nothing
  itself: something in front of it must sign; polling an SQS queue is not
  done here.)

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

A git source follows one ref (its ``ref`` option): a verified push whose
payload names another ref (``"ref": "refs/heads/feature"``) is answered 200
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
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote_plus

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from freshindex.api import schema
from freshindex.api.webhook_secrets import WebhookSecrets
from freshindex.core.errors import NotFoundError, RetryableError
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

PROVIDERS = ("github", "gitlab", "s3", "generic")
#: Every rejection reason (a bounded label set: request input never becomes a label).
REASONS = ("missing_signature", "bad_signature", "replayed", "replayed_body", "stale_timestamp", "unknown_source",
           "too_large", "malformed")

class Rejected(Exception):
    """A refused request: ``status`` and ``reason`` (one of :data:`REASONS`) go to the caller and the metric."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


@dataclass(frozen=True)
class Accepted:
    """A taken request: ``ticket_id`` None when the event was verified but asks for no sync (ping)."""

    ticket_id: int | None
    joined: bool = False
    note: str | None = None


# -- signatures and payloads (plain functions) ---------------------------------------------


def hmac_hex(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_generic(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Freshindex-Signature`` value for ``body`` sent at ``timestamp`` (unix seconds, as sent)."""
    return "sha256=" + hmac_hex(secret, timestamp.encode() + b"." + body)


def sign_github(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body`` (the raw bytes, never a re-serialisation)."""
    return "sha256=" + hmac_hex(secret, body)


def delivery_digest(provider: str, body: bytes, timestamp: str | None = None) -> str:
    """Hex sha256 of what ``provider``'s signature covers: the same signed content is the same delivery.

    Generic and S3 share one scheme (``timestamp.body``), so a body signed
    for one is a replay on the other; GitHub and GitLab cover the body alone.
    """
    scheme = "hmac-timestamp" if provider in ("generic", "s3") else provider
    signed = body if timestamp is None else timestamp.encode() + b"." + body
    return hashlib.sha256(scheme.encode() + b"\n" + signed).hexdigest()


def check_signature(expected: str, given: str | None) -> None:
    if not given:
        raise Rejected(401, "missing_signature", "signature header missing")
    if not hmac.compare_digest(expected.encode(), given.strip().encode()):
        raise Rejected(401, "bad_signature", "signature does not match")


def check_timestamp(given: str | None, *, now: float, max_skew_s: float) -> None:
    try:
        ts = int((given or "").strip())
    except ValueError:
        raise Rejected(401, "missing_signature", "X-Freshindex-Timestamp missing or not unix seconds") from None
    if abs(now - ts) > max_skew_s:
        raise Rejected(409, "stale_timestamp", f"timestamp is {now - ts:+.0f} s from now (limit {max_skew_s:.0f})")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Rejected(400, "malformed", "body is not JSON") from None


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise Rejected(400, "malformed", f"{what} must be a list of non-empty strings")
    return value


def push_paths(body: bytes) -> list[str] | None:
    """Changed paths of a GitHub or GitLab push: added, modified and removed of every commit.

    None (a full listing) when the payload lists no commits' files (a
    force-push or a push of more commits than the payload carries).
    """
    data = _json(body)
    if not isinstance(data, dict):
        raise Rejected(400, "malformed", "push payload must be an object")
    commits = data.get("commits")
    if commits is None:
        return None
    if not isinstance(commits, list) or not all(isinstance(c, dict) for c in commits):
        raise Rejected(400, "malformed", "commits must be a list of objects")
    paths: set[str] = set()
    for c in commits:
        for k in ("added", "modified", "removed"):
            paths.update(_strings(c.get(k, []), f"commits[].{k}"))
    return sorted(paths) or None


def ref_matches(wanted: str, pushed: str) -> bool:
    """Whether a push to ``pushed`` (a full ref name) moves ``wanted`` (a branch, a tag or a full ref name)."""
    return pushed in (wanted, f"refs/heads/{wanted}", f"refs/tags/{wanted}")


def s3_paths(body: bytes) -> list[str]:
    """Object keys of an S3 event notification (URL-decoded), for ObjectCreated/ObjectRemoved records."""
    data = _json(body)
    records = data.get("Records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise Rejected(400, "malformed", "an S3 notification has a Records list")
    keys: set[str] = set()
    for r in records:
        try:
            event, key = r["eventName"], r["s3"]["object"]["key"]
        except (KeyError, TypeError):
            raise Rejected(400, "malformed", "each record needs eventName and s3.object.key") from None
        if not isinstance(event, str) or not isinstance(key, str):
            raise Rejected(400, "malformed", "eventName and s3.object.key are strings")
        if event.startswith(("ObjectCreated:", "ObjectRemoved:")):
            keys.add(unquote_plus(key))  # S3 sends keys form-encoded ("a+b%2Fc" is "a b/c")
    return sorted(keys)


def generic_paths(body: bytes) -> list[str] | None:
    data = _json(body)
    if not isinstance(data, dict):
        raise Rejected(400, "malformed", "body must be a JSON object")
    if data.get("paths") is None:
        return None
    return sorted(set(_strings(data["paths"], "paths"))) or None


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
    (:class:`DeliveryBatcher`).
    """

    def __init__(self, settings: WebhookSettings, services: _IntakeServices, *,
                 clock: Callable[[], float] = time.time, source_ttl_s: float = 5.0,
                 secrets_clock: Callable[[], float] = time.monotonic) -> None:
        self.settings, self._services, self.clock = settings, services, clock
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

    def _other_ref(self, source_id: str, body: bytes) -> str | None:
        """Why a verified push does not concern ``source_id``, or None: a git source follows one ref.

        A push payload's ``ref`` (``refs/heads/main``, ``refs/tags/v2.0``; GitHub, GitLab, and a generic body
        that names one) must be the ref the source indexes (its ``ref`` option); a source without one, or a
        payload without a ref, syncs on any push.
        """
        data = _json(body)
        pushed = data.get("ref") if isinstance(data, dict) else None
        if not isinstance(pushed, str) or not pushed:
            return None
        try:
            source = self.registry.get_source(source_id)
        except NotFoundError:
            return None  # the ticket join answers 404
        wanted = str((source.options or {}).get("ref") or "") if source.kind == "git" else ""
        if not wanted or wanted == "HEAD" or ref_matches(wanted, pushed):
            return None
        return f"push to {pushed[:200]}: {source_id} follows {wanted}, nothing to sync"

    def source_checked(self, source_id: str) -> bool:
        """True when :meth:`secret_for` would answer without reading the registry (no thread hop needed)."""
        return bool(self._secrets.get(source_id)) and self._known.fresh(source_id)

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
            self.metrics.webhook_events.labels(provider if provider in PROVIDERS else "unknown", "failed").inc()
            raise
        self.metrics.webhook_events.labels(provider, "accepted" if outcome.ticket_id else "ignored").inc()
        return outcome

    def _receive(self, provider: str, source_id: str, h: Mapping[str, str], body: bytes) -> Accepted:
        if provider not in PROVIDERS:
            raise Rejected(404, "unknown_source", "no such webhook provider")
        secret = self.secret_for(source_id)
        if len(body) > self.settings.max_body_bytes:
            raise Rejected(413, "too_large", f"body over {self.settings.max_body_bytes} bytes")
        paths: list[str] | None
        if provider == "github":
            check_signature(sign_github(secret, body), h.get("x-hub-signature-256"))
            event = h.get("x-github-event", "")
            if event != "push":
                return Accepted(None, note=f"{event or 'unnamed'} event: nothing to sync")
            delivery = h.get("x-github-delivery")
            digest = delivery_digest(provider, body)
            paths = push_paths(body)
        elif provider == "gitlab":
            token = h.get("x-gitlab-token")
            if not token:
                raise Rejected(401, "missing_signature", "X-Gitlab-Token missing")
            if not hmac.compare_digest(secret.encode(), token.encode()):
                raise Rejected(401, "bad_signature", "token does not match")
            event = h.get("x-gitlab-event", "")
            if event not in ("Push Hook", "Tag Push Hook", "System Hook"):
                return Accepted(None, note=f"{event or 'unnamed'} event: nothing to sync")
            delivery = h.get("x-gitlab-event-uuid") or h.get("idempotency-key")
            digest = delivery_digest(provider, body)
            paths = push_paths(body)
        else:
            timestamp = h.get("x-freshindex-timestamp") or ""
            check_signature(sign_generic(secret, timestamp, body), h.get("x-freshindex-signature"))
            paths = s3_paths(body) if provider == "s3" else generic_paths(body)
            check_timestamp(timestamp, now=self.clock(), max_skew_s=self.settings.max_skew_s)
            delivery = h.get("x-freshindex-delivery")
            digest = delivery_digest(provider, body, timestamp)
        if provider != "s3" and (other := self._other_ref(source_id, body)) is not None:
            return Accepted(None, note=other)
        if not delivery or len(delivery) > 255:
            raise Rejected(400, "malformed", "a delivery id header (1-255 characters) is required")
        if delivery.startswith(DIGEST_PREFIX):  # that key space holds the digests of signed content
            raise Rejected(400, "malformed", f"a delivery id may not start with {DIGEST_PREFIX!r}")
        if provider == "s3" and not paths:
            return Accepted(None, note="no ObjectCreated/ObjectRemoved record: nothing to sync")
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
            # Before reading the body: an unknown source costs us no bytes.
            if provider not in PROVIDERS:
                raise Rejected(404, "unknown_source", "no such webhook provider")
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


__all__ = ["PROVIDERS", "REASONS", "Accepted", "DeliveryBatcher", "Rejected", "WebhookIntake", "WebhookSecrets",
           "delivery_digest",
           "read_capped", "router", "sign_generic", "sign_github"]
