"""What a webhook provider is, and the pieces every provider shares: the refusal, signatures, payload reads.

A provider (:class:`WebhookProvider`) turns one request (headers and raw
body) into a :class:`WebhookEvent`: it checks the request against the
source's secret and reads the delivery id, the digest of what its signature
covers, the changed keys and the ref a push names.  Providers are declared
by the connector specs (``ConnectorSpec.webhook_providers``) and handed to
the HTTP intake by the composition root as a :class:`WebhookProviders`
(``Services.webhook_providers``); the intake (``api.routes_webhooks``) owns
the order of the remaining checks, the replay window and the ticket.

What it does not do: read a secret, the registry or the clock (the caller
passes ``now``); decide whether a source follows the ref a push names (the
intake does, with :attr:`WebhookProviders.ref_options`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Every rejection reason (a bounded label set: request input never becomes a label).
REASONS = ("missing_signature", "bad_signature", "replayed", "replayed_body", "stale_timestamp", "unknown_source",
           "too_large", "malformed")


class Rejected(Exception):
    """A refused request: ``status`` and ``reason`` (one of :data:`REASONS`) go to the caller and the metric."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


@dataclass(frozen=True)
class WebhookEvent:
    """What a provider read from a verified request.

    ``note`` set: verified, asks for no sync (a ping), and nothing else is
    checked.  ``ref``: the ref a push names (checked against the ref the
    source follows).  ``paths`` None: a full listing.  ``empty_note`` set:
    an event naming no paths asks for no sync (an S3 notification of other
    events), answered with that note once its delivery id is checked.
    """

    delivery: str | None = None
    digest: str = ""
    paths: list[str] | None = None
    ref: str | None = None
    note: str | None = None
    empty_note: str | None = None


class WebhookProvider(Protocol):
    """One ``/v1/webhooks/{name}/{source}`` endpoint's signing scheme and payload."""

    @property
    def name(self) -> str:
        """The URL segment (``github``); also the metric label, so a fixed word."""
        ...

    @property
    def kinds(self) -> frozenset[str] | None:
        """The source kinds it takes requests for; None: any kind."""
        ...

    def read(self, secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
             max_skew_s: float) -> WebhookEvent:
        """Check ``headers`` (lower-cased) and ``body`` against ``secret`` and read the event, or raise
        :class:`Rejected` (401 signature, 400 malformed, 409 stale timestamp)."""
        ...


@dataclass(frozen=True)
class WebhookProviders:
    """What the composition root gives the intake: providers by name, and the option naming the one ref a
    source of each kind follows (``{"git": "ref"}``)."""

    providers: Mapping[str, WebhookProvider] = field(default_factory=dict)
    ref_options: Mapping[str, str] = field(default_factory=dict)


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


def check_timestamped(provider: str, secret: str, headers: Mapping[str, str], body: bytes) -> tuple[str, str]:
    """Check the ``X-Freshindex-Signature`` scheme's signature; the timestamp as sent and the digest.

    The timestamp's age is the caller's to check (:func:`check_timestamp`), after it has read the body.
    """
    timestamp = headers.get("x-freshindex-timestamp") or ""
    check_signature(sign_generic(secret, timestamp, body), headers.get("x-freshindex-signature"))
    return timestamp, delivery_digest(provider, body, timestamp)


def json_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise Rejected(400, "malformed", "body is not JSON") from None


def pushed_ref(body: bytes) -> str | None:
    """The ``ref`` a JSON body names (``refs/heads/main``), or None."""
    data = json_body(body)
    ref = data.get("ref") if isinstance(data, dict) else None
    return ref if isinstance(ref, str) and ref else None


def strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise Rejected(400, "malformed", f"{what} must be a list of non-empty strings")
    return value


def ref_matches(wanted: str, pushed: str) -> bool:
    """Whether a push to ``pushed`` (a full ref name) moves ``wanted`` (a branch, a tag or a full ref name)."""
    return pushed in (wanted, f"refs/heads/{wanted}", f"refs/tags/{wanted}")


__all__ = ["REASONS", "Rejected", "WebhookEvent", "WebhookProvider", "WebhookProviders", "check_signature",
           "check_timestamp", "check_timestamped", "delivery_digest", "hmac_hex", "json_body", "pushed_ref",
           "ref_matches", "sign_generic", "sign_github", "strings"]
