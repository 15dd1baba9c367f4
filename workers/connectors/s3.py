"""An S3 bucket and prefix as a source, through boto3.

Keys are the object keys below the prefix.  The client is passed in (built by
:func:`settings.s3.s3_client_from`, the one factory, re-exported here), so
tests point it at a local S3 endpoint.

Errors are converted here, one rule for listing and fetching: a problem of
one object (gone, access denied, archived) is a :class:`DocumentError`; a
problem of the endpoint or the bucket (connection refused or reset,
timeouts, 5xx, throttling, a bucket that no longer exists, bad credentials)
is a :class:`SourceError`, which is retryable: a fetch is retried by
:func:`workers.connectors.retry.fetch_with_retry`, a failed listing fails the
run and the source stays due.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from freshindex.acl.model import is_sidecar
from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.core.types import ObjectRef
from freshindex.settings.s3 import s3_client, s3_client_from
from freshindex.workers.connectors import AclTags, Sidecars
from freshindex.workers.connectors.options import SourceOptions
from freshindex.workers.connectors.registry import ConnectorEnv, ConnectorOption, ConnectorSpec, SourceLike
from freshindex.workers.connectors.webhooks import S3_EVENTS

#: Error codes that concern one object, not the endpoint or the bucket.
_VANISHED = frozenset({"NoSuchKey", "404"})
_UNREADABLE = frozenset({"AccessDenied", "403", "InvalidObjectState"})


def parse_location(location: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix)."""
    parts = urlsplit(location)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"S3 location must look like s3://bucket/prefix, got {location!r}")
    prefix = parts.path.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return parts.netloc, prefix


class S3Connector:
    def __init__(self, client: Any, location: str, *, max_bytes: int) -> None:
        self.client = client
        self.bucket, self.prefix = parse_location(location)
        self.max_bytes = max_bytes
        #: ACL sidecars the last listing saw (never listed as documents).
        self.sidecar_keys: set[str] = set()

    def list(self) -> Iterator[ObjectRef]:
        paginator = self.client.get_paginator("list_objects_v2")
        self.sidecar_keys = set()
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(self.prefix) :]
                    if not key or key.endswith("/"):
                        continue
                    if is_sidecar(key):
                        self.sidecar_keys.add(key)
                        continue
                    yield ObjectRef(
                        key=key,
                        etag=obj.get("ETag", "").strip('"') or None,
                        size=int(obj.get("Size", 0)),
                        modified=obj["LastModified"].timestamp() if obj.get("LastModified") else None,
                    )
        except (ClientError, BotoCoreError) as exc:
            raise SourceError(f"cannot list s3://{self.bucket}/{self.prefix}: {exc}") from exc

    def fetch(self, key: str) -> bytes:
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _VANISHED:
                raise DocumentError(DocumentError.VANISHED, f"{key} disappeared after listing") from exc
            if code in _UNREADABLE:
                raise DocumentError(DocumentError.UNREADABLE, f"cannot read {key}: {code}") from exc
            raise SourceError(f"cannot fetch s3://{self.bucket}/{self.prefix}{key}: {exc}") from exc
        except BotoCoreError as exc:
            raise SourceError(f"cannot fetch s3://{self.bucket}/{self.prefix}{key}: {exc}") from exc
        length = int(obj.get("ContentLength") or 0)
        if length > self.max_bytes:
            obj["Body"].close()
            raise DocumentError(DocumentError.TOO_LARGE, f"{length} bytes, limit {self.max_bytes}")
        try:
            data = obj["Body"].read(self.max_bytes + 1)
        except (BotoCoreError, OSError) as exc:
            # The connection broke while streaming the body (reset, read
            # timeout, truncated response): the endpoint's problem, not the object's.
            raise SourceError(f"cannot read s3://{self.bucket}/{self.prefix}{key}: {exc}") from exc
        if len(data) > self.max_bytes:
            raise DocumentError(DocumentError.TOO_LARGE, f"more than {self.max_bytes} bytes")
        return data

    def acl_tags(self, key: str) -> dict[str, str]:
        """An object's ``acl-*`` user metadata and tags (tags win), for ACL resolution.

        Two requests (HEAD and GetObjectTagging); errors raise
        :class:`core.errors.SourceError` (the resolver fails closed).
        """
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
            tagging = self.client.get_object_tagging(Bucket=self.bucket, Key=self.prefix + key)
        except (ClientError, BotoCoreError) as exc:
            raise SourceError(f"cannot read the ACL tags of s3://{self.bucket}/{self.prefix}{key}: {exc}") from exc
        out = {k.lower(): v for k, v in (head.get("Metadata") or {}).items() if k.lower().startswith("acl-")}
        out.update({t["Key"].lower(): t["Value"] for t in tagging.get("TagSet", [])
                    if t.get("Key", "").lower().startswith("acl-")})
        return out


def _build(source: SourceLike, env: ConnectorEnv) -> S3Connector:
    client = s3_client_from(env.sources.s3, endpoint_url=source.options.get("endpoint_url"),
                            region=source.options.get("region"))
    return S3Connector(client, source.location, max_bytes=env.max_bytes)


def _check_location(location: str, _options: Mapping[str, Any]) -> str:
    parse_location(location)
    return location


class S3Options(SourceOptions):
    """An S3 source's options."""

    endpoint_url: str | None = None
    region: str | None = None


SPEC = ConnectorSpec(
    kind="s3",
    build=_build,
    source_uri=lambda location, key: f"{location.rstrip('/')}/{key}",
    location_help="s3://bucket/prefix",
    check_location=_check_location,
    options=(ConnectorOption("endpoint_url", "S3 endpoint (MinIO, a local S3); default: settings sources.s3"),
             ConnectorOption("region", "the bucket's region")),
    hooks=(AclTags, Sidecars),
    options_model=S3Options,
    webhook_providers=(S3_EVENTS,),
)

__all__ = ["SPEC", "S3Connector", "parse_location", "s3_client", "s3_client_from"]
