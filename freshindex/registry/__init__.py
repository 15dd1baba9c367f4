"""The registry: the system of record (SQLite embedded, PostgreSQL at scale)."""

from freshindex.registry.records import (
    CanaryInfo,
    ChunkRow,
    ChunkStatus,
    DocumentErrorInfo,
    DocumentFailure,
    DocumentOutcome,
    DocumentRecord,
    MirroredDocument,
    NewSnapshot,
    SnapshotInfo,
    SourceInfo,
    StagedDocument,
    SyncRunInfo,
)
from freshindex.registry.store import TRANSIENT_REASONS, Registry

__all__ = [
    "TRANSIENT_REASONS",
    "CanaryInfo",
    "ChunkRow",
    "ChunkStatus",
    "DocumentErrorInfo",
    "DocumentFailure",
    "DocumentOutcome",
    "DocumentRecord",
    "MirroredDocument",
    "NewSnapshot",
    "Registry",
    "SnapshotInfo",
    "SourceInfo",
    "StagedDocument",
    "SyncRunInfo",
]
