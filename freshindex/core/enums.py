"""Every state and kind the registry stores or the pipeline compares, in one module.

They are ``StrEnum`` members: each equals the string stored in the registry
(``RunStatus.RUNNING == "running"``), so rows written before these types
existed read back unchanged, and JSON output stays the same.  Compare and
assign with the members; never with a bare string literal.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """A sync run's own state (its build has :class:`BuildStatus`)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"  # every listed document indexed or skipped (excluded, empty, no parser)
    PARTIAL = "partial"  # some documents failed, the rest indexed
    FAILED = "failed"  # nothing indexed, the source could not be listed, or the run was abandoned
    HELD = "held"  # the deletion guard kept the run's deletions back


#: Runs after which the source's content is current (for lag and last-success).
SUCCESSFUL_RUNS = (RunStatus.SUCCEEDED, RunStatus.PARTIAL)


class BuildStatus(StrEnum):
    """What the build after a run did."""

    PENDING = "pending"
    BUILT = "built"
    UNCHANGED = "unchanged"
    FAILED = "failed"
    SKIPPED = "skipped"  # the run was asked not to build (``--no-build``)


class DocumentState(StrEnum):
    ACTIVE = "active"
    ERROR = "error"  # never indexed, or its last version failed (it keeps serving its last good chunks)
    DELETED = "deleted"
    #: Listed but deliberately not indexed: excluded by the source's patterns, no text (navigation or a
    #: table of contents only), or no parser for its type.  Its reason is in ``error_reason``; not an error.
    SKIPPED = "skipped"


class ChunkState(StrEnum):
    PENDING = "pending"  # staged, not yet in a built snapshot
    LIVE = "live"  # physically in the active snapshot
    REMOVED = "removed"  # gone from the active snapshot


class ChangesetStatus(StrEnum):
    OPEN = "open"  # its run is still staging documents
    STAGED = "staged"  # complete, waiting for the builder
    APPLIED = "applied"  # in a built snapshot
    ROLLED_BACK = "rolled_back"  # a rollback went behind the snapshot that applied it


class SnapshotStatus(StrEnum):
    BUILDING = "building"
    VERIFIED = "verified"
    ACTIVE = "active"  # the alias names it
    RETIRED = "retired"  # built and kept; a swap or rollback can serve it again
    FAILED = "failed"
    PRUNED = "pruned"  # its collection was dropped by retention


#: Snapshots whose collection exists and can serve.
SERVING_SNAPSHOTS = (SnapshotStatus.ACTIVE, SnapshotStatus.RETIRED)


class DocumentOutcomeKind(StrEnum):
    """What processing one document in a run did."""

    ADDED = "added"
    MODIFIED = "modified"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    FAILED = "failed"
    SKIPPED = "skipped"  # not indexed on purpose (a skip reason, :data:`core.errors.DocumentError.SKIP`)
    MOVED = "moved"  # the old key of a document whose content reappeared under a new key in the same sync
    STALE = "stale"  # the task's run was closed: fenced off, nothing written


class TombstoneReason(StrEnum):
    SUPERSEDED = "superseded"  # a newer version of the document replaced the chunk
    DELETED = "deleted"  # the document is gone at its source
    EXPIRED = "expired"  # past its validity
    REVOKED = "revoked"  # no longer permitted


#: Tombstones no rollback may undo (see ``Registry.realign_to_snapshot``).
FINAL_TOMBSTONE_REASONS = frozenset({TombstoneReason.DELETED, TombstoneReason.EXPIRED, TombstoneReason.REVOKED})


class BlockKind(StrEnum):
    """The kinds of block the parsers emit and the chunker packs (every kind any parser emits).

    A chunk's kind is its blocks' kind, or ``"mixed"`` when it packs several.
    A caption is not a kind: it travels as a table's ``meta["caption"]`` or
    stays a paragraph; a block quote is an admonition with
    ``meta["admonition"] == "quote"``.
    """

    HEADING = "heading"
    PARAGRAPH = "paragraph"
    LIST = "list"
    TABLE = "table"  # a whole table; its structure in ``meta`` (``columns``, ``rows``, ``caption``)
    TABLE_ROW = "table_row"  # one row of a CSV/TSV file, chunked by the table chunker
    CODE = "code"
    ADMONITION = "admonition"  # a note, warning or quote; its flavour in ``meta["admonition"]``
