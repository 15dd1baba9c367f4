"""The sync pipeline as plain functions: plan, process one document, finish.

Each function takes a :class:`PipelineContext` holding its dependencies and
ids as arguments, so a Celery task is a thin shell around it and a test calls
it directly.  Each is idempotent under redelivery:

* :func:`workers.planner.plan_sync` opens a run and lists the source;
  documents that vanished are tombstoned there (registry-only work), unless
  the deletion guard (:func:`workers.planner.deletion_hold`) holds them for
  a person to confirm.
* :func:`process_document` fetches, parses, chunks, diffs against the
  registry, embeds only what is new to the vector cache, and stages the diff
  in one transaction (the inline loop's: a batch's, :mod:`workers.batch`).  Run twice, the second run finds the content hash
  already recorded and changes nothing.
* :func:`finish_sync` aggregates the run and stages its changeset for the
  builder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from freshindex.acl.model import DocumentAcl
from freshindex.acl.resolution import PermissionService
from freshindex.core.enums import DocumentOutcomeKind, DocumentState
from freshindex.core.errors import DocumentError, RetryableError, StaleTaskError
from freshindex.core.ids import content_hash, document_id
from freshindex.core.types import ChunkDraft, Embedder, ParsedDocument, may_kill_the_process
from freshindex.core.vector_cache import EmbedResult
from freshindex.health.metrics import Metrics
from freshindex.health.observer import SyncObserver
from freshindex.registry import DocumentFailure, DocumentOutcome, DocumentRecord, Registry, SourceInfo
from freshindex.registry.records import DocumentTouch, MirroredDocument, StagedDocument
from freshindex.registry.touches import MOVED_DETAIL, MOVED_REASON
from freshindex.settings.model import SyncSettings
from freshindex.workers.ahead import ParseAhead, Prepared, loop_shape
from freshindex.workers.batch import RunBatch, stage_held_or_now
from freshindex.workers.chunking import Chunker
from freshindex.workers.connectors import ChunkMeta, Connector, check_key, for_run
from freshindex.workers.connectors.retry import RetryPolicy, fetch_with_retry
from freshindex.workers.document_acl import resolve_document_acl
from freshindex.workers.embedding import embed_with_cache
from freshindex.workers.handoff import EmbedPayload, Stage, StageHandoff
from freshindex.workers.parsing import OcrDeferred, Parsers
from freshindex.workers.parsing.registry import spec_named
from freshindex.workers.provenance import provenance
from freshindex.workers.run_end import BuildRecord as BuildRecord
from freshindex.workers.run_end import finish_sync as finish_sync
from freshindex.workers.run_end import record_build as record_build
from freshindex.workers.steps import DocumentLine, Raw, Transform
from freshindex.workers.steps.pool import PoolBroken, PoolMismatch
from freshindex.workers.versions import PIPELINE_VERSION, rechunk_reason
from freshindex.workers.versions import document_version as _version_of

log = logging.getLogger("freshindex.pipeline")


@dataclass
class PipelineContext:
    registry: Registry
    embedder: Embedder
    connector_for: Callable[[SourceInfo], Connector]
    parsers: Parsers
    chunker: Chunker
    metrics: Metrics  # what the observer writes to; the steps report to ``observer``, never to this
    max_file_bytes: int
    #: Hears every step's events (:class:`health.observer.SyncObserver`): the metrics and log lines are written there.
    observer: SyncObserver
    #: Deletion guard and fetch retry settings (defaults when not passed).
    sync: SyncSettings = field(default_factory=SyncSettings)
    #: Largest embed-stage hand-off, JSON bytes (``broker.stage_payload_max_bytes``; 0: no limit).
    stage_payload_max_bytes: int = 8_000_000
    #: The HTTP permission service, for sources with ``acl_sources`` including ``http``.
    acl_service: PermissionService | None = None
    #: Set by :func:`workers.runner.sync_inline`: the next documents fetched, parsed, chunked and embedded
    #: in threads while this one is processed (:mod:`workers.ahead`); None elsewhere (a Celery task).
    ahead: ParseAhead | None = None
    #: The transform steps turned on (``pipeline.steps``, :data:`workers.steps.TRANSFORMS`), between parse and chunk.
    transforms: tuple[Transform, ...] = ()
    #: Set by :func:`workers.runner.sync_inline`: the run's refusal, source and document records read, and the
    #: touches and stagings of its documents written, a batch at a time (:mod:`workers.batch`); None elsewhere.
    batch: RunBatch | None = None

    @property
    def line(self) -> DocumentLine:
        """The declared steps from bytes to chunks (:mod:`workers.steps`): parse, the transforms, chunk."""
        return DocumentLine(self.parsers, self.chunker, self.transforms)

    @property
    def fetch_policy(self) -> RetryPolicy:
        return RetryPolicy(retries=self.sync.fetch_retries, backoff_s=self.sync.fetch_backoff_s,
                           backoff_max_s=self.sync.fetch_backoff_max_s)


def document_version(parsers: Parsers, key: str, media_type: str | None = None) -> str:
    """The version a document at ``key`` records when processed now by a line without transforms
    (:func:`workers.versions.document_version`): its parser's and :data:`PIPELINE_VERSION` (read here at each
    call).  One recorded differs: process it again.  With a context, :func:`version_now` counts its transforms."""
    return _version_of(parsers.version_for(key, media_type), PIPELINE_VERSION)


def version_now(ctx: PipelineContext, key: str, media_type: str | None = None) -> str:
    """The version a document at ``key`` records when processed now by ``ctx``'s line: its parser's, the
    chunker's and each transform's turned on (:attr:`workers.steps.DocumentLine.pipeline_version`)."""
    return _version_of(ctx.parsers.version_for(key, media_type), PIPELINE_VERSION + ctx.line.transforms_version)


@dataclass(frozen=True)
class DocumentTask:
    """One document task of a run: the run and changeset it writes into, and the document as the plan listed it."""

    run_id: int
    changeset_id: int
    source_id: str
    key: str
    etag: str | None
    size: int
    media_type: str | None = None  # the listing's: picks the parser of a key without an extension one reads


def process_document(ctx: PipelineContext, task: DocumentTask, stage: Stage = Stage.ALL,
                     work: Callable[[], DocumentOutcome] | None = None) -> DocumentOutcome:
    """Bring one document's chunks in the registry up to date with the source.

    ``stage`` (:mod:`workers.handoff`): :attr:`Stage.ALL` does every step;
    the parse and OCR stages raise :class:`StageHandoff` where the next
    stage runs elsewhere.  ``work`` replaces the steps (the embed stage's),
    inside the same fence and crash accounting.

    A task of a run that no longer takes writes (finished, or adopted by a
    later run after its worker died or while it waited for a retry) changes
    nothing and returns outcome ``stale``, counted and logged
    (:func:`record_stale`).  It is checked before the fetch, so a stale
    redelivery usually costs no embedding; the check that decides is the one
    inside the staging transaction (:class:`core.errors.StaleTaskError`).
    """
    run_id, changeset_id, source_id, key = task.run_id, task.changeset_id, task.source_id, task.key
    doc_id = document_id(source_id, key)
    batch = ctx.batch
    try:
        why = batch.refusal() if batch is not None else ctx.registry.run_refusal(run_id, changeset_id)
        if why is not None:
            raise StaleTaskError(run_id, changeset_id, why)
        ready = ctx.ahead.take(key) if ctx.ahead is not None else None
        # Else adopted from the thread that worked ahead, or deferred by it (a touch: see _own_attempt).
        if ready is None or not (ready.attempt_open or ready.attempt_deferred):
            poisoned = begin_attempt(ctx, run_id, changeset_id, source_id, key, task.etag, task.size,
                                     task.media_type)
            if poisoned is not None:
                return poisoned
        try:
            outcome = work() if work is not None else _process_document(ctx, task, stage, ready)
        except BaseException:
            _end_attempt(ctx, doc_id, outcome=False, run_id=run_id)  # alive: a retry or a recorded error, not a crash
            raise
        if batch is None or not batch.holds(doc_id):  # else ended with the batch of touches it is in
            _end_attempt(ctx, doc_id, outcome=True, run_id=run_id)
        if batch is not None:
            batch.flush_if_due()
        return outcome
    except StaleTaskError as exc:
        record_stale(ctx, "process_document", exc, source=source_id, key=key)
        return DocumentOutcome(document_id=document_id(source_id, key), key=key, outcome=DocumentOutcomeKind.STALE,
                               error_detail=exc.why)


def begin_attempt(ctx: PipelineContext, run_id: int, changeset_id: int, source_id: str, key: str,
                  etag: str | None, size: int, media_type: str | None = None) -> DocumentOutcome | None:
    """The poison-pill rule, one for the Celery task and the inline runner: None to go on, or the failure.

    Counted in the registry before anything is fetched or parsed (with a pool, before the parse: ahead)
    (:meth:`registry.Registry.begin_document_attempt`), so a process that
    dies on the document (SIGKILL, a native parser's segfault, the OOM
    killer, Celery's hard time limit) leaves its attempt open and the next
    attempt, a redelivery, the reaper's resume or the next inline sync,
    counts the crash (``freshindex_worker_crashes_total{source}``).  Past
    ``sync.document_crash_retries`` crashes the document is recorded as
    ``worker_crashed`` with its etag, so the run completes (``partial``) and
    later syncs skip it until it changes.  Not guaranteed: a worker killed
    for another reason (an operator, a node lost) while on the document
    counts against it too, so keep the limit above one.
    """
    doc_id = document_id(source_id, key)
    # The held touches' attempts still open are closed in the same transaction: a death on this document is its own.
    closing = ctx.batch.closing() if ctx.batch is not None else []
    crashes, crashed = ctx.registry.begin_document_attempt(doc_id, etag=etag, run_id=run_id, closing=closing)
    if ctx.batch is not None:
        ctx.batch.closed(closing)
    if crashed:
        ctx.observer.worker_crashed(source_id, key, run_id, crashes)
    limit = ctx.sync.document_crash_retries
    if crashes <= limit:
        return None
    detail = (f"its worker process died {crashes} times while processing it (limit "
              f"sync.document_crash_retries={limit}); skipped until it changes")
    ctx.registry.record_failure(run_id, DocumentFailure(
        source_id=source_id, document_id=doc_id, key=key, reason=DocumentError.WORKER_CRASHED, detail=detail,
        etag=etag, size=size, parser_version=version_now(ctx, key, media_type)), changeset_id=changeset_id)
    _end_attempt(ctx, doc_id, outcome=True, run_id=run_id)
    ctx.observer.document_abandoned(source_id, key, detail)
    return DocumentOutcome(document_id=doc_id, key=key, outcome=DocumentOutcomeKind.FAILED,
                           error_reason=DocumentError.WORKER_CRASHED, error_detail=detail)


def _end_attempt(ctx: PipelineContext, doc_id: str, *, outcome: bool, run_id: int) -> None:
    # Best effort: when the registry is away the attempt stays open and the next one counts a crash that was
    # not; the error that got here matters more.  Only this run's attempt: a run that took over holds its own.
    try:
        ctx.registry.end_document_attempt(doc_id, outcome=outcome, run_id=run_id)
    except Exception as exc:  # the registry away is one line; anything else keeps its traceback
        log.warning("could not end the attempt on %s: %s", doc_id, exc, exc_info=not isinstance(exc, RetryableError))


def record_stale(ctx: PipelineContext, task: str, exc: StaleTaskError, **context: object) -> None:
    """Count and log a task fenced off by :class:`core.errors.StaleTaskError`: the metric
    ``freshindex_stale_tasks_total{task}`` and the stale run's ``stale_tasks`` column; the registry is unchanged."""
    try:
        total = ctx.registry.count_stale_task(exc.run_id)
    except RetryableError:  # counting is best effort; the fence already held
        total = -1
    ctx.observer.stale_task(task, exc.run_id, exc.changeset_id, exc.why, total, context)


@dataclass
class _Job:
    """One document task of a run, and what its steps learned of it so far."""

    run_id: int
    changeset_id: int
    source_id: str
    key: str
    etag: str | None
    size: int
    started: float
    source: SourceInfo
    doc_id: str
    raw_digest: str | None = None  # the fetched bytes' hash: what a later sync matches a move by
    stage: Stage = Stage.ALL
    media_type: str | None = None  # the listing's, for a key without an extension a parser reads
    #: The version the document records when processed now (:func:`version_now`); "" until asked.
    version: str = ""
    attempt: bool = True  # its attempt is open (False: deferred by a thread working ahead, see _own_attempt)

    def version_now(self, ctx: PipelineContext) -> str:
        if not self.version:
            self.version = version_now(ctx, self.key, self.media_type)
        return self.version


@dataclass
class _Fetched:
    """The fetch step's result: the bytes, their ACL and the registry's record of the document."""

    connector: Connector
    data: bytes
    digest: str  # of the bytes
    ready: Prepared | None  # what ParseAhead prepared from these same bytes, if anything
    acl: DocumentAcl
    known: DocumentRecord | None


@dataclass
class _Change:
    """A changed document, decided: its parse, its chunks, the diff against its live chunks, the vectors."""

    digest: str
    parsed: ParsedDocument
    chunks: list[ChunkDraft]
    old_ids: set[str]
    new_ids: set[str]
    added_ids: set[str]
    removed_ids: set[str]
    moved: int
    result: EmbedResult
    size: int  # bytes fetched
    provenance: dict[str, Any]  # keyword arguments of Registry.record_provenance


def _process_document(ctx: PipelineContext, task: DocumentTask, stage: Stage = Stage.ALL,
                      ready: Prepared | None = None) -> DocumentOutcome:
    """The work of :func:`process_document` once the run was seen open: fetch (or take what was
    fetched ahead, ``ready``), decide, stage.

    Bad input raises nothing: it is recorded against the document (and a
    metric counted) and the outcome says ``failed``.  Infrastructure errors
    (registry, source unreachable) propagate so the task shell can retry.
    """
    started = time.perf_counter()
    t = task
    source = ctx.batch.source() if ctx.batch is not None else ctx.registry.get_source(t.source_id)
    job = _Job(t.run_id, t.changeset_id, t.source_id, t.key, t.etag, t.size, started, source,
               document_id(t.source_id, t.key), stage=stage, media_type=t.media_type,
               attempt=ready is None or ready.attempt_open or not ready.attempt_deferred)
    try:
        fetched = _fetch(ctx, job, ready)
        decided = _decide(ctx, job, fetched)
    except DocumentError as exc:
        return _record_document_error(ctx, job, exc)
    if isinstance(decided, DocumentOutcome):
        return decided  # unchanged, or a mirror of an indexed twin
    return _stage(ctx, job, fetched.known, fetched.acl, decided)


def _fetch(ctx: PipelineContext, job: _Job, ready: Prepared | None) -> _Fetched:
    """Check the key and size, fetch the bytes (or take what ParseAhead fetched), resolve the ACL."""
    check_key(job.key)
    if job.size > ctx.max_file_bytes:
        raise DocumentError(DocumentError.TOO_LARGE, f"{job.size} bytes, limit {ctx.max_file_bytes}")
    # Retried through a source outage, then recorded as fetch_failed (transient): one retry loop for both runners
    # (connectors/retry.py).  Read at the revision this run planned, whichever process listed it (invariant 9).
    connector = for_run(ctx.connector_for(job.source), job.run_id)
    if ready is not None and ready.data is not None:
        data = ready.data
    else:
        ready = None
        data = fetch_with_retry(
            connector.fetch, job.key, ctx.fetch_policy, source_id=job.source_id,
            on_retry=lambda _attempt, _exc: ctx.observer.fetch_retried(job.source_id),
        )
    digest = job.raw_digest = content_hash(data)
    if ready is not None and (ready.digest != digest or (ready.parsed is None and ready.error is None
                                                         and ready.shape is None)):
        ready = None
    acl = resolve_document_acl(ctx, job.source, connector, job.key)
    known = ctx.batch.document(job.doc_id) if ctx.batch is not None else ctx.registry.get_document(job.doc_id)
    return _Fetched(connector, data, digest, ready, acl, known)


def _touch_if_unchanged(ctx: PipelineContext, job: _Job, fetched: _Fetched, digest: str | None,
                        shape_hash: str | None = None) -> DocumentOutcome | None:
    """The indexed version has this content: touch it (a re-tag if its ACL moved), never re-embed."""
    known = fetched.known
    if (known is None or known.state != DocumentState.ACTIVE or not known.content_hash
            or known.content_hash != digest or known.parser_version != job.version_now(ctx)):
        return None
    touch = DocumentTouch(document_id=job.doc_id, etag=job.etag, size=len(fetched.data),
                          content_hash=known.content_hash, parser_version=known.parser_version,
                          seconds=time.perf_counter() - job.started, shape_hash=shape_hash, acl=fetched.acl)
    if ctx.batch is not None:  # written with its batch, its attempt (if open) ended there (workers/batch.py)
        ctx.batch.touch(touch, counted=lambda outcome: ctx.observer.document_outcome(job.source_id, outcome),
                        attempt=job.attempt)
    # Alone, a batch of one: re-checked (row locked), a concurrent writer's change kept; its attempt ends with it.
    elif ctx.registry.touch_documents(job.run_id, job.changeset_id, job.source_id, [touch]):
        ctx.observer.document_outcome(job.source_id, "skipped")
        return DocumentOutcome(document_id=job.doc_id, key=job.key, outcome=DocumentOutcomeKind.SKIPPED,
                               error_reason=MOVED_REASON, error_detail=MOVED_DETAIL)
    else:
        ctx.observer.document_outcome(job.source_id, "unchanged")
    return DocumentOutcome(document_id=job.doc_id, key=job.key, outcome=DocumentOutcomeKind.UNCHANGED)


def _decide(ctx: PipelineContext, job: _Job, fetched: _Fetched) -> DocumentOutcome | _Change:
    """Unchanged (touched), a mirror of an indexed twin (staged), or a change to stage (parsed and chunked)."""
    if (same := _touch_if_unchanged(ctx, job, fetched, fetched.digest)) is not None:
        return same
    if (same := _touch_if_same_shape(ctx, job, fetched)) is not None:
        return same
    if (poisoned := _own_attempt(ctx, job)) is not None:
        return poisoned
    if ctx.batch is not None and may_kill_the_process(ctx.embedder):  # a death in the embedding is this document's
        ctx.batch.settle()  # only (a parse here settles in _parse; one in the pool cannot kill this process)
    ready, source = fetched.ready, job.source
    if ready is None or (ready.parsed is None and ready.error is None):
        drafted = _draft_in_pool(ctx, job, fetched.data)  # None: no pool, parsed below in this process
        if isinstance(drafted, DocumentOutcome):
            return drafted  # its parse killed a process too often: recorded as worker_crashed
        ready = drafted if drafted is not None else ready
    if ready is not None and ready.parsed is None and ready.error is not None:
        raise ready.error  # parsing failed ahead: the same failure, recorded here
    # (a ready result holds a parse, its error (raised above), or a shape hash the index no longer has)
    parsed = (ready.parsed if ready is not None and ready.parsed is not None
              else _parse(ctx, job, fetched.data))
    ctx.observer.ocr_read(job.source_id, len(parsed.meta.get("ocr_pages", ())),
                          len(parsed.meta.get("ocr_low_confidence_pages", ())))
    # A parser that hashes its extracted content (furniture removed): bytes changed only in the navigation cost a parse.
    digest = parsed.meta.get("content_hash") or fetched.digest
    if (same := _touch_if_unchanged(ctx, job, fetched, digest, parsed.meta.get("shape_hash"))) is not None:
        return same
    # The same content under the same permissions is indexed elsewhere: one canonical document, this one its
    # mirror, one set of points (registry/twins.py); asked of the loop's batch, a held twin is written first.
    acl = fetched.acl
    twin = ((ctx.batch or ctx.registry).canonical_twin(job.doc_id, source.kb, digest, acl=acl,
                                                       parser_version=job.version_now(ctx))
            if acl is not None else None)
    if twin is not None:
        mirrored = ctx.registry.stage_mirror(job.run_id, job.changeset_id, MirroredDocument(
            source_id=job.source_id, document_id=job.doc_id, key=job.key,
            etag=job.etag, size=len(fetched.data), content_hash=digest, canonical_id=twin, acl=acl,
            seconds=time.perf_counter() - job.started, parser_version=job.version_now(ctx),
            source_uri=provenance(fetched.data, kind=source.kind, location=source.location,
                                  key=job.key)["source_uri"]))
        ctx.observer.document_outcome(job.source_id, mirrored.outcome)
        return mirrored
    if ready is not None and ready.error is not None:
        raise ready.error  # chunking failed ahead (too_large): the same failure, recorded here
    chunks = ready.chunks if ready is not None and ready.parsed is not None else ctx.line.chunk(job.doc_id, parsed)
    return _diff_chunks(ctx, job, fetched, digest, parsed, chunks)


def _touch_if_same_shape(ctx: PipelineContext, job: _Job, fetched: _Fetched) -> DocumentOutcome | None:
    """The bytes changed, but the parser reads the same out of them (the shape hash stored at the last
    parse is equal; nothing to compare with, or parsed ahead: the parse decides): touched, no parse."""
    known, ready = fetched.known, fetched.ready
    if known is None or not known.shape_hash or (ready is not None and ready.parsed is not None):
        return None
    if ready is not None and ready.shape:
        shape: str | None = ready.shape
    else:
        if (poisoned := _own_attempt(ctx, job)) is not None:
            return poisoned
        if ctx.batch is not None:  # a parse in this process: a death in it is this document's only
            ctx.batch.settle()
        shape = loop_shape(ctx.ahead, ctx.parsers.for_source(job.source.options), fetched.data, job.key, job.media_type)
    return _touch_if_unchanged(ctx, job, fetched, known.content_hash, shape) if shape == known.shape_hash else None


def _own_attempt(ctx: PipelineContext, job: _Job) -> DocumentOutcome | None:
    """Open the attempt a thread working ahead deferred (it found a touch; the loop, since, did not) before a parser
    runs on the document here: the poison-pill outcome when a process died on it too often, else None."""
    if job.attempt:
        return None
    poisoned = begin_attempt(ctx, job.run_id, job.changeset_id, job.source_id, job.key, job.etag, job.size,
                             job.media_type)
    job.attempt = poisoned is None
    return poisoned


def _draft_in_pool(ctx: PipelineContext, job: _Job, data: bytes) -> Prepared | DocumentOutcome | None:
    """The line's steps on the document in the working-ahead pool's processes (:mod:`workers.steps.pool`),
    None without a pool.

    A process that died with the document in the shared pool may have died
    of another document: the document is parsed again in a process of its
    own, and each death there is one crash of its own, counted by the
    poison-pill rule (:func:`begin_attempt`, on the attempt this loop holds
    open) until ``sync.document_crash_retries`` records it as
    ``worker_crashed``; the sync goes on.
    """
    pool = ctx.ahead.pool if ctx.ahead is not None else None
    if pool is None or job.stage is not Stage.ALL:
        return None
    line, raw = ctx.line.for_source(job.source.options), Raw(data, job.key, job.media_type)
    try:
        drafted = pool.draft(line, job.doc_id, raw)
    except PoolBroken:
        drafted = None
    except PoolMismatch:
        return None  # the workers would not parse as this process does: parsed here
    while drafted is None:
        try:
            drafted = pool.draft_alone(line, job.doc_id, raw)
        except PoolBroken:
            poisoned = begin_attempt(ctx, job.run_id, job.changeset_id, job.source_id, job.key, job.etag, job.size,
                                     job.media_type)
            if poisoned is not None:
                return poisoned
    return Prepared(data=data, parsed=drafted.parsed, chunks=drafted.chunks, error=drafted.error)


def _parse(ctx: PipelineContext, job: _Job, data: bytes) -> ParsedDocument:
    """Parse and transform (the line's steps before chunk); in the parse stage a PDF page that needs OCR
    hands the document on to the ocr stage."""
    line, raw = ctx.line.for_source(job.source.options), Raw(data, job.key, job.media_type)
    if ctx.batch is not None:  # a parse in this process: a death in it is this document's only
        ctx.batch.settle()
    if job.stage is not Stage.PARSE:
        return line.parse(raw)
    try:
        return line.deferring_ocr().parse(raw)
    except OcrDeferred as exc:
        raise StageHandoff(Stage.OCR) from exc


def _diff_chunks(ctx: PipelineContext, job: _Job, fetched: _Fetched, digest: str, parsed: ParsedDocument,
                 chunks: list[ChunkDraft] | None) -> _Change:
    """Diff the chunks against the document's live ones and embed the new ones (from the cache when it has them)."""
    if not chunks:
        raise DocumentError(DocumentError.EMPTY, "no text could be extracted (the page holds only navigation, "
                            "an index or a table of contents, or no text at all)")
    if isinstance(fetched.connector, ChunkMeta):  # e.g. a git source's commit: in the payload, not in the embedded text
        stamp = fetched.connector.chunk_meta(job.key)
        for c in chunks:
            c.meta.update(stamp)
    prov = provenance(fetched.data, kind=job.source.kind, location=job.source.location, key=job.key)
    return _diff_and_embed(ctx, job, digest, parsed, chunks, len(fetched.data), prov, _Via(
        hand_off=lambda: _hand_to_embed(ctx, job, fetched, digest, parsed, chunks, prov), ahead=fetched.ready,
        unknown=ctx.batch is not None and ctx.batch.unknown(job.doc_id, fetched.known)))


@dataclass(frozen=True)
class _Via:
    """How a diff's new chunks get their vectors besides being embedded here: handed on to the embed stage
    (``hand_off``, raising :class:`StageHandoff`), or from what a thread embedded ``ahead``; ``unknown``: the inline
    run (its source's only one) read no record of the document, so it has no chunk (their foreign key) to read."""

    hand_off: Callable[[], None] | None = None
    ahead: Prepared | None = None
    unknown: bool = False


def _diff_and_embed(ctx: PipelineContext, job: _Job, digest: str, parsed: ParsedDocument, chunks: list[ChunkDraft],
                    size: int, prov: dict[str, Any], via: _Via = _Via()) -> _Change:
    """The diff against the document's live chunks; the new ones embedded here (or ``via.ahead``, in a thread:
    :mod:`workers.ahead`), or handed on (``via.hand_off``)."""
    hand_off, ahead = via.hand_off, via.ahead
    old_ids = set() if via.unknown else ctx.registry.live_chunk_ids(job.doc_id)
    new_ids = {c.id for c in chunks}
    added_ids, removed_ids = new_ids - old_ids, old_ids - new_ids
    added = [c for c in chunks if c.id in added_ids]
    # Moved: same content under a new id (another heading or position): its vector cached, its point rewritten.
    removed_hashes = set(ctx.registry.chunk_hashes(sorted(removed_ids)).values()) if removed_ids else set()
    moved = sum(1 for c in added if c.content_hash in removed_hashes)
    if added and hand_off is not None and job.stage in (Stage.PARSE, Stage.OCR):
        hand_off()
    # A text over the model's input limit, or one a remote model refuses, fails this document only.
    cache = ctx.batch.vector_cache(ahead.looked if ahead else None) if ctx.batch is not None else ctx.registry
    result = embed_with_cache(added, ctx.embedder, cache, ahead=ahead.vectors if ahead else None)
    if ahead is not None and ahead.vectors:
        result = dataclasses.replace(result, seconds=result.seconds + ahead.embed_seconds)
    return _Change(digest, parsed, chunks, old_ids, new_ids, added_ids, removed_ids, moved, result, size, prov)


def _hand_to_embed(ctx: PipelineContext, job: _Job, fetched: _Fetched, digest: str, parsed: ParsedDocument,
                   chunks: list[ChunkDraft], prov: dict[str, Any]) -> None:
    """Raise the hand-off to the embed stage, unless the chunks outgrow ``stage_payload_max_bytes``."""
    payload = EmbedPayload(digest=digest, raw_digest=fetched.digest, size=len(fetched.data), title=parsed.title,
                           parser=parsed.parser, acl=fetched.acl, provenance=prov, chunks=chunks,
                           seconds=time.perf_counter() - job.started,
                           shape_hash=parsed.meta.get("shape_hash")).to_json()
    limit = ctx.stage_payload_max_bytes
    if limit and len(json.dumps(payload, separators=(",", ":"))) > limit:
        return  # embedded here: a broker message that large would cost more than it spares
    raise StageHandoff(Stage.EMBED, payload)


def _record_document_error(ctx: PipelineContext, job: _Job, exc: DocumentError) -> DocumentOutcome:
    """Record bad input against the document: a skip (nothing to index, on purpose) or a failure."""
    seconds = time.perf_counter() - job.started
    source_id, doc_id, key = job.source_id, job.doc_id, job.key
    if exc.reason in DocumentError.SKIP:  # nothing to index, on purpose: a skip, never a failure
        ctx.registry.record_skips(job.run_id, job.changeset_id, source_id, [{
            "document_id": doc_id, "key": key, "reason": exc.reason, "detail": exc.detail, "etag": job.etag,
            "size": job.size, "seconds": seconds, "parser_version": job.version_now(ctx),
            "source_hash": job.raw_digest}])
        ctx.observer.document_skipped(source_id, key, exc.reason, exc.detail)
        return DocumentOutcome(document_id=doc_id, key=key, outcome=DocumentOutcomeKind.SKIPPED,
                               error_reason=exc.reason, error_detail=exc.detail, seconds=seconds)
    ctx.registry.record_failure(job.run_id, DocumentFailure(
        source_id=source_id, document_id=doc_id, key=key, reason=exc.reason, detail=exc.detail,
        etag=job.etag, size=job.size, seconds=seconds, parser_version=job.version_now(ctx),
    ), changeset_id=job.changeset_id)
    ctx.observer.document_failed(source_id, key, exc.reason, exc.detail)
    return DocumentOutcome(document_id=doc_id, key=key, outcome=DocumentOutcomeKind.FAILED, error_reason=exc.reason,
                           error_detail=exc.detail, seconds=seconds)


def _stage(ctx: PipelineContext, job: _Job, known: DocumentRecord | None, acl: DocumentAcl | None, change: _Change
           ) -> DocumentOutcome:
    """Stage the change in the run's changeset with its provenance (one transaction, or the batch's), count it."""
    source, result = job.source, change.result
    version = _parsed_version(ctx, job, change.parsed)
    reason = None
    if known is not None and known.content_hash == change.digest and known.parser_version != version:
        reason = rechunk_reason(known.parser_version, version)
    outcome = DocumentOutcome(
        document_id=job.doc_id, key=job.key,
        outcome=DocumentOutcomeKind.MODIFIED if known is not None and known.version else DocumentOutcomeKind.ADDED,
        chunks_embedded=result.embedded, chunks_reused=result.reused, chunks_kept=len(change.new_ids & change.old_ids),
        chunks_added=len(change.added_ids), chunks_moved=change.moved, tombstones=len(change.removed_ids),
        seconds=time.perf_counter() - job.started, rechunk_reason=reason,
    )
    staged = StagedDocument(  # provenance: front matter, source URI (the freshness sweep reads them)
        source=source, document_id=job.doc_id, key=job.key, etag=job.etag, size=change.size, content_hash=change.digest,
        title=change.parsed.title, parser=change.parsed.parser, parser_version=version, chunks=change.chunks,
        added_ids=change.added_ids, removed_ids=change.removed_ids, outcome=outcome, acl=acl,
        source_hash=job.raw_digest, shape_hash=change.parsed.meta.get("shape_hash"), provenance=change.provenance)
    ctx.observer.embedded(ctx.embedder.model_id, result.embedded, result.reused, result.seconds)

    def written() -> None:
        ctx.observer.tombstoned(source.kb, "superseded", len(change.removed_ids))
        ctx.observer.document_staged(job.source_id, job.key, outcome.outcome, {
            "embedded": result.embedded, "reused": result.reused, "tombstones": len(change.removed_ids)})
    stage_held_or_now(ctx.registry, ctx.batch if job.stage is Stage.ALL else None, job.run_id, job.changeset_id,
                      staged, written)
    return outcome


def _parsed_version(ctx: PipelineContext, job: _Job, parsed: ParsedDocument) -> str:
    """The version of the parser that read the document (stamped by :meth:`Parsers.parse`; the embed stage's
    parse carries only its parser's name), joined to the pipeline's: what the document records."""
    version = parsed.parser_version
    if not version and (spec := spec_named(parsed.parser)) is not None:
        version = spec.version
    return _version_of(version, PIPELINE_VERSION + ctx.line.transforms_version) if version else job.version_now(ctx)
