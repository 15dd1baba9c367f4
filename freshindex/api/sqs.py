"""S3 event notifications through SQS: a poller feeding the webhook coalescer.

S3 delivers ``ObjectCreated:*``/``ObjectRemoved:*`` notifications to an SQS
queue (``webhooks.sqs_queue_url``); this poller long-polls it, maps each
record's bucket and key to the S3 sources whose ``s3://bucket/prefix``
holds the key, and joins each source's sync ticket exactly as a posted
webhook does (:meth:`registry.Registry.accept_delivery`, delivery id
``sqs-<MessageId>``), so a burst of objects is one sync and ``freshindex
syncs show`` follows it.  ``freshindex serve`` runs it in a thread when the
queue is set; ``freshindex sqs-poll`` runs it alone.

A message is deleted once every ticket it names is recorded (a redelivered
copy is a duplicate delivery and is deleted too); one that cannot be read
is counted (``freshindex_webhook_rejections_total{reason="malformed"}``),
logged and deleted, so it cannot block the queue.  When the registry is
down the message is left for SQS to redeliver.  The queue is a trust
boundary as much as a webhook is: anyone who may send to it may trigger
syncs (never more: events only name keys, the sync lists the source).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from freshindex.api.services import ApiServices
from freshindex.core.errors import NotFoundError, RetryableError
from freshindex.registry.webhooks import DuplicateDelivery

log = logging.getLogger("freshindex.sqs")

_EVENTS = ("ObjectCreated:", "ObjectRemoved:")
_MAX_BODY = 256 * 1024  # SQS's own message limit


@dataclass(frozen=True)
class PollResult:
    messages: int = 0
    tickets: int = 0
    ignored: int = 0
    malformed: int = 0


def s3_records(body: str) -> list[tuple[str, str]] | None:
    """``(bucket, key)`` of the created/removed objects of one notification; None when unreadable.

    S3's ``s3:TestEvent`` (sent when notifications are configured) and other
    events give an empty list.
    """
    if len(body) > _MAX_BODY:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, dict) and "Records" not in data and data.get("Event") == "s3:TestEvent":
        return []
    records = data.get("Records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        return None
    out = []
    for r in records:
        try:
            event, bucket, key = r["eventName"], r["s3"]["bucket"]["name"], r["s3"]["object"]["key"]
        except (KeyError, TypeError):
            return None
        if not all(isinstance(v, str) for v in (event, bucket, key)):
            return None
        if event.startswith(_EVENTS):
            out.append((bucket, unquote_plus(key)))  # keys arrive form-encoded
    return out


class SqsPoller:
    """Long-poll one SQS queue and turn S3 notifications into sync tickets."""

    def __init__(self, registry: Any, metrics: Any, *, queue_url: str, client: Any, wait_s: int = 10) -> None:
        self.registry, self.metrics, self.queue_url, self.client, self.wait_s = registry, metrics, queue_url, client, wait_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sources_for(self, bucket: str, key: str) -> list[tuple[str, str]]:
        """(source id, key relative to its prefix) of every S3 source holding ``s3://bucket/key``."""
        out = []
        for src in self.registry.list_sources():
            if src.kind != "s3":
                continue
            parts = urlsplit(src.location)
            prefix = parts.path.lstrip("/")
            if prefix and not prefix.endswith("/"):
                prefix += "/"
            if parts.netloc == bucket and key.startswith(prefix):
                out.append((src.id, key[len(prefix):]))
        return out

    def poll_once(self) -> PollResult:
        """One receive (up to 10 messages, waiting up to ``wait_s``); returns what it did."""
        reply = self.client.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                            WaitTimeSeconds=self.wait_s, AttributeNames=["All"])
        messages = reply.get("Messages", [])
        tickets = ignored = malformed = 0
        for m in messages:
            records = s3_records(m.get("Body", ""))
            if records is None:
                malformed += 1
                self.metrics.webhook_rejections.labels("malformed").inc()
                log.warning("unreadable SQS message", extra={"event": "sqs_malformed", "detail": m.get("MessageId")})
                self._delete(m)
                continue
            by_source: dict[str, set[str]] = {}
            for bucket, key in records:
                for source_id, path in self._sources_for(bucket, key):
                    by_source.setdefault(source_id, set()).add(path)
            if not by_source:
                ignored += 1
            try:
                for source_id, paths in sorted(by_source.items()):
                    try:
                        self.registry.accept_delivery(source_id, f"sqs-{m['MessageId']}", sorted(paths))
                        tickets += 1
                    except (DuplicateDelivery, NotFoundError):
                        pass  # redelivered, or the source went: nothing more to record
            except RetryableError:
                log.warning("registry unavailable; SQS will redeliver", exc_info=True)
                continue  # leave the message: its visibility timeout brings it back
            self._delete(m)
        return PollResult(len(messages), tickets, ignored, malformed)

    def _delete(self, m: dict[str, Any]) -> None:
        self.client.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])

    def run(self) -> None:
        """Poll until :meth:`stop`; a failed receive (SQS down) is logged and retried after a pause."""
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # the poller must outlive an SQS or registry blip
                log.warning("SQS poll failed", exc_info=True, extra={"event": "sqs_poll_failed"})
                self._stop.wait(5.0)

    def start(self) -> SqsPoller:
        self._thread = threading.Thread(target=self.run, name="sqs-poller", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def sqs_client(settings: Any) -> Any:
    """A boto3 SQS client on ``sources.s3``'s endpoint, region and credentials."""
    import boto3

    s3 = settings.sources.s3
    secret = lambda v: v.get_secret_value() if v is not None else None  # noqa: E731
    return boto3.client("sqs", endpoint_url=s3.endpoint_url, region_name=s3.region,
                        aws_access_key_id=secret(s3.access_key_id), aws_secret_access_key=secret(s3.secret_access_key))


def start_poller(services: ApiServices) -> SqsPoller | None:
    """Start the poller in a thread when ``webhooks.sqs_queue_url`` is set (``serve``); None otherwise."""
    wh = services.settings.webhooks
    if not wh.sqs_queue_url:
        return None
    return SqsPoller(services.registry, services.metrics, queue_url=wh.sqs_queue_url,
                     client=sqs_client(services.settings), wait_s=wh.sqs_wait_s).start()


__all__ = ["PollResult", "SqsPoller", "s3_records", "sqs_client", "start_poller"]
