"""The payload every point carries in the vector store: one type owns its fields.

The builder writes it (:meth:`PointPayload.to_dict`) and everything that
reads a point back (the injection client, the build's verification, the
vector-cache refill after a restore) reads it through
:meth:`PointPayload.from_dict`, so the field names live here and nowhere
else.  The stored JSON is exactly what the builder wrote before this type
existed, so shards built earlier read back unchanged.

What it does not guarantee: that a payload read back agrees with the
registry (that is verification's job), or that fields a newer writer added
survive a round trip through an older reader (unknown keys are ignored).
This module imports only the standard library: the thin client can use it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from freshindex.core.clock import as_utc
from freshindex.core.errors import PermanentError

#: Parser metadata a point does not carry (:func:`served_meta`): the registry's chunk row keeps it, and nothing
#: that reads a point back uses it.  ``links`` (the text and href of every link in the chunk) is the bulk of a
#: link-dense page's payload: on PostgreSQL's release notes up to 11 KB a chunk, where the text is 1 KB, and the
#: vector store converts and stores every one of them on each write.
UNSERVED_META = frozenset({"links"})


def served_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` as a point carries it: without :data:`UNSERVED_META`."""
    return {k: v for k, v in meta.items() if k not in UNSERVED_META}


class PayloadError(PermanentError):
    """A point's payload lacks a field every point written by the builder has."""


@dataclass(frozen=True)
class PointPayload:
    """What a point says about its chunk: enough to cite and filter without the registry.

    ``snapshot_id`` is the build that wrote the point; a query result also
    names the snapshot that served it (the alias target).  ``acl`` is what the
    query filter matches (see :func:`acl.query_filter`).
    """

    chunk_id: str
    document_id: str
    source_id: str
    kb: str
    key: str
    text: str
    content_hash: str
    snapshot_id: str
    title: str | None = None  # a document without a title stores null
    heading_path: tuple[str, ...] = ()
    anchor: str = ""
    page: int | None = None
    kind: str = ""
    doc_version: int = 0
    acl: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    #: The document's tenant, ACL version (the query path denies a point whose
    #: version is behind the registry's) and sensitivity; older points lack them.
    tenant: str = "default"
    acl_version: int = 0
    sensitivity: str = "internal"
    #: The last page of a chunk whose text runs over several pages (``page`` is the first); None for one page.
    page_end: int | None = None
    #: The OCR confidence (0-1) of the page the text was read from; None when it was not OCR'd.
    ocr_confidence: float | None = None

    #: Keys a payload must have to be read back (the rest default).
    REQUIRED = ("chunk_id", "document_id", "source_id", "kb", "key", "text", "content_hash", "snapshot_id")

    @property
    def ocr(self) -> bool:
        """Whether the text came from OCR (the parser records it in ``meta``)."""
        return bool(self.meta.get("ocr"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON stored with the point (key order and types as the builder always wrote them)."""
        return {
            "chunk_id": self.chunk_id,
            "document_id": self.document_id,
            "source_id": self.source_id,
            "kb": self.kb,
            "key": self.key,
            "title": self.title,
            "heading_path": list(self.heading_path),
            "anchor": self.anchor,
            "page": self.page,
            "kind": self.kind,
            "text": self.text,
            "content_hash": self.content_hash,
            "doc_version": self.doc_version,
            "acl": list(self.acl),
            "snapshot_id": self.snapshot_id,
            "meta": self.meta,
            "tenant": self.tenant,
            "acl_version": self.acl_version,
            "sensitivity": self.sensitivity,
            # Written only when set, so points of one-page and born-digital text keep the stored shape.
            **({"page_end": self.page_end} if self.page_end is not None else {}),
            **({"ocr_confidence": self.ocr_confidence} if self.ocr_confidence is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PointPayload:
        """Read a stored payload back.

        Unknown keys are ignored (a newer writer may add fields); a missing
        required key raises :class:`PayloadError` naming it; optional keys
        that are missing or null take their defaults.
        """
        missing = [k for k in cls.REQUIRED if d.get(k) is None]
        if missing:
            raise PayloadError(f"point payload lacks {', '.join(missing)} (has {sorted(d)[:12]})")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known and v is not None}
        values["heading_path"] = tuple(values.get("heading_path") or ())
        values["acl"] = tuple(values.get("acl") or ())
        values["meta"] = dict(values.get("meta") or {})
        values["doc_version"] = int(values.get("doc_version") or 0)
        values["acl_version"] = int(values.get("acl_version") or 0)
        return cls(**values)


def parse_time(value: str | None) -> dt.datetime | None:
    """An ISO 8601 time of a payload or front matter as an aware UTC datetime (a naive one is taken as UTC);
    None when absent or unreadable."""
    if not value:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return as_utc(t)


__all__ = ["UNSERVED_META", "PayloadError", "PointPayload", "parse_time", "served_meta"]
