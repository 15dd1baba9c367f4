"""Where a document came from and when it is valid, read from what was fetched.

Markdown (and any text document) may open with a front matter block naming
its validity::

    ---
    version: 4
    valid_from: 2026-06-01
    valid_until: 2027-06-01T00:00:00Z
    supersedes: policies/travel-v3.md
    ---

``supersedes`` names the key (in the same source) or the document id of the
version it replaces; that version is withdrawn from retrieval once this one
is valid (``valid_from``, or when it was first seen).  Dates without a time
are midnight UTC; times without a zone are UTC.  A value that does not parse
is ignored (the document stays valid), never an error of the document.
"""

from __future__ import annotations

from typing import Any

from freshindex.core.payload import parse_time

_KEYS = ("valid_from", "valid_until", "supersedes", "version")
_MAX_FRONT_MATTER = 8192


def front_matter(data: bytes) -> dict[str, str]:
    """The ``key: value`` lines of a leading ``---`` block (first 8 KiB only), or {}."""
    head = data[:_MAX_FRONT_MATTER]
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    if not head.startswith(b"---\n") and not head.startswith(b"---\r\n"):
        return {}
    text = head.decode("utf-8", errors="replace").replace("\r\n", "\n")
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    out = {}
    for line in text[4:end].splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            k = k.strip().lower()
            if k in _KEYS:
                out[k] = v.strip().strip("'\"")
    return out


def source_uri(kind: str, location: str, key: str) -> str:
    """A URI naming the object at its source (what citations of the canonical location show).

    Each kind names its objects in its registry spec; an unknown kind is a
    :class:`core.errors.ConfigError`, never a guessed ``file://`` URI.
    """
    from freshindex.workers.connectors.registry import spec_for

    return spec_for(kind).source_uri(location, key)


def provenance(data: bytes, *, kind: str, location: str, key: str) -> dict[str, Any]:
    """Keyword arguments for :meth:`registry.Registry.record_provenance`."""
    meta = front_matter(data)
    supersedes = meta.get("supersedes") or None
    return {"source_uri": source_uri(kind, location, key), "source_version": meta.get("version") or None,
            "valid_from": parse_time(meta.get("valid_from")), "valid_until": parse_time(meta.get("valid_until")),
            "supersedes": supersedes[:64] if supersedes else None}


__all__ = ["front_matter", "provenance", "source_uri"]
