"""What :class:`snapshots.lifecycle.SnapshotOps` answers: one typed record per operation.

Each record says what its operation did in fields a type checker reads;
``to_dict()`` is its JSON-ready form, the one ``freshindex snapshots ...
--json`` prints (the same keys the operations returned as plain dicts before
they had records).  For callers written against those dicts, a record's
fields can still be read by key (``record["ok"]``); nothing can be written
that way.  The records do not perform anything, and none is parsed back from
its dict: they are views.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from freshindex.registry import SnapshotInfo


class _Readable:
    """``record[key]`` and ``record.get(key)``: read access by the keys of :meth:`to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)


@dataclass(frozen=True)
class StrandedRow(_Readable):
    """A document whose pending chunks no open or staged changeset will apply."""

    source: str
    key: str
    document_id: str
    pending_chunks: int
    changeset_id: int | None = None  # set once re-staged (by a repair)

    @classmethod
    def of(cls, found: Mapping[str, Any]) -> StrandedRow:
        """From a row of ``registry.stranded_documents`` / ``repair_stranded``."""
        return cls(source=found["source_id"], key=found["key"], document_id=found["document_id"],
                   pending_chunks=len(found["chunks"]), changeset_id=found.get("changeset_id"))

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"source": self.source, "key": self.key, "document_id": self.document_id,
                               "pending_chunks": self.pending_chunks}
        if self.changeset_id is not None:
            row["changeset_id"] = self.changeset_id
        return row


@dataclass(frozen=True)
class SnapshotView(_Readable):
    """``snapshots show``: the manifest, whether its alias serves it, whether its collection exists, alias moves."""

    snapshot: SnapshotInfo
    serving: bool
    collection_exists: bool
    alias_history: Sequence[Mapping[str, Any]] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.snapshot.as_dict(full=True), "serving": self.serving,
                "collection_exists": self.collection_exists, "alias_history": [dict(e) for e in self.alias_history]}


@dataclass(frozen=True)
class VerifyReport(_Readable):
    """``snapshots verify``: ``ok`` with the ``checks`` made, or the failed ``check``, its ``reason`` and details."""

    snapshot_id: str
    ok: bool
    checks: Mapping[str, Any] = field(default_factory=dict)
    check: str | None = None
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    stranded: Sequence[StrandedRow] = ()  # the documents behind a failed ``stranded_pending`` check

    def to_dict(self) -> dict[str, Any]:
        if self.ok:
            return {"snapshot_id": self.snapshot_id, "ok": True, "checks": dict(self.checks)}
        details = dict(self.details)
        if self.stranded:
            details["documents"] = [r.to_dict() for r in self.stranded]
        return {"snapshot_id": self.snapshot_id, "ok": False, "check": self.check, "reason": self.reason,
                "details": details}


@dataclass(frozen=True)
class Reconciliation(_Readable):
    """``snapshots reconcile``: the stranded documents found, and (``repair``) how many were re-staged."""

    kb: str
    stranded: Sequence[StrandedRow]
    repaired: int = 0
    repair: bool = True

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kb": self.kb, "stranded": [r.to_dict() for r in self.stranded],
                                "repaired": self.repaired}
        if self.repair:
            data["next"] = "build (or sync) to serve them" if self.repaired else None
        return data


@dataclass(frozen=True)
class Swap(_Readable):
    """``snapshots swap`` / ``rollback``: what serves now, and what moved (``status`` ``unchanged``: nothing)."""

    kb: str
    status: str  # "swapped" or "unchanged"
    snapshot_id: str
    previous_id: str | None = None
    direction: str = ""  # "forward" or "back"
    chunks_realigned: int = 0
    chunks_withheld: int = 0
    swap_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        if self.status == "unchanged":
            return {"kb": self.kb, "status": self.status, "snapshot_id": self.snapshot_id}
        return {"kb": self.kb, "status": self.status, "snapshot_id": self.snapshot_id, "previous_id": self.previous_id,
                "direction": self.direction, "chunks_realigned": self.chunks_realigned,
                "chunks_withheld": self.chunks_withheld, "documents_to_recheck": "next sync",
                "swap_ms": self.swap_ms}


@dataclass(frozen=True)
class Archived(_Readable):
    """``snapshots archive``: where the archive went, its digest, size and point count."""

    snapshot_id: str
    uri: str
    sha256: str
    bytes: int
    points: int

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "uri": self.uri, "sha256": self.sha256, "bytes": self.bytes,
                "points": self.points}


@dataclass(frozen=True)
class Restored(_Readable):
    """``snapshots restore``: the snapshot serving again, its point count and archive digest."""

    snapshot_id: str
    kb: str
    points: int
    sha256: str
    status: str = "active"

    def to_dict(self) -> dict[str, Any]:
        return {"snapshot_id": self.snapshot_id, "kb": self.kb, "points": self.points, "sha256": self.sha256,
                "status": self.status}


__all__ = ["Archived", "Reconciliation", "Restored", "SnapshotView", "StrandedRow", "Swap", "VerifyReport"]
