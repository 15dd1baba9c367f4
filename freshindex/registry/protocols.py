"""The narrow views of the registry its consumers depend on (Haystack's ``DocumentStore`` protocol, cut by concern).

A consumer types its dependency with the protocol it uses, not with
:class:`registry.Registry`, so a test can hand it a small fake and a reader
can see at the signature what it touches.  :class:`registry.Registry`
satisfies every protocol here (structurally; nothing is registered), and
``tests/registry/contract/`` holds one suite per protocol that states each
guarantee and runs it on SQLite and PostgreSQL.

What a protocol does not promise: that two calls see one state (every
method is its own transaction), nor anything about speed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from freshindex.core.vector_cache import VectorCacheLike
from freshindex.registry.records import (
    CanaryInfo,
    ChunkRow,
    ChunkStatus,
    DocumentErrorInfo,
    DocumentFailure,
    DocumentRecord,
    NewSnapshot,
    SnapshotInfo,
    SourceInfo,
    SourceSetup,
    StagedDocument,
    SyncRunInfo,
)
from freshindex.registry.runs import RunClaim


class SourceCatalog(Protocol):
    """Sources and the registry's record of their documents.

    Guarantees: ``add_source`` refuses a duplicate id unless ``replace`` and
    never moves a source to another knowledge base; ``get_source`` of an
    unknown id raises :class:`core.errors.NotFoundError`; listings are
    ordered by id.
    """

    def add_source(self, source_id: str, *, kind: str, location: str, owner: str, kb: str,
                   setup: SourceSetup = SourceSetup(), replace: bool = False) -> SourceInfo: ...

    def get_source(self, source_id: str) -> SourceInfo: ...

    def list_sources(self, kb: str | None = None) -> list[SourceInfo]: ...

    def knowledge_bases(self) -> list[str]: ...

    def documents_for_source(self, source_id: str) -> dict[str, DocumentRecord]: ...

    def get_document(self, document_id: str) -> DocumentRecord | None: ...

    def live_chunk_ids(self, document_id: str) -> set[str]: ...


class RunHistory(Protocol):
    """Read-only: what a scheduler needs to decide whether a source is due."""

    def list_sources(self, kb: str | None = None) -> list[SourceInfo]: ...

    def last_successful_sync(self, source_id: str) -> dt.datetime | None: ...

    def sync_runs(self, source_id: str | None = None, limit: int = 20) -> list[SyncRunInfo]: ...


class RunLedger(Protocol):
    """Sync runs from open (or join) to finish, their leases and their builds.

    Guarantees: ``open_or_join_run`` is atomic (two concurrent callers never
    both open a run of one source); exactly one ``finish_sync_run`` call per
    run gets ``True``; a task of a closed run is refused (``run_refusal``
    says why, the staging writes raise :class:`core.errors.StaleTaskError`).
    Not guaranteed: that a joined run is still alive a moment later.
    """

    def open_or_join_run(self, source_id: str, trigger: str, *, lease_s: float | None,
                         followup: bool = False) -> RunClaim: ...

    def start_sync_run(self, source_id: str, trigger: str) -> tuple[int, int]: ...

    def run_refusal(self, run_id: int, changeset_id: int | None = None) -> str | None: ...

    def count_stale_task(self, run_id: int) -> int: ...

    def set_run_planned(self, run_id: int, *, listed: int, planned: int,
                        documents: Sequence[tuple[str, str | None, int]
                                            | tuple[str, str | None, int, str | None]] | None = None,
                        skipped: int = 0, moves: Sequence[dict[str, Any]] = (),
                        truncated: str | None = None) -> None: ...

    def heartbeat_run(self, run_id: int, worker: str | None = None, *, now: dt.datetime | None = None) -> None: ...

    def stalled_runs(self, lease_s: float, *, now: dt.datetime | None = None) -> list[SyncRunInfo]: ...

    def unprocessed_documents(self, run_id: int) -> list[tuple[str, str | None, int, str | None]] | None: ...

    def advance_dispatch(self, run_id: int, start: int, end: int, *, worked: bool = True) -> bool: ...

    def worked_runs(self, lease_s: float, *, now: dt.datetime | None = None) -> list[int]: ...

    def mark_document_started(self, run_id: int, key: str, worker: str | None = None) -> None: ...

    def started_documents(self, run_id: int) -> dict[str, dt.datetime]: ...

    def clear_started(self, run_id: int, keys: Sequence[str], *, up_to: dt.datetime) -> int: ...

    def record_reap(self, run_id: int, action: str, *, worker: str | None = None, **details: Any) -> int: ...

    def get_sync_run(self, run_id: int) -> SyncRunInfo: ...

    def sync_runs(self, source_id: str | None = None, limit: int = 20) -> list[SyncRunInfo]: ...

    def last_successful_sync(self, source_id: str) -> dt.datetime | None: ...

    def run_progress(self, run_id: int) -> tuple[int, int]: ...

    def finish_sync_run(self, run_id: int, *, error: str | None = None) -> tuple[SyncRunInfo, bool]: ...

    def set_run_build(self, run_id: int, *, status: str, snapshot_id: str | None, error: str | None = None) -> None: ...

    def run_changeset_applied(self, run_id: int) -> bool: ...

    def document_errors(self, run_id: int | None = None, source_id: str | None = None, *,
                        outcome: str = ...) -> list[DocumentErrorInfo]: ...

    def document_skips(self, run_id: int | None = None, source_id: str | None = None) -> list[DocumentErrorInfo]: ...


class DocumentStaging(Protocol):
    """What a document task writes into its run's changeset; every write is fenced."""

    def record_failure(self, run_id: int, failure: DocumentFailure, *, changeset_id: int | None = None) -> None: ...

    def touch_document(self, run_id: int, document_id: str, *, etag: str | None, size: int, seconds: float,
                       changeset_id: int | None = None, acls: tuple[str, Mapping[str, Any]] | None = None,
                       shape_hash: str | None = None) -> None: ...

    def stage_document(self, run_id: int, changeset_id: int, staged: StagedDocument) -> None: ...

    def stage_documents(self, run_id: int, changeset_id: int, staged: Sequence[StagedDocument]) -> None: ...

    def stage_deletion(self, run_id: int, changeset_id: int, document_id: str, *, reason: str = ...,
                       moved_to: str | None = None, skipped: tuple[str, str] | None = None) -> int: ...

    def record_skips(self, run_id: int, changeset_id: int | None, source_id: str,
                     skips: Sequence[dict[str, Any]]) -> int: ...

    def mark_pending_deletion(self, source_id: str, run_id: int, document_ids: Iterable[str]) -> int: ...


class ReaperRegistry(RunLedger, DocumentStaging, Protocol):
    """What the run reaper (:mod:`schedules.reaper`) reads and writes."""


class StrandedRepair(Protocol):
    """Find and re-stage documents whose pending chunks no changeset will apply."""

    def stranded_documents(self, kb: str | None = None) -> list[dict[str, Any]]: ...

    def repair_stranded(self, kb: str) -> list[dict[str, Any]]: ...


class ChunkReader(Protocol):
    """Chunk rows and changeset operations, as the builder and the query recheck read them.

    Guarantees: ``changeset_ops`` gives the last operation per chunk over the
    changesets in id order; ``chunk_status`` reports a tombstoned chunk as
    tombstoned from the moment its tombstone is written.  Unknown ids are
    left out of every mapping, not reported as errors.
    """

    def staged_changesets(self, kb: str) -> list[int]: ...

    def changeset_ops(self, changeset_ids: Sequence[int]) -> dict[str, str]: ...

    def changeset_chunk_ids(self, changeset_ids: Sequence[int]) -> set[str]: ...

    def chunk_rows(self, ids: Sequence[str]) -> list[ChunkRow]: ...

    def live_chunk_ids_for_kb(self, kb: str) -> list[str]: ...

    def count_live(self, kb: str, sources: Collection[str] | None = None) -> int: ...

    def chunk_states(self, ids: Sequence[str]) -> dict[str, str]: ...

    def chunk_hashes(self, ids: Sequence[str]) -> dict[str, str]: ...

    def chunk_status(self, ids: Sequence[str]) -> dict[str, ChunkStatus]: ...

    def tombstone_backlog(self, kb: str | None = None, sources: Collection[str] | None = None) -> int: ...


class VectorCache(VectorCacheLike, Protocol):
    """Embeddings by (model id, content hash); the registry's side of :mod:`core.vector_cache`.

    Guarantees: a cached vector reads back as the exact float32 values
    written; two model ids never share an entry; caching a hash again is a
    no-op (the first vector stays).  Not guaranteed: that the vector was
    computed by the model its key names.
    """

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None: ...


class SnapshotRecords(Protocol):
    """Snapshot rows and which one serves each knowledge base, plus the canaries that gate a swap.

    Guarantees: after ``activate_snapshot`` or ``realign_to_snapshot`` a
    knowledge base has exactly one ``active`` snapshot, and an alias event
    records the move; ``activate_snapshot`` with a stale fencing token
    changes nothing; ``realign_to_snapshot`` never makes a chunk with a final
    tombstone (:data:`core.enums.FINAL_TOMBSTONE_REASONS`) servable again.
    The records do not move the vector store's alias.
    """

    def next_snapshot_version(self, kb: str) -> int: ...

    def source_revisions(self, kb: str) -> dict[str, str]: ...

    def create_snapshot(self, new: NewSnapshot) -> SnapshotInfo: ...

    def fail_snapshot(self, snapshot_id: str, reason: str, verification: dict[str, Any] | None = None) -> None: ...

    def record_side(self, snapshot_id: str, side: dict[str, Any]) -> None: ...

    def mark_verified(self, snapshot_id: str, *, point_count: int, verification: dict[str, Any],
                      seconds: float) -> None: ...

    def activate_snapshot(self, snapshot_id: str, *, ops: dict[str, str], actor: str, reason: str,
                          lock: tuple[str, int] | None = None) -> None: ...

    def get_snapshot(self, snapshot_id: str) -> SnapshotInfo: ...

    def active_snapshot(self, kb: str) -> SnapshotInfo | None: ...

    def list_snapshots(self, kb: str | None = None) -> list[SnapshotInfo]: ...

    def set_snapshot_status(self, snapshot_id: str, status: str) -> None: ...

    def set_archive(self, snapshot_id: str, uri: str, sha256: str) -> None: ...

    def abandoned_snapshots(self, kb: str) -> list[SnapshotInfo]: ...

    def realign_to_snapshot(self, target_id: str, *, present: set[str], touched: set[str],
                            changesets_reverted: Sequence[int], changesets_reapplied: Sequence[int], actor: str,
                            reason: str) -> int: ...

    def set_snapshot_active(self, snapshot_id: str, *, actor: str, reason: str) -> None: ...

    def alias_events(self, kb: str, limit: int = 20) -> list[dict[str, Any]]: ...

    def add_canary(self, kb: str, question: str, expected_key: str, top_k: int = 5) -> CanaryInfo: ...

    def list_canaries(self, kb: str | None = None) -> list[CanaryInfo]: ...

    def remove_canary(self, canary_id: int) -> None: ...


class Locks(Protocol):
    """Named leases with fencing tokens.

    Guarantees: at most one owner holds an unexpired lease; every
    acquisition returns a larger token than the one before; renew and
    release with a stale token do nothing (renew says so).  Expiry is wall
    clock: processes whose clocks disagree may overlap by the difference.
    """

    def acquire_lock(self, name: str, owner: str, ttl: float) -> int | None: ...

    def renew_lock(self, name: str, token: int, ttl: float) -> bool: ...

    def release_lock(self, name: str, token: int) -> None: ...

    def lock_holder(self, name: str) -> tuple[str | None, float, int]: ...


class SnapshotArchive(Protocol):
    """A snapshot's registry rows out of one registry and into a fresh one."""

    def export_snapshot(self, snapshot_id: str, chunk_ids: Sequence[str], *, current: bool) -> dict[str, Any]: ...

    def import_snapshot(self, data: dict[str, Any]) -> SnapshotInfo: ...


class BuilderRegistry(ChunkReader, SnapshotRecords, VectorCache, Locks, Protocol):
    """What :class:`snapshots.builder.Builder` reads and writes (and its writer lock)."""


class SnapshotOpsRegistry(BuilderRegistry, SnapshotArchive, StrandedRepair, Protocol):
    """What :class:`snapshots.lifecycle.SnapshotOps` uses: the builder's view plus archive and repair."""


__all__ = [
    "BuilderRegistry",
    "ChunkReader",
    "DocumentStaging",
    "Locks",
    "ReaperRegistry",
    "RunHistory",
    "RunLedger",
    "SnapshotArchive",
    "SnapshotOpsRegistry",
    "SnapshotRecords",
    "SourceCatalog",
    "StrandedRepair",
    "VectorCache",
]
