"""Plain records the registry hands out (detached from any database session), and the ones a document task hands in
(:class:`StagedDocument`, :class:`MirroredDocument`, :class:`DocumentFailure`, :class:`DocumentTouch`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from freshindex.core.enums import BuildStatus, RunStatus
from freshindex.core.types import ChunkDraft


@dataclass(frozen=True)
class SourceInfo:
    id: str
    kb: str
    kind: str
    location: str
    owner: str
    options: dict[str, Any]
    acl: tuple[str, ...]
    poll_interval_s: int | None
    enabled: bool
    created_at: dt.datetime
    tenant: str = "default"
    #: Static ACL rules: ``({"glob", "groups", "users", "sensitivity"}, ...)``.
    acl_rules: tuple[dict[str, Any], ...] = ()
    sensitivity: str = "internal"
    acl_version: int = 1
    #: Retired by ``freshindex sources remove``: never synced again (registry/freshness.py).
    removed: bool = False

    @property
    def include(self) -> tuple[str, ...]:
        """The source's ``--include`` patterns (gitignore style; none: every listed key)."""
        return tuple(self.options.get("include") or ())

    @property
    def exclude(self) -> tuple[str, ...]:
        """The source's ``--exclude`` patterns (gitignore style)."""
        return tuple(self.options.get("exclude") or ())


@dataclass(frozen=True)
class SourceSetup:
    """How a source is read and who may read it: the columns :meth:`registry.Registry.add_source` takes beyond
    the four that every source names (kind, location, owner, knowledge base).

    ``options``: the connector's options (None: none); ``acl``: the groups that may read it;
    ``poll_interval_s``: the scheduler's interval (None: not polled); ``tenant`` and ``sensitivity`` of its
    documents; ``acl_rules``: static rules ``({"glob", "groups", "users", "sensitivity"}, ...)`` (None: none).
    """

    options: dict[str, Any] | None = None
    acl: Sequence[str] = ("public",)
    poll_interval_s: int | None = None
    tenant: str = "default"
    sensitivity: str = "internal"
    acl_rules: Sequence[dict[str, Any]] | None = None


@dataclass(frozen=True)
class DocumentRecord:
    """What the registry holds about one document: its identity, last seen bytes, state
    (a :class:`core.enums.DocumentState`), versions and ACL."""

    id: str
    source_id: str
    key: str
    etag: str | None
    size: int
    content_hash: str | None
    state: str
    version: int
    parser_version: str | None
    error_reason: str | None
    acl: tuple[str, ...] | None = None
    tenant: str = "default"
    sensitivity: str = "internal"
    acl_version: int = 0
    acl_fingerprint: str | None = None
    #: sha256 of the bytes last fetched (None before migration 0013 or never fetched).
    source_hash: str | None = None
    error_detail: str | None = None
    #: The parser's shape hash of the indexed bytes (None: no cheap check, or before migration 0015).
    shape_hash: str | None = None


@dataclass(frozen=True)
class ChunkRow:
    """A chunk as the builder needs it to write a point."""

    id: str
    document_id: str
    source_id: str
    kb: str
    key: str
    title: str | None
    ordinal: int
    content_hash: str
    text: str
    kind: str
    heading_path: tuple[str, ...]
    anchor: str
    page: int | None
    meta: dict[str, Any]
    doc_version: int
    state: str
    tombstoned: bool
    added_changeset_id: int | None
    acl: tuple[str, ...]
    tenant: str = "default"
    acl_version: int = 0
    sensitivity: str = "internal"


@dataclass(frozen=True)
class ChunkStatus:
    """What the query path needs to recheck a hit."""

    id: str
    state: str
    tombstoned: bool
    document_id: str = ""
    source_id: str = ""
    acl: tuple[str, ...] = ()
    tenant: str = "default"
    sensitivity: str = "internal"
    acl_version: int = 0
    #: Validity (registry/freshness.py): the document's end of validity, and whether it
    #: is past it (``expired``) or replaced by a newer version (``superseded``) as of the
    #: recheck: the query path drops such hits before the freshness sweep withdraws them.
    valid_until: dt.datetime | None = None
    expired: bool = False
    superseded: bool = False
    #: The deletion guard holds this document's deletion: it still serves, labelled ``pending deletion``.
    pending_deletion: bool = False
    #: The chunk's place in its document now: which chunks are consecutive (joined in a packet) is read
    #: here, not from the point, whose payload was written when its document was.
    ordinal: int | None = None


@dataclass(frozen=True)
class SnapshotInfo:
    id: str
    kb: str
    version: int
    parent_id: str | None
    collection: str
    status: str
    strategy: str
    point_count: int
    embedding_model: str
    parser_version: str
    changeset_ids: tuple[int, ...]
    upserts: int
    deletes: int
    verification: dict[str, Any]
    failure_reason: str | None
    archive_uri: str | None
    archive_sha256: str | None
    build_seconds: float
    created_at: dt.datetime
    activated_at: dt.datetime | None

    def as_dict(self, *, full: bool = False) -> dict[str, Any]:
        """The snapshot as JSON-ready data: the one serialisation the API, CLI and archive use.

        By default the summary a listing shows (``GET /v1/snapshots``,
        ``freshindex snapshots list``); with ``full`` every field (the archive
        manifest and ``snapshots show``).  Times are ISO strings.  It is a
        view, not a round trip: nothing here parses it back.
        """
        if full:
            data = asdict(self)
            data["created_at"] = _iso(self.created_at)
            data["activated_at"] = _iso(self.activated_at)
            data["changeset_ids"] = list(self.changeset_ids)
            return data
        return {
            "id": self.id, "kb": self.kb, "version": self.version, "parent_id": self.parent_id,
            "status": self.status, "strategy": self.strategy, "point_count": self.point_count,
            "embedding_model": self.embedding_model, "upserts": self.upserts, "deletes": self.deletes,
            "created_at": _iso(self.created_at), "activated_at": _iso(self.activated_at),
            "failure_reason": self.failure_reason,
        }


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


@dataclass(frozen=True)
class NewSnapshot:
    """A snapshot the builder starts (:meth:`registry.snapshots.SnapshotStore.create_snapshot`): recorded ``building``
    until it is verified or failed."""

    snapshot_id: str
    kb: str
    version: int
    parent_id: str | None
    collection: str
    strategy: str
    embedding_model: str
    parser_version: str
    changeset_ids: Sequence[int]
    upserts: int
    deletes: int


@dataclass(frozen=True)
class CanaryInfo:
    id: int
    kb: str
    question: str
    expected_key: str
    top_k: int


@dataclass(frozen=True)
class SyncRunInfo:
    id: int
    source_id: str
    kb: str
    trigger: str
    status: str
    started_at: dt.datetime
    finished_at: dt.datetime | None
    docs_listed: int
    docs_planned: int
    changeset_id: int | None
    snapshot_id: str | None
    summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    build_status: str | None = None
    build_error: str | None = None
    heartbeat_at: dt.datetime | None = None
    worker: str | None = None
    stale_tasks: int = 0
    followup_requested: bool = False
    held_reason: str | None = None
    #: Seconds from the run's earliest observed change to its snapshot's activation (None until visible).
    lag_s: float | None = None

    def as_dict(self, *, now: dt.datetime | None = None, docs_done: int | None = None) -> dict[str, Any]:
        """The run as JSON-ready data: the one serialisation ``runs list``, ``runs show``,
        ``sources runs`` and ``GET /v1/sources/SOURCE/runs`` use.

        ``running_for_s`` is counted to ``now`` (default: the current time) and
        only for a running run; ``docs_done`` is what the caller counted
        (documents with a result), None when not counted.  Times are ISO
        strings.  A view, not a round trip: nothing parses it back.
        """
        running = self.status == RunStatus.RUNNING
        now = now or dt.datetime.now(dt.UTC)
        return {
            "id": self.id, "source": self.source_id, "kb": self.kb, "trigger": self.trigger, "status": self.status,
            "started_at": _iso(self.started_at), "finished_at": _iso(self.finished_at),
            "running_for_s": round((now - self.started_at).total_seconds(), 1) if running else None,
            "docs_listed": self.docs_listed, "docs_planned": self.docs_planned, "docs_done": docs_done,
            "changeset_id": self.changeset_id, "build_status": self.build_status, "snapshot_id": self.snapshot_id,
            "documents": self.summary.get("documents"), "error": self.error, "build_error": self.build_error,
            "heartbeat_at": _iso(self.heartbeat_at), "worker": self.worker, "held_reason": self.held_reason,
            "held": self.summary.get("held"), "lag_s": self.lag_s,
        }

    @property
    def done(self) -> bool:
        """Finished, and the build after it (if any) has settled."""
        return self.status != RunStatus.RUNNING and self.build_status not in (None, BuildStatus.PENDING)


@dataclass(frozen=True)
class DocumentOutcome:
    """What processing one document did, as recorded against the sync run."""

    document_id: str
    key: str
    outcome: str  # added | modified | unchanged | deleted | failed
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_kept: int = 0
    chunks_added: int = 0
    chunks_moved: int = 0  # added chunks whose content was already indexed elsewhere (vector reused)
    tombstones: int = 0
    error_reason: str | None = None
    error_detail: str | None = None
    seconds: float = 0.0
    rechunk_reason: str | None = None


@dataclass(frozen=True)
class StagedDocument:
    """One document's new version and its chunk diff, as a document task stages it
    (:meth:`registry.staging.StagingStore.stage_document`, which says what each field does)."""

    source: SourceInfo
    document_id: str
    key: str
    etag: str | None
    size: int
    content_hash: str
    title: str
    parser: str
    parser_version: str
    chunks: Sequence[ChunkDraft]
    added_ids: set[str]
    removed_ids: set[str]
    outcome: DocumentOutcome
    acl: Any = None  # an acl.model.DocumentAcl; None keeps the stored one
    source_hash: str | None = None
    provenance: Mapping[str, Any] | None = None  # record_provenance's fields
    shape_hash: str | None = None  # the parser's (documents.shape_hash)


@dataclass(frozen=True)
class MirroredDocument:
    """A document whose content and permissions are already indexed under ``canonical_id``, as a document task
    stages it (:meth:`registry.twins.TwinStore.stage_mirror`)."""

    source_id: str
    document_id: str
    key: str
    etag: str | None
    size: int
    content_hash: str
    canonical_id: str
    acl: Any  # an acl.model.DocumentAcl
    source_uri: str | None = None
    seconds: float = 0.0
    parser_version: str | None = None  # what the document records when processed now; None keeps what it held


@dataclass(frozen=True)
class DocumentTouch:
    """An indexed document found unchanged (same content, or same shape), as the inline loop hands it to
    :meth:`registry.touches.TouchStore.touch_documents` with others of its batch: what
    :meth:`touch_document` writes, and what the record held when it was decided (``content_hash``,
    ``parser_version``), which the writing transaction checks again."""

    document_id: str
    etag: str | None
    size: int
    content_hash: str  # the indexed content the decision compared with
    parser_version: str | None  # the version the decision compared with
    seconds: float = 0.0
    shape_hash: str | None = None
    acl: Any = None  # an acl.model.DocumentAcl; None keeps the stored one


@dataclass(frozen=True)
class DocumentFailure:
    """A document that could not be indexed, as a document task records it
    (:meth:`registry.staging.StagingStore.record_failure`)."""

    source_id: str
    document_id: str
    key: str
    reason: str
    detail: str
    etag: str | None = None
    size: int = 0
    seconds: float = 0.0
    parser_version: str | None = None  # the pipeline's, that failed on it


@dataclass(frozen=True)
class DocumentErrorInfo:
    source_id: str
    key: str
    reason: str
    detail: str
    sync_run_id: int
