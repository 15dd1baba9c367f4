"""Registry tables (SQLAlchemy 2 declarative).

The registry is the system of record: what each source holds, what each
document was chunked into, which changes are staged, which snapshot serves.
The vector store only ever holds a projection of it.  Schema changes go
through Alembic revisions in ``registry/migrations``; this module must match
the newest revision (a test compares them).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy import false as sa_false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from freshindex.core.clock import as_utc


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A ``DateTime(timezone=True)`` that is always UTC and always aware, on every dialect.

    PostgreSQL keeps the zone; SQLite stores the text without it and hands
    back a naive value. This is the one place that rule lives: values are
    converted to UTC on the way in (a naive value is taken as UTC) and given
    the UTC zone on the way out, so no caller compares a naive time with an
    aware one. The DDL is unchanged (``impl``), so no migration is needed.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        return as_utc(value)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        return as_utc(value)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, list[Any]: JSON}
    if TYPE_CHECKING:  # every model here maps one plain Table (DeclarativeBase types it as any FromClause)
        __table__: ClassVar[Table]


class Source(Base):
    __tablename__ = "sources"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    kb: Mapped[str] = mapped_column(String(63), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    location: Mapped[str] = mapped_column(Text)
    owner: Mapped[str] = mapped_column(String(255))
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    acl: Mapped[list[Any]] = mapped_column(JSON, default=list)
    #: Tenant, default sensitivity and static ACL rules of the source's documents
    #: (rules: ``[{"glob", "groups", "users", "sensitivity"}]``); ``acl_version``
    #: grows with every permission change (``freshindex sources update``).
    tenant: Mapped[str] = mapped_column(String(63), default="default", server_default="default")
    acl_rules: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    sensitivity: Mapped[str] = mapped_column(String(16), default="internal", server_default="internal")
    acl_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    poll_interval_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    #: Freshness policy and state (registry/freshness.py): stale after this long without a
    #: successful listing, withdrawn after ``hard_expiry_s``; paused sources are not polled
    #: nor synced by webhooks; ``removed_at`` set by ``freshindex sources remove``.
    stale_after_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    hard_expiry_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    removed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_verified_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_successful_sync_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)


class SourceState(Base):
    """A source's connector state (:mod:`registry.source_state`): what its last successful run left, and
    what its open run recorded, promoted when that run succeeds (a listing cursor, a crawl's validators)."""

    __tablename__ = "source_state"

    source_id: Mapped[str] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"), primary_key=True)
    state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    pending: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    pending_run: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (
        UniqueConstraint("source_id", "key", name="uq_documents_source_key"),
        # Partial: the freshness sweep looks only for the few documents that have one (migration 0009).
        *(Index(f"ix_documents_{c}", c, postgresql_where=text(f"{c} IS NOT NULL"), sqlite_where=text(f"{c} IS NOT NULL"))
          for c in ("valid_until", "supersedes", "withdrawn_reason")),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    source_id: Mapped[str] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(Text)
    etag: Mapped[str | None] = mapped_column(String(255), nullable=True)
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    content_hash: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    #: sha256 of the bytes last fetched (``content_hash`` may hash the parsed text): the planner
    #: matches it against new keys to tell a move (migration 0013).
    source_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: The parser's hash of what it read of the bytes (``ParsedDocument.meta["shape_hash"]``, HTML
    #: only): equal on the next fetch, the page is unchanged without a parse (migration 0015).
    shape_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: The held run that found the document gone while the deletion guard holds its deletion:
    #: it keeps serving, labelled ``pending deletion`` (migration 0013).
    pending_deletion_run: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # active | deleted | error | skipped (error_reason holds the skip reason)
    state: Mapped[str] = mapped_column(String(16), default="active", index=True)
    error_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    parser: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: ``<the version of the parser that read it>.<the chunker's>`` (workers/versions.py; migration 0016):
    #: a document whose recorded version differs from the one it would record now is processed again.
    parser_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    title: Mapped[str | None] = mapped_column(Text, nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    #: The document's effective ACL tokens (null: never resolved, the source's acl applies),
    #: tenant and sensitivity; ``acl_version`` grows whenever they change (never reused).
    acl: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    tenant: Mapped[str] = mapped_column(String(63), default="default", server_default="default")
    sensitivity: Mapped[str] = mapped_column(String(16), default="internal", server_default="internal")
    acl_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    acl_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)
    acl_origin: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: Provenance (registry/twins.py) and validity (registry/freshness.py): the canonical
    #: document this one mirrors (null: it is canonical), where it came from, its other
    #: locations, the source's own version label, when it is valid, which document it supersedes.
    canonical_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    source_uri: Mapped[str | None] = mapped_column(Text, nullable=True)
    mirrors: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    source_version: Mapped[str | None] = mapped_column(String(255), nullable=True)
    valid_from: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    valid_until: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    supersedes: Mapped[str | None] = mapped_column(String(64), nullable=True)
    last_fetched_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: Set when the freshness sweep withdrew the document (expired, superseded).
    withdrawn_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    first_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    deleted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Chunk(Base):
    """One chunk the registry knows, live or not.

    ``state`` says where the chunk physically is: ``pending`` (staged, in no
    built snapshot yet), ``live`` (in the active snapshot), ``removed`` (taken
    out by an applied changeset).  ``tombstoned`` says whether it may be
    served: it flips to true the moment a removal is staged, before any
    rebuild, so readers can drop it at once.
    """

    __tablename__ = "chunks"
    __table_args__ = (Index("ix_chunks_kb_state", "kb", "state"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    document_id: Mapped[str] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), index=True)
    source_id: Mapped[str] = mapped_column(String(128), index=True)
    kb: Mapped[str] = mapped_column(String(63))
    ordinal: Mapped[int] = mapped_column(Integer)
    content_hash: Mapped[str] = mapped_column(String(64), index=True)
    text: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(32))
    heading_path: Mapped[list[Any]] = mapped_column(JSON, default=list)
    anchor: Mapped[str] = mapped_column(Text)
    page: Mapped[int | None] = mapped_column(Integer, nullable=True)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    doc_version: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    tombstoned: Mapped[bool] = mapped_column(Boolean, default=False)  # no index: see migration 0014
    added_changeset_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    snapshot_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Embedding(Base):
    """The vector cache: one vector per (model, chunk content hash)."""

    __tablename__ = "embeddings"

    model_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class SyncRun(Base):
    __tablename__ = "sync_runs"
    __table_args__ = (
        # A source's last verified / succeeded / finished run (registry/freshness.py, migration 0011).
        Index("ix_sync_runs_source_status_finished", "source_id", "status", "finished_at"),
        Index("ix_sync_runs_source_id_id", "source_id", "id"),  # a source's latest run, newest first
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source_id: Mapped[str] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"), index=True)
    kb: Mapped[str] = mapped_column(String(63))
    trigger: Mapped[str] = mapped_column(String(32), default="cli")
    # running | succeeded | partial | failed
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    docs_listed: Mapped[int] = mapped_column(Integer, default=0)
    docs_planned: Mapped[int] = mapped_column(Integer, default=0)
    changeset_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    snapshot_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # pending | built | unchanged | failed
    build_status: Mapped[str | None] = mapped_column(String(16), nullable=True, index=True)
    build_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: Renewed by the process working on the run (plan, documents, build); the
    #: reaper treats a run whose heartbeat is older than ``sync.run_lease_s`` as dead.
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    worker: Mapped[str | None] = mapped_column(String(255), nullable=True)
    #: Tasks of this run that arrived after it closed and were fenced off (changed nothing).
    stale_tasks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: Another sync was requested while this one ran: one follow-up runs after it.
    followup_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    #: Why the run was held (deletion guard) instead of staging its changes.
    held_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: Sync lag: the earliest change this run saw (event time, or the object's
    #: modification time when polled) to its snapshot going active.
    observed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    visible_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    lag_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: When a parse-queue worker last sent a batch of this run (``dispatch_documents``):
    #: with :class:`DocumentStart`, the reaper's evidence that the parse workers are alive.
    worked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class DocumentStart(Base):
    """A ``process_document`` task of a running run began on this document (migration 0010).

    A planned document without an outcome is *lost* (its worker died) only
    when it has a start marker; without one it is still waiting in the queue.
    Deleted when the run finishes; the reaper clears the markers of documents
    it re-sends (their copies are queued, not started).
    """

    __tablename__ = "document_starts"
    __table_args__ = (Index("ix_document_starts_started_at", "started_at"),)

    sync_run_id: Mapped[int] = mapped_column(ForeignKey("sync_runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    worker: Mapped[str | None] = mapped_column(String(255), nullable=True)


class DocumentAttempt(Base):
    """A worker process began processing this document (migration 0012): the poison-pill counter.

    Written before the fetch and parse (with a pool, before the parse), so a process killed on the document
    (SIGKILL, a segfault in a native parser, the OOM killer) leaves ``open``
    set; the next attempt that finds it open counts a crash.  An attempt
    that ends in the process (an outcome, or an error the task retries)
    closes it.  Kept across runs (an inline sync that dies is a run that
    dies), reset by an outcome or by a new etag.
    """

    __tablename__ = "document_attempts"

    document_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    etag: Mapped[str | None] = mapped_column(Text, nullable=True)
    crashes: Mapped[int] = mapped_column(Integer, default=0)
    open: Mapped[bool] = mapped_column(Boolean, default=False)
    sync_run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    worker: Mapped[str | None] = mapped_column(String(255), nullable=True)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class DocumentResult(Base):
    """What one sync run did to one document (also the per-document error log).

    Keyed by (run, document), so a redelivered task overwrites its own row
    instead of adding a second one.
    """

    __tablename__ = "document_results"

    sync_run_id: Mapped[int] = mapped_column(ForeignKey("sync_runs.id", ondelete="CASCADE"), primary_key=True)
    document_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(Text)
    # added | modified | unchanged | deleted | failed | skipped | moved
    outcome: Mapped[str] = mapped_column(String(16))
    chunks_embedded: Mapped[int] = mapped_column(Integer, default=0)
    chunks_reused: Mapped[int] = mapped_column(Integer, default=0)
    chunks_kept: Mapped[int] = mapped_column(Integer, default=0)
    chunks_added: Mapped[int] = mapped_column(Integer, default=0)
    chunks_moved: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    tombstones: Mapped[int] = mapped_column(Integer, default=0)
    # why a document was re-chunked although its bytes did not change (e.g. parser upgrade)
    rechunk_reason: Mapped[str | None] = mapped_column(String(255), nullable=True)
    error_reason: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error_detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Changeset(Base):
    """Upserts and deletes one sync run stages for one knowledge base.

    ``open`` while the run's documents are still being processed, ``staged``
    once the run finished (the builder only takes staged ones), ``applied``
    once a snapshot containing it is serving.
    """

    __tablename__ = "changesets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(63), index=True)
    source_id: Mapped[str] = mapped_column(String(128))
    sync_run_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    status: Mapped[str] = mapped_column(String(16), default="open", index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    staged_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    applied_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    snapshot_id: Mapped[str | None] = mapped_column(String(128), nullable=True)


class ChangesetEntry(Base):
    __tablename__ = "changeset_entries"

    changeset_id: Mapped[int] = mapped_column(ForeignKey("changesets.id", ondelete="CASCADE"), primary_key=True)
    chunk_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    document_id: Mapped[str] = mapped_column(String(64))
    # upsert | delete
    op: Mapped[str] = mapped_column(String(8))


class Tombstone(Base):
    """A removal, kept for audit and for the tombstone-backlog metric."""

    __tablename__ = "tombstones"
    __table_args__ = (
        # The backlog gauge counts the unapplied ones only (migration 0009).
        Index("ix_tombstones_unapplied", "kb", postgresql_where=text("applied_snapshot_id IS NULL"),
              sqlite_where=text("applied_snapshot_id IS NULL")),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    chunk_id: Mapped[str] = mapped_column(String(36), index=True)
    document_id: Mapped[str] = mapped_column(String(64))
    kb: Mapped[str] = mapped_column(String(63), index=True)
    # deleted | superseded | expired | revoked
    reason: Mapped[str] = mapped_column(String(16))
    changeset_id: Mapped[int] = mapped_column(Integer, index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    applied_snapshot_id: Mapped[str | None] = mapped_column(String(128), nullable=True)


class Snapshot(Base):
    """The manifest of one collection version."""

    __tablename__ = "snapshots"
    __table_args__ = (UniqueConstraint("kb", "version", name="uq_snapshots_kb_version"),)

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    kb: Mapped[str] = mapped_column(String(63), index=True)
    version: Mapped[int] = mapped_column(Integer)
    parent_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    collection: Mapped[str] = mapped_column(String(255))
    # building | verified | active | retired | failed
    status: Mapped[str] = mapped_column(String(16), default="building", index=True)
    strategy: Mapped[str] = mapped_column(String(16), default="incremental")
    point_count: Mapped[int] = mapped_column(Integer, default=0)
    embedding_model: Mapped[str] = mapped_column(String(128))
    parser_version: Mapped[str] = mapped_column(String(64))
    changeset_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    upserts: Mapped[int] = mapped_column(Integer, default=0)
    deletes: Mapped[int] = mapped_column(Integer, default=0)
    verification: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    failure_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    archive_uri: Mapped[str | None] = mapped_column(Text, nullable=True)
    archive_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    build_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    activated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Canary(Base):
    """A question whose answer must come from ``expected_key`` before a swap."""

    __tablename__ = "canaries"
    __table_args__ = (UniqueConstraint("kb", "question", name="uq_canaries_kb_question"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(63), index=True)
    question: Mapped[str] = mapped_column(Text)
    expected_key: Mapped[str] = mapped_column(Text)
    top_k: Mapped[int] = mapped_column(Integer, default=5)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AliasEvent(Base):
    """Every alias swap, with who asked and why."""

    __tablename__ = "alias_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(63), index=True)
    from_snapshot_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    to_snapshot_id: Mapped[str] = mapped_column(String(128))
    actor: Mapped[str] = mapped_column(String(255))
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Lock(Base):
    """Leases with fencing tokens (one builder per knowledge base)."""

    __tablename__ = "locks"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(255), nullable=True)
    token: Mapped[int] = mapped_column(BigInteger, default=0)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)
    acquired_at: Mapped[float] = mapped_column(Float, default=0.0)


class ApiKey(Base):
    """An API key bound to a principal. Only a hash of the secret is stored.

    The key a caller presents is ``fik_<key_id>_<secret>``: ``key_id`` finds
    the row, the secret is checked against ``secret_hash`` (sha256 of a
    32-byte random secret: no salt or stretching is needed for random keys).
    """

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(255))
    groups: Mapped[list[Any]] = mapped_column(JSON, default=list)
    tenant: Mapped[str | None] = mapped_column(String(128), nullable=True)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class WebhookDelivery(Base):
    """A webhook delivery id seen for a source: a second one with the same id is a replay.

    Rows older than ``webhooks.replay_window_s`` are pruned; a replay older
    than that is not recognised (a signed timestamp bounds it for the generic
    and S3 endpoints, nothing does for GitHub and GitLab).
    """

    __tablename__ = "webhook_deliveries"

    source_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    received_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)


class SyncTicket(Base):
    """A sync asked for by one or more webhook events of a source, coalesced.

    ``queued`` while it collects events (at most one queued ticket per
    source), then ``dispatched`` (a sync is running or enqueued for it), then
    ``done`` or ``failed``.  ``paths`` is the union of the paths the events
    named, or null for a full listing.
    """

    __tablename__ = "sync_tickets"
    __table_args__ = (Index("ix_sync_tickets_source_status", "source_id", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source_id: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    paths: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    events: Mapped[int] = mapped_column(Integer, default=1)
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    #: joined (the sync followed a run another trigger opened), or why it failed.
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)


class AclDenial(Base):
    """A chunk or query the ACL denied, with the reason and the policy (ACL) version it was decided on."""

    __tablename__ = "acl_denials"
    __table_args__ = (Index("ix_acl_denials_kb_at", "kb", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    kb: Mapped[str] = mapped_column(String(63))
    principal: Mapped[str] = mapped_column(String(255))
    tenant: Mapped[str] = mapped_column(String(63))
    document_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    chunk_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    reason: Mapped[str] = mapped_column(String(32))
    policy_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)


class QueryRefusal(Base):
    """An insufficient-evidence answer: its reason, the question's key terms, the sources searched.

    Written by the query path (:mod:`registry.refusals`); ``question`` only where
    ``audit.store_questions`` allows it.  Rows older than ``audit.refusals_retention_s``
    are deleted as new ones of their knowledge base are written (at most hourly per process).
    """

    __tablename__ = "query_refusals"
    __table_args__ = (Index("ix_query_refusals_kb_at", "kb", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    kb: Mapped[str] = mapped_column(String(63))
    snapshot_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    reason: Mapped[str] = mapped_column(String(32))
    #: the question's key terms (heaviest first), those of them missing from the evidence, the sources searched
    terms: Mapped[list[Any]] = mapped_column(JSON)
    missing: Mapped[list[Any]] = mapped_column(JSON)
    sources: Mapped[list[Any]] = mapped_column(JSON)
    question: Mapped[str | None] = mapped_column(Text, nullable=True)


class GoldenSetRow(Base):
    """A golden set registered for a knowledge base, run after each swap, with its latest result.

    ``content`` is the set's JSONL text itself (not a path), so every worker reads the same set from the
    registry wherever it runs.  ``last_*``: the newest scheduled (or ``golden-sets run``) evaluation: the
    snapshot it evaluated, when, whether every gate held, and :meth:`evaluation.Report.metrics`.
    """

    __tablename__ = "golden_sets"
    __table_args__ = (UniqueConstraint("kb", "name", name="uq_golden_sets_kb_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(63), index=True)
    name: Mapped[str] = mapped_column(String(63))
    content: Mapped[str] = mapped_column(Text)
    thresholds: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    top_k: Mapped[int] = mapped_column(Integer, default=5)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_snapshot_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    last_run_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    last_metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
