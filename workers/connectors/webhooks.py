"""The webhook providers the built-in kinds declare: GitHub and GitLab pushes (git), S3 event notifications (s3).

* GitHub: ``X-Hub-Signature-256: sha256=<hmac(secret, raw body)>``,
  ``X-GitHub-Delivery``, ``X-GitHub-Event`` (``push`` syncs, ``ping`` and
  other events are verified and ask for nothing);
* GitLab: ``X-Gitlab-Token`` (compared in constant time), delivery id from
  ``X-Gitlab-Event-UUID`` or ``Idempotency-Key``;
* S3 event notifications posted directly, signed like the generic endpoint
  (``X-Freshindex-Timestamp``, ``X-Freshindex-Signature``): S3 signs nothing
  itself, something in front of it must sign.

Each is a :class:`~core.webhooks.WebhookProvider`; the specs list them
(``ConnectorSpec.webhook_providers``) and the intake (``api.routes_webhooks``)
does the rest.  They take requests for a source of any kind, as before
the providers moved here.  What it does not do: poll an SQS queue, or catch
a GitHub/GitLab replay older than the replay window (those carry no signed
timestamp).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote_plus

from freshindex.core.webhooks import (
    Rejected,
    WebhookEvent,
    check_signature,
    check_timestamp,
    check_timestamped,
    delivery_digest,
    json_body,
    pushed_ref,
    sign_github,
    strings,
)


def push_paths(body: bytes) -> list[str] | None:
    """Changed paths of a GitHub or GitLab push: added, modified and removed of every commit.

    None (a full listing) when the payload lists no commits' files (a
    force-push or a push of more commits than the payload carries).
    """
    data = json_body(body)
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
            paths.update(strings(c.get(k, []), f"commits[].{k}"))
    return sorted(paths) or None


def s3_paths(body: bytes) -> list[str]:
    """Object keys of an S3 event notification (URL-decoded), for ObjectCreated/ObjectRemoved records."""
    data = json_body(body)
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


@dataclass(frozen=True)
class GitHubPush:
    name: str = "github"
    kinds: frozenset[str] | None = None

    def read(self, secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
             max_skew_s: float) -> WebhookEvent:
        check_signature(sign_github(secret, body), headers.get("x-hub-signature-256"))
        event = headers.get("x-github-event", "")
        if event != "push":
            return WebhookEvent(note=f"{event or 'unnamed'} event: nothing to sync")
        return WebhookEvent(headers.get("x-github-delivery"), delivery_digest(self.name, body), push_paths(body),
                            pushed_ref(body))


@dataclass(frozen=True)
class GitLabPush:
    name: str = "gitlab"
    kinds: frozenset[str] | None = None

    def read(self, secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
             max_skew_s: float) -> WebhookEvent:
        token = headers.get("x-gitlab-token")
        if not token:
            raise Rejected(401, "missing_signature", "X-Gitlab-Token missing")
        if not hmac.compare_digest(secret.encode(), token.encode()):
            raise Rejected(401, "bad_signature", "token does not match")
        event = headers.get("x-gitlab-event", "")
        if event not in ("Push Hook", "Tag Push Hook", "System Hook"):
            return WebhookEvent(note=f"{event or 'unnamed'} event: nothing to sync")
        delivery = headers.get("x-gitlab-event-uuid") or headers.get("idempotency-key")
        return WebhookEvent(delivery, delivery_digest(self.name, body), push_paths(body), pushed_ref(body))


@dataclass(frozen=True)
class S3Events:
    """S3 notifications: no ref (a bucket has none); a notification of no object change syncs nothing."""

    name: str = "s3"
    kinds: frozenset[str] | None = None

    def read(self, secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
             max_skew_s: float) -> WebhookEvent:
        timestamp, digest = check_timestamped(self.name, secret, headers, body)
        paths = s3_paths(body)
        check_timestamp(timestamp, now=now, max_skew_s=max_skew_s)
        return WebhookEvent(headers.get("x-freshindex-delivery"), digest, paths,
                            empty_note="no ObjectCreated/ObjectRemoved record: nothing to sync")


GITHUB, GITLAB, S3_EVENTS = GitHubPush(), GitLabPush(), S3Events()

__all__ = ["GITHUB", "GITLAB", "S3_EVENTS", "GitHubPush", "GitLabPush", "S3Events", "push_paths", "s3_paths"]
