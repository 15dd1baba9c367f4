"""Source connectors: list object refs, fetch bytes.

A connector never decides what changed; it reports what is there (keys with
etags and sizes) and hands over bytes.  Keys are checked by :func:`check_key`
before anything is fetched, whatever the connector.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from freshindex.core.errors import ConfigError, DocumentError
from freshindex.core.types import ObjectRef

KINDS = ("folder", "s3")


class Connector(Protocol):
    def list(self) -> Iterator[ObjectRef]: ...

    def fetch(self, key: str) -> bytes: ...


def check_key(key: str) -> str:
    """Refuse keys that could escape a folder or confuse a citation."""
    if not key or len(key) > 1024:
        raise DocumentError(DocumentError.UNSAFE_KEY, "empty or over-long key")
    if any(ord(c) < 32 for c in key) or "\\" in key:
        raise DocumentError(DocumentError.UNSAFE_KEY, f"control character or backslash in key {key!r}")
    if key.startswith("/") or any(part in ("..", ".") for part in key.split("/")):
        raise DocumentError(DocumentError.UNSAFE_KEY, f"key {key!r} escapes its source (absolute or '..')")
    return key


def build_connector(kind: str, location: str, options: dict[str, Any], *, max_bytes: int, s3: Any = None) -> Connector:
    """A connector for a registered source; ``s3`` is the S3 settings block."""
    if kind == "folder":
        from freshindex.workers.connectors.folder import FolderConnector

        return FolderConnector(location, max_bytes=max_bytes)
    if kind == "s3":
        from freshindex.workers.connectors.s3 import S3Connector, s3_client_from

        client = s3_client_from(s3, endpoint_url=options.get("endpoint_url"), region=options.get("region"))
        return S3Connector(client, location, max_bytes=max_bytes)
    raise ConfigError(f"unknown source kind {kind!r}; known: {', '.join(KINDS)}")
