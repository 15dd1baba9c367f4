"""The sync pipeline as plain functions: plan, process one document, finish.

Each function takes a :class:`PipelineContext` holding its dependencies and
ids as arguments, so a Celery task is a thin shell around it and a test calls
it directly.  Each is idempotent under redelivery:

* :func:`plan_sync` opens a run and lists the source; documents that vanished
  are tombstoned here (registry-only work).
* :func:`process_document` fetches, parses, chunks, diffs against the
  registry, embeds only what is new to the vector cache, and stages the diff
  in one transaction.  Run twice, the second run finds the content hash
  already recorded and changes nothing.
* :func:`finish_sync` aggregates the run and stages its changeset for the
  builder.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from core.errors import DocumentError, SourceError
from core.ids import content_hash, document_id
from core.types import Embedder, ObjectRef
from health.metrics import Metrics
from registry import TRANSIENT_REASONS, DocumentOutcome, DocumentState, Registry, SourceInfo, SyncRunInfo
from workers.chunking import CHUNKER_VERSION, Chunker
from workers.connectors import Connector, check_key
from workers.embedding import embed_with_cache
from workers.parsing import PARSER_SET_VERSION, Parsers

log = logging.getLogger("freshindex.pipeline")

#: Recorded on each document; a change re-chunks documents deliberately.
PIPELINE_VERSION = f"{PARSER_SET_VERSION}.{CHUNKER_VERSION}"


@dataclass
class PipelineContext:
    registry: Registry
    embedder: Embedder
    connector_for: Callable[[SourceInfo], Connector]
    parsers: Parsers
    chunker: Chunker
    metrics: Metrics
    max_file_bytes: int


@dataclass(frozen=True)
class PlannedDocument:
    key: str
    etag: str | None
    size: int


@dataclass(frozen=True)
class SyncPlan:
    run_id: int
    changeset_id: int
    source_id: str
    kb: str
    documents: tuple[PlannedDocument, ...] = field(default_factory=tuple)
    deleted: int = 0
    listed: int = 0


def _needs_processing(known: DocumentState | None, ref: ObjectRef) -> bool:
    if known is None or known.state == "deleted":
        return True
    if known.state == "error":
        return known.etag != ref.etag or known.error_reason in TRANSIENT_REASONS
    if known.parser_version != PIPELINE_VERSION:
        return True
    return known.etag is None or known.etag != ref.etag


def plan_sync(ctx: PipelineContext, source_id: str, *, trigger: str = "cli") -> SyncPlan:
    """Open a sync run, list the source and decide what to process."""
    source = ctx.registry.get_source(source_id)
    run_id, changeset_id = ctx.registry.start_sync_run(source_id, trigger)
    log.info("sync started", extra={"event": "sync_started", "source": source_id, "run": run_id})
    try:
        refs = list(ctx.connector_for(source).list())
    except SourceError as exc:
        ctx.registry.finish_sync_run(run_id, error=str(exc))
        ctx.registry.set_run_build(run_id, status="failed", snapshot_id=None, error=str(exc))
        ctx.metrics.sync_runs.labels(source_id, "failed").inc()
        raise
    known = ctx.registry.documents_for_source(source_id)
    listed = {ref.key for ref in refs}
    planned = tuple(PlannedDocument(r.key, r.etag, r.size) for r in refs if _needs_processing(known.get(r.key), r))
    deleted = 0
    for key, doc in known.items():
        if key not in listed and doc.state in ("active", "error"):
            n = ctx.registry.stage_deletion(run_id, changeset_id, doc.id)
            ctx.metrics.tombstones.labels(source.kb, "deleted").inc(n)
            ctx.metrics.documents.labels(source_id, "deleted").inc()
            deleted += 1
    ctx.registry.set_run_planned(run_id, listed=len(refs), planned=len(planned))
    log.info(
        "sync planned",
        extra={"event": "sync_planned", "source": source_id, "run": run_id, "listed": len(refs),
               "planned": len(planned), "deleted": deleted},
    )
    return SyncPlan(run_id, changeset_id, source_id, source.kb, planned, deleted, len(refs))


def process_document(
    ctx: PipelineContext, run_id: int, changeset_id: int, source_id: str, key: str, etag: str | None, size: int
) -> DocumentOutcome:
    """Bring one document's chunks in the registry up to date with the source.

    Bad input raises nothing: it is recorded against the document (and a
    metric counted) and the outcome says ``failed``.  Infrastructure errors
    (registry, source unreachable) propagate so the task shell can retry.
    """
    started = time.perf_counter()
    source = ctx.registry.get_source(source_id)
    doc_id = document_id(source_id, key)
    try:
        check_key(key)
        if size > ctx.max_file_bytes:
            raise DocumentError(DocumentError.TOO_LARGE, f"{size} bytes, limit {ctx.max_file_bytes}")
        data = ctx.connector_for(source).fetch(key)
        digest = content_hash(data)
        known = ctx.registry.get_document(doc_id)
        if (
            known is not None
            and known.state == "active"
            and known.content_hash == digest
            and known.parser_version == PIPELINE_VERSION
        ):
            ctx.registry.touch_document(run_id, doc_id, etag=etag, size=len(data),
                                        seconds=time.perf_counter() - started)
            ctx.metrics.documents.labels(source_id, "unchanged").inc()
            return DocumentOutcome(document_id=doc_id, key=key, outcome="unchanged")
        parsed = ctx.parsers.parse(data, key)
        chunks = ctx.chunker.chunk(doc_id, parsed)
        if not chunks:
            raise DocumentError(DocumentError.EMPTY, "no text could be extracted")
    except DocumentError as exc:
        seconds = time.perf_counter() - started
        ctx.registry.record_failure(
            run_id, source_id=source_id, document_id=doc_id, key=key, reason=exc.reason, detail=exc.detail,
            etag=etag, size=size, seconds=seconds,
        )
        ctx.metrics.document_errors.labels(source_id, exc.reason).inc()
        ctx.metrics.documents.labels(source_id, "failed").inc()
        log.warning(
            "document failed",
            extra={"event": "document_failed", "source": source_id, "key": key, "reason": exc.reason,
                   "detail": exc.detail},
        )
        return DocumentOutcome(document_id=doc_id, key=key, outcome="failed", error_reason=exc.reason,
                               error_detail=exc.detail, seconds=seconds)

    old_ids = ctx.registry.live_chunk_ids(doc_id)
    new_ids = {c.id for c in chunks}
    added_ids, removed_ids = new_ids - old_ids, old_ids - new_ids
    added = [c for c in chunks if c.id in added_ids]
    # Moved: same content under a new id (another heading, another position).
    # Its vector comes from the cache, but its point is rewritten.
    removed_hashes = set(ctx.registry.chunk_hashes(sorted(removed_ids)).values()) if removed_ids else set()
    moved = sum(1 for c in added if c.content_hash in removed_hashes)
    result = embed_with_cache(added, ctx.embedder, ctx.registry)
    rechunk_reason = None
    if known is not None and known.content_hash == digest and known.parser_version != PIPELINE_VERSION:
        rechunk_reason = f"pipeline {known.parser_version} -> {PIPELINE_VERSION}"
    outcome = DocumentOutcome(
        document_id=doc_id, key=key, outcome="modified" if known is not None and known.version else "added",
        chunks_embedded=result.embedded, chunks_reused=result.reused, chunks_kept=len(new_ids & old_ids),
        chunks_added=len(added_ids), chunks_moved=moved, tombstones=len(removed_ids),
        seconds=time.perf_counter() - started, rechunk_reason=rechunk_reason,
    )
    ctx.registry.stage_document(
        run_id, changeset_id, source=source, document_id=doc_id, key=key, etag=etag, size=len(data),
        content_hash=digest, title=parsed.title, parser=parsed.parser, parser_version=PIPELINE_VERSION,
        chunks=chunks, added_ids=added_ids, removed_ids=removed_ids, outcome=outcome,
    )
    model = ctx.embedder.model_id
    ctx.metrics.chunks_embedded.labels(model).inc(result.embedded)
    ctx.metrics.chunks_reused.labels(model).inc(result.reused)
    ctx.metrics.embed_seconds.labels(model).inc(result.seconds)
    ctx.metrics.tombstones.labels(source.kb, "superseded").inc(len(removed_ids))
    ctx.metrics.documents.labels(source_id, outcome.outcome).inc()
    log.debug(
        "document staged",
        extra={"event": "document_staged", "source": source_id, "key": key, "outcome": outcome.outcome,
               "embedded": result.embedded, "reused": result.reused, "tombstones": len(removed_ids)},
    )
    return outcome


def finish_sync(ctx: PipelineContext, run_id: int) -> tuple[SyncRunInfo, bool]:
    """Finish the run; the flag is True for the one caller that finished it."""
    run, finished_now = ctx.registry.finish_sync_run(run_id)
    if not finished_now:
        return run, False
    ctx.metrics.sync_runs.labels(run.source_id, run.status).inc()
    if run.status in ("succeeded", "partial") and run.finished_at is not None:
        ctx.metrics.last_sync.labels(run.source_id).set(run.finished_at.timestamp())
    log.info("sync finished", extra={"event": "sync_finished", "source": run.source_id, "run": run_id,
                                      "status": run.status, **run.summary.get("documents", {})})
    return run, True
