"""The registry: every read and write of the system of record.

:class:`Registry` composes one store per concern (sources, their connector state, runs, staging,
chunks, vector cache, snapshots, archive, audit, refusals, locks, health signals, API keys,
freshness, twins, golden sets),
each a mixin over :class:`registry.base._Base`, so one object still serves
every caller; a consumer should type its dependency with the narrow protocol
it uses (:mod:`registry.protocols`), not with this class.  Each public method
is one transaction, so a task that dies half-way leaves either all of a
document's changes or none of them (of a batch of touched documents, all of
the batch or none: :mod:`registry.touches`).  Methods return plain records
(:mod:`registry.records`), never ORM objects.

Writes that a redelivered task may repeat are idempotent: rows are keyed by
content-derived ids and inserted with "on conflict" clauses.
"""

from __future__ import annotations

from freshindex.registry.archive import ArchiveStore
from freshindex.registry.attempts import AttemptsStore
from freshindex.registry.audit import AuditStore
from freshindex.registry.base import process_name
from freshindex.registry.cache import VectorCacheStore
from freshindex.registry.chunks import ChunkStore
from freshindex.registry.document_acl import DocumentAclStore
from freshindex.registry.freshness import FreshnessStore
from freshindex.registry.golden_sets import GoldenSetStore
from freshindex.registry.keys import KeyStore
from freshindex.registry.locks import LockStore
from freshindex.registry.refusals import RefusalStore
from freshindex.registry.runs import RunClaim, RunsStore
from freshindex.registry.signals import HealthStore
from freshindex.registry.snapshots import SnapshotStore
from freshindex.registry.source_state import SourceStateStore
from freshindex.registry.sources import SourcesStore
from freshindex.registry.staging import TRANSIENT_REASONS, StagingStore
from freshindex.registry.touches import TouchStore
from freshindex.registry.twins import TwinStore
from freshindex.registry.webhooks import WebhookStore


class Registry(
    SourcesStore,
    SourceStateStore,
    RunsStore,
    TouchStore,
    AttemptsStore,
    DocumentAclStore,
    StagingStore,
    ChunkStore,
    VectorCacheStore,
    SnapshotStore,
    ArchiveStore,
    AuditStore,
    RefusalStore,
    LockStore,
    HealthStore,
    KeyStore,
    WebhookStore,
    FreshnessStore,
    TwinStore,
    GoldenSetStore,
):
    """Facade over the registry database: every concern's store on one engine.

    Holds no state of its own beyond :class:`registry.base._Base` (engine,
    session factory, dialect); the stores share it.  It does not make two
    calls one transaction.
    """


__all__ = ["TRANSIENT_REASONS", "Registry", "RunClaim", "process_name"]
