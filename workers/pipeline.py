"""The sync pipeline as plain functions: plan, process one document, finish.

Each function takes a :class:`PipelineContext` holding its dependencies and
ids as arguments, so a Celery task is a thin shell around it and a test calls
it directly.  Each is idempotent under redelivery:

* :func:`plan_sync` opens a run and lists the source; documents that vanished
  are tombstoned here (registry-only work), unless the deletion guard
  (:func:`deletion_hold`) holds them for a person to confirm.
* :func:`process_document` fetches, parses, chunks, diffs against the
  registry, embeds only what is new to the vector cache, and stages the diff
  in one transaction.  Run twice, the second run finds the content hash
  already recorded and changes nothing.
* :func:`finish_sync` aggregates the run and stages its changeset for the
  builder.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from freshindex.acl.model import AclError, DocumentAcl, is_sidecar
from freshindex.acl.sources import AclResolver, AclSourceError, PermissionService, SourceAcl
from freshindex.core.enums import SUCCESSFUL_RUNS, BuildStatus, DocumentOutcomeKind
from freshindex.core.enums import DocumentState as DocState
from freshindex.core.errors import ConfigError, DocumentError, LockHeldError, RetryableError, StaleTaskError
from freshindex.core.ids import content_hash, document_id
from freshindex.core.types import ChunkDraft, Embedder, ObjectRef, ParsedDocument
from freshindex.health.metrics import Metrics
from freshindex.registry import TRANSIENT_REASONS, DocumentOutcome, DocumentState, Registry, SourceInfo, SyncRunInfo
from freshindex.registry.protocols import RunLedger
from freshindex.settings.model import SyncSettings
from freshindex.snapshots import BuildResult
from freshindex.workers.chunking import CHUNKER_VERSION, Chunker
from freshindex.workers.connectors import ChunkMeta, Connector, check_key
from freshindex.workers.connectors.retry import RetryPolicy, fetch_with_retry
from freshindex.workers.embedding import embed_with_cache
from freshindex.workers.parsing import PARSER_SET_VERSION, Parsers
from freshindex.workers.provenance import provenance
from freshindex.workers.selection import Selection

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
    #: Deletion guard and fetch retry settings (defaults when not passed).
    sync: SyncSettings = field(default_factory=SyncSettings)
    #: The HTTP permission service, for sources with ``acl_sources`` including ``http``.
    acl_service: PermissionService | None = None
    #: Set by :func:`workers.runner.sync_inline`: the next document fetched, parsed and chunked in a
    #: thread while this one embeds (:class:`ParseAhead`); None elsewhere (a Celery task).
    ahead: ParseAhead | None = None

    @property
    def fetch_policy(self) -> RetryPolicy:
        return RetryPolicy(retries=self.sync.fetch_retries, backoff_s=self.sync.fetch_backoff_s,
                           backoff_max_s=self.sync.fetch_backoff_max_s)


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
    #: A live run of the source was already running: this plan joined it and
    #: planned nothing (``run_id`` is that run; follow it, do not process).
    joined: bool = False


def _needs_processing(known: DocumentState | None, ref: ObjectRef) -> bool:
    if known is None or known.state == DocState.DELETED:
        return True
    if known.state == DocState.SKIPPED and known.error_reason == DocumentError.EXCLUDED:
        return True  # no longer excluded (the patterns changed): a document now
    if known.state in (DocState.ERROR, DocState.SKIPPED):
        # A new pipeline (a parser fix) tries again what an older one failed on, once.
        return (known.etag != ref.etag or known.error_reason in TRANSIENT_REASONS
                or known.parser_version != PIPELINE_VERSION)
    if known.parser_version != PIPELINE_VERSION:
        return True
    return known.etag is None or known.etag != ref.etag


def deletion_hold(*, deleting: int, live: int, listed: int, max_share: float, min_held: int) -> str | None:
    """Why deleting ``deleting`` of a source's ``live`` documents must wait, or None.

    An empty listing (a prefix emptied, a bucket re-created, a mount gone)
    looks exactly like "every document was deleted", so it is always held
    when the source has a live document.  Otherwise deleting more than
    ``max_share`` of the live documents is held, but only from ``min_held``
    deletions on: a small source losing one of two documents (or renaming
    its only one) is ordinary.
    """
    if deleting <= 0 or live <= 0:
        return None
    share = deleting / live
    if listed == 0 or (deleting >= min_held and share > max_share):
        return (f"would delete {deleting} of {live} documents ({share:.0%}, limit {max_share:.0%})"
                .replace("%", " %") + ("; the source listed nothing" if listed == 0 else ""))
    return None


def plan_sync(ctx: PipelineContext, source_id: str, *, trigger: str = "cli") -> SyncPlan:
    """Open a sync run, list the source and decide what to process.

    A listing that fails closes the run as ``failed`` (changeset dropped)
    before the error propagates, so no run is left ``running``.  Deletions
    the guard holds are not staged: the documents keep serving, the run
    finishes as ``held`` and its other changes are processed as usual.
    """
    source = ctx.registry.get_source(source_id)
    if source.removed:  # `freshindex sources remove`: its documents were withdrawn for good
        raise ConfigError(f"source {source_id!r} was removed; add it again with `freshindex sources add --replace`")
    # One sync per source at a time: the same decision for the inline runner
    # and the sync_source task (a live running run is joined, never doubled).
    claim = ctx.registry.open_or_join_run(source_id, trigger, lease_s=ctx.sync.run_lease_s)
    if claim.joined:
        log.info("sync joined", extra={"event": "sync_joined", "source": source_id, "run": claim.run_id})
        return SyncPlan(claim.run_id, claim.changeset_id or 0, source_id, source.kb, joined=True)
    run_id, changeset_id = claim.run_id, claim.changeset_id or 0
    log.info("sync started", extra={"event": "sync_started", "source": source_id, "run": run_id})
    try:
        connector = ctx.connector_for(source)
        # Sidecars are ACL, never documents (the connectors skip them; this is the backstop).
        refs = [r for r in connector.list() if not is_sidecar(r.key)]
        source_acl = SourceAcl.of(source)
    except Exception as exc:
        # Any listing failure (not only SourceError: a bug, a bad location)
        # must close the run, or the source looks busy until its lease ends.
        ctx.registry.finish_sync_run(run_id, error=f"cannot list the source: {exc}")
        ctx.registry.set_run_build(run_id, status=BuildStatus.FAILED, snapshot_id=None, error=str(exc))
        ctx.metrics.sync_runs.labels(source_id, "failed").inc()
        log.warning("sync failed", extra={"event": "sync_list_failed", "source": source_id, "run": run_id,
                                          "error": str(exc)})
        raise
    known = ctx.registry.documents_for_source(source_id)
    # The source's --include/--exclude patterns, applied here for every connector kind (workers/selection.py).
    excluded = _excluded(Selection.of(source.options), refs)
    docs = [r for r in refs if r.key not in excluded]
    listed = {ref.key for ref in docs}
    planned = tuple(PlannedDocument(r.key, r.etag, r.size) for r in docs if _needs_processing(known.get(r.key), r))
    planned_keys = {d.key for d in planned}
    # Under a folder the connector could not read (listed as one unreadable entry), nothing is gone.
    unlisted = tuple(getattr(connector, "unlisted_prefixes", ()))
    gone = [doc for key, doc in known.items() if key not in listed
            and doc.state in (DocState.ACTIVE, DocState.ERROR, DocState.SKIPPED)
            and not (doc.state == DocState.SKIPPED and key in excluded)  # excluded before: still a skip
            and not (unlisted and key.startswith(unlisted))]
    # A vanished document whose content reappears under a new key in this sync moved: its old key
    # goes in this build and the guard does not count it (content identity: _find_moves).
    moves = _find_moves(ctx, connector, source_id, [r for r in docs if r.key in planned_keys], known,
                        [d for d in gone if d.state == DocState.ACTIVE])
    moved_from = {old.key for old in moves.values()}
    gone = [doc for doc in gone if doc.key not in moved_from]
    live = sum(1 for doc in known.values() if doc.state == DocState.ACTIVE)
    deleting = sum(1 for doc in gone if doc.state == DocState.ACTIVE)
    guard = ctx.sync
    held = deletion_hold(deleting=deleting, live=live, listed=len(docs), max_share=guard.max_deletion_share,
                         min_held=guard.min_held_deletions)
    if held is not None:
        confirmed = ctx.registry.take_deletion_confirmation(source_id)  # one shot: used or not, it is gone
        if confirmed is not None and deleting <= confirmed:
            log.warning("deletions confirmed", extra={"event": "deletions_confirmed", "source": source_id,
                                                      "run": run_id, "deleting": deleting, "confirmed": confirmed})
            held = None
        elif confirmed is not None:
            held += f"; the confirmation covered only {confirmed}"
    # Excluded keys are recorded once as skipped (again only if they were something else before).
    new_skips = [(r, why) for r, why in ((r, excluded[r.key]) for r in refs if r.key in excluded)
                 if not _skipped_as(known.get(r.key), DocumentError.EXCLUDED)
                 and (known.get(r.key) is None or known[r.key].state not in (DocState.ACTIVE, DocState.ERROR))]
    carried = sum(1 for r in docs if r.key not in planned_keys and (k := known.get(r.key)) is not None
                  and k.state == DocState.SKIPPED) + sum(
        1 for r in refs if r.key in excluded and _skipped_as(known.get(r.key), DocumentError.EXCLUDED))
    ctx.registry.set_run_planned(run_id, listed=len(refs), planned=len(planned),
                                 documents=[(d.key, d.etag, d.size) for d in planned],  # lets the reaper resume
                                 skipped=carried, moves=[{"from": old.key, "to": new} for new, old in
                                                         sorted(moves.items())])
    _note_observed(ctx, source_id, run_id, docs, planned_keys)  # sync lag (registry/freshness.py)
    _retag_listed(ctx, source, source_acl, connector, run_id, changeset_id, docs, known, planned_keys)
    for new_key, old in sorted(moves.items()):
        # Not held, whatever the guard says of real deletions: one build never serves both keys.
        n = ctx.registry.stage_deletion(run_id, changeset_id, old.id, moved_to=new_key)
        ctx.metrics.tombstones.labels(source.kb, "superseded").inc(n)
        ctx.metrics.documents_moved.labels(source_id).inc()
        log.info("document moved", extra={"event": "document_moved", "source": source_id, "run": run_id,
                                          "from": old.key, "to": new_key})
    if new_skips:
        ctx.registry.record_skips(run_id, changeset_id, source_id, [
            {"document_id": document_id(source_id, r.key), "key": r.key, "reason": DocumentError.EXCLUDED,
             "detail": why, "etag": r.etag, "size": r.size} for r, why in new_skips])
        ctx.metrics.documents_skipped.labels(source_id, DocumentError.EXCLUDED).inc(len(new_skips))
    deleted = 0
    if held is not None:
        reason = f"{held}; confirm with `freshindex sources confirm-deletions {source_id}`"
        pending = [doc.id for doc in gone if doc.state == DocState.ACTIVE]
        ctx.registry.hold_deletions(run_id, reason=reason, held={
            "deletions": deleting, "live": live, "listed": len(docs), "limit": guard.max_deletion_share,
            "keys": sorted(doc.key for doc in gone)[:20], "moved": len(moves),
        })
        # Held documents keep serving, labelled "pending deletion" in the context until a person decides.
        ctx.registry.mark_pending_deletion(source_id, run_id, pending)
        ctx.metrics.deletions_held.labels(source_id).inc()
        log.warning("deletions held", extra={"event": "deletions_held", "source": source_id, "run": run_id,
                                             "deleting": deleting, "live": live, "listed": len(docs),
                                             "moved": len(moves), "reason": reason})
    else:
        ctx.registry.mark_pending_deletion(source_id, run_id, ())  # whatever an earlier hold labelled
        for doc in gone:
            why = excluded.get(doc.key)
            n = ctx.registry.stage_deletion(
                run_id, changeset_id, doc.id,
                skipped=(DocumentError.EXCLUDED, why) if why is not None else None)
            ctx.metrics.tombstones.labels(source.kb, "deleted").inc(n)
            ctx.metrics.documents.labels(source_id, "deleted").inc()
            deleted += 1
    log.info(
        "sync planned",
        extra={"event": "sync_planned", "source": source_id, "run": run_id, "listed": len(refs),
               "planned": len(planned), "deleted": deleted, "deletions_held": deleting if held else 0,
               "moved": len(moves), "excluded": len(excluded)},
    )
    return SyncPlan(run_id, changeset_id, source_id, source.kb, planned, deleted, len(refs))


def _excluded(selection: Selection, refs: list[ObjectRef]) -> dict[str, str]:
    """Listed keys the source's patterns leave out, with why (the skip detail)."""
    if selection.everything:
        return {}
    return {r.key: why for r in refs if (why := selection.why_excluded(r.key)) is not None}


def _skipped_as(known: DocumentState | None, reason: str) -> bool:
    return known is not None and known.state == DocState.SKIPPED and known.error_reason == reason


def _find_moves(ctx: PipelineContext, connector: Connector, source_id: str, new: list[ObjectRef],
                known: dict[str, DocumentState], gone: list[DocumentState]) -> dict[str, DocumentState]:
    """New keys of this sync that hold a vanished document's content: ``{new key: the vanished document}``.

    Content identity: a listed key the registry does not serve (new, or
    deleted before) whose bytes hash to a vanished document's recorded hash
    (``source_hash``; ``content_hash`` for documents indexed before it was
    recorded).  Only keys whose listed size equals a vanished document's are
    fetched to be hashed, so a sync without deletions fetches nothing here.
    A connector may name a rename itself: a listed ref's ``moved_from``
    attribute (a git connector's ``git diff -M``) pairs it with that
    vanished key without hashing; such a rename is a move even if its
    content changed a little.  Otherwise a move that changed content is a
    deletion plus an addition.  Each vanished document moves at most once.
    Not guaranteed: a candidate that cannot be fetched here is not a move
    (its old key is then deleted, or held, as usual).
    """
    if not gone or not new:
        return {}
    by_key = {doc.key: doc for doc in gone}
    moves: dict[str, DocumentState] = {}
    fresh = [r for r in new if (k := known.get(r.key)) is None or k.state != DocState.ACTIVE]
    for ref in fresh:
        hint = getattr(ref, "moved_from", None)
        if isinstance(hint, str) and hint in by_key:
            moves[ref.key] = by_key.pop(hint)
    by_content: dict[tuple[int, str], list[DocumentState]] = {}
    for doc in by_key.values():
        if doc.source_hash or doc.content_hash:
            by_content.setdefault((doc.size, doc.source_hash or doc.content_hash or ""), []).append(doc)
    sizes = {size for size, _ in by_content}
    for ref in sorted(fresh, key=lambda r: r.key):
        if ref.key in moves or ref.size not in sizes:
            continue
        try:
            data = fetch_with_retry(connector.fetch, ref.key, ctx.fetch_policy, source_id=source_id)
        except Exception as exc:  # not a move then; processing records what is wrong with it
            log.info("move candidate not read", extra={"event": "move_candidate_unread", "source": source_id,
                                                       "key": ref.key, "error": str(exc)})
            continue
        twins = by_content.get((len(data), content_hash(data)))
        if twins:
            moves[ref.key] = twins.pop(0)
            if not twins:
                sizes = {size for size, _ in by_content if by_content[(size, _)]}
    return moves


def acl_resolver(ctx: PipelineContext, source_acl: SourceAcl, connector: Connector, *,
                 sidecar_keys: set[str] | None = None) -> AclResolver:
    """An ACL resolver reading sidecars (and S3 tags) through ``connector``; one per sync or document task."""

    def read(key: str) -> bytes | None:
        try:
            return connector.fetch(key)
        except DocumentError as exc:
            if exc.reason == DocumentError.VANISHED:
                return None  # no such sidecar
            raise

    return AclResolver(source_acl, read=read, sidecar_keys=sidecar_keys, tags=getattr(connector, "acl_tags", None),
                       service=ctx.acl_service)


def _retag_listed(ctx: PipelineContext, source: SourceInfo, source_acl: SourceAcl, connector: Connector,
                  run_id: int, changeset_id: int, refs: list[ObjectRef], known: dict[str, DocumentState],
                  planned: set[str]) -> None:
    """Re-resolve the ACL of every listed document this run does not process, and stage re-tags.

    An unchanged document is not fetched, but a sidecar, a tag or a rule may
    have changed who may read it: its new ACL is stored (``acl_version``
    bumped) and its live chunks get upsert entries in this run's changeset,
    so the build rewrites their points with vectors from the cache (0
    embeds).  A document whose ACL cannot be resolved keeps its previous ACL
    and is recorded as failed with ``acl_invalid`` / ``acl_unavailable``.
    """
    resolver = acl_resolver(ctx, source_acl, connector, sidecar_keys=getattr(connector, "sidecar_keys", None))
    acls: dict[str, DocumentAcl] = {}
    for ref in refs:
        doc = known.get(ref.key)
        if doc is None or doc.state == DocState.DELETED or ref.key in planned:
            continue
        try:
            acl = resolver.resolve(ref.key)
            if doc.acl is None or doc.acl_fingerprint != acl.fingerprint() or doc.error_reason in _ACL_REASONS:
                acls[doc.id] = acl  # only what changed goes to the registry's write transaction
        except AclSourceError as exc:
            ctx.registry.record_failure(run_id, source_id=source.id, document_id=doc.id, key=ref.key,
                                        reason=exc.reason, detail=exc.detail, etag=doc.etag, size=doc.size,
                                        changeset_id=changeset_id)
            ctx.metrics.document_errors.labels(source.id, exc.reason).inc()
            log.warning("document ACL not resolved", extra={"event": "acl_unresolved", "source": source.id,
                                                             "key": ref.key, "reason": exc.reason,
                                                             "detail": exc.detail})
    if not acls:
        return
    applied = ctx.registry.apply_document_acls(source.id, acls, run_id=run_id, changeset_id=changeset_id)
    if applied.bumped:
        log.info("document ACLs changed", extra={"event": "acl_retagged", "source": source.id, "run": run_id,
                                                  "documents": len(applied.bumped),
                                                  "chunks": applied.retagged_chunks})


_ACL_REASONS = (DocumentError.ACL_INVALID, DocumentError.ACL_UNAVAILABLE)


def _resolve_document_acl(ctx: PipelineContext, source: SourceInfo, connector: Connector, key: str) -> DocumentAcl:
    """The document's ACL; a source that cannot say raises :class:`DocumentError` (never served wider)."""
    try:
        return acl_resolver(ctx, SourceAcl.of(source), connector).resolve(key)
    except AclSourceError as exc:
        raise DocumentError(exc.reason, exc.detail) from exc
    except AclError as exc:
        raise DocumentError(DocumentError.ACL_INVALID, str(exc)) from exc


@dataclass
class _Prepared:
    data: bytes | None = None
    digest: str = ""
    parsed: ParsedDocument | None = None
    chunks: list[ChunkDraft] | None = None
    error: BaseException | None = None  # a DocumentError of parsing or chunking, raised where it would have been


class ParseAhead:
    """Fetch, parse and chunk a document in a worker thread, ahead of the loop that processes it.

    onnxruntime releases the GIL while it embeds, and parsing (BeautifulSoup,
    PyMuPDF) is mostly Python, so parsing document n+1 while document n embeds
    overlaps the two on a multi-core machine.  The thread touches no registry
    and no vector cache: it reads the bytes, parses and chunks them (pure
    functions); :func:`_process_document` takes that work when the bytes it
    decides on hash the same, and does the work itself otherwise (a fetch the
    thread could not make, retries, failures recorded as before).  Bytes whose
    raw hash is the indexed one are not parsed ahead (they cost a touch).  At
    most :attr:`HELD` documents are held ahead; the oldest is dropped first.
    """

    HELD = 2

    def __init__(self) -> None:
        self._pending: dict[str, tuple[threading.Thread, list[_Prepared]]] = {}

    def submit(self, ctx: PipelineContext, source_id: str, key: str) -> None:
        while len(self._pending) >= self.HELD:
            thread, _ = self._pending.pop(next(iter(self._pending)))
            thread.join()
        try:
            source = ctx.registry.get_source(source_id)
            connector = ctx.connector_for(source)
            doc_id = document_id(source_id, key)
            known = ctx.registry.get_document(doc_id)
            parsers = ctx.parsers.for_source(source.options)
        except Exception:  # best effort: the document is then processed without help
            return
        skip = known.content_hash if known is not None and known.parser_version == PIPELINE_VERSION else None
        box: list[_Prepared] = []

        def work() -> None:
            out = _Prepared()
            try:
                check_key(key)
                data = connector.fetch(key)
                if len(data) > ctx.max_file_bytes:
                    return  # failed as too_large by the main path, nothing held
                out.data, out.digest = data, content_hash(data)
                if out.digest == skip:
                    return
                out.parsed = parsers.parse(data, key)
                out.chunks = ctx.chunker.chunk(doc_id, out.parsed)
            except DocumentError as exc:
                out.error = exc
            except Exception:  # a fetch error (retried by the main path) or a bug: nothing prepared
                out = _Prepared()
            finally:
                box.append(out)

        thread = threading.Thread(target=work, name="freshindex-parse-ahead", daemon=True)
        self._pending[key] = (thread, box)
        thread.start()

    def take(self, key: str) -> _Prepared | None:
        """What was prepared for ``key`` (waiting for it), or None."""
        entry = self._pending.pop(key, None)
        if entry is None:
            return None
        thread, box = entry
        thread.join()
        return box[0] if box else None

    def discard(self) -> None:
        for thread, _ in self._pending.values():
            thread.join()
        self._pending.clear()


def process_document(
    ctx: PipelineContext, run_id: int, changeset_id: int, source_id: str, key: str, etag: str | None, size: int
) -> DocumentOutcome:
    """Bring one document's chunks in the registry up to date with the source.

    A task of a run that no longer takes writes (finished, or adopted by a
    later run after its worker died or while it waited for a retry) changes
    nothing and returns outcome ``stale``, counted and logged
    (:func:`record_stale`).  It is checked before the fetch, so a stale
    redelivery usually costs no embedding; the check that decides is the one
    inside the staging transaction (:class:`core.errors.StaleTaskError`).
    """
    doc_id = document_id(source_id, key)
    try:
        why = ctx.registry.run_refusal(run_id, changeset_id)
        if why is not None:
            raise StaleTaskError(run_id, changeset_id, why)
        poisoned = begin_attempt(ctx, run_id, changeset_id, source_id, key, etag, size)
        if poisoned is not None:
            return poisoned
        try:
            outcome = _process_document(ctx, run_id, changeset_id, source_id, key, etag, size)
        except BaseException:
            _end_attempt(ctx, doc_id, outcome=False)  # alive: a retry or a recorded error, not a crash
            raise
        _end_attempt(ctx, doc_id, outcome=True)
        return outcome
    except StaleTaskError as exc:
        record_stale(ctx, "process_document", exc, source=source_id, key=key)
        return DocumentOutcome(document_id=document_id(source_id, key), key=key, outcome=DocumentOutcomeKind.STALE,
                               error_detail=exc.why)


def begin_attempt(ctx: PipelineContext, run_id: int, changeset_id: int, source_id: str, key: str,
                  etag: str | None, size: int) -> DocumentOutcome | None:
    """The poison-pill rule, one for the Celery task and the inline runner: None to go on, or the failure.

    Counted in the registry before anything is fetched or parsed
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
    crashes, crashed = ctx.registry.begin_document_attempt(doc_id, etag=etag, run_id=run_id)
    if crashed:
        ctx.metrics.worker_crashes.labels(source_id).inc()
        log.warning("worker died on a document", extra={"event": "document_crashed_worker", "source": source_id,
                                                        "key": key, "run": run_id, "crashes": crashes})
    limit = ctx.sync.document_crash_retries
    if crashes <= limit:
        return None
    detail = (f"its worker process died {crashes} times while processing it (limit "
              f"sync.document_crash_retries={limit}); skipped until it changes")
    ctx.registry.record_failure(run_id, source_id=source_id, document_id=doc_id, key=key,
                                reason=DocumentError.WORKER_CRASHED, detail=detail, etag=etag, size=size,
                                changeset_id=changeset_id, parser_version=PIPELINE_VERSION)
    _end_attempt(ctx, doc_id, outcome=True)
    ctx.metrics.document_errors.labels(source_id, DocumentError.WORKER_CRASHED).inc()
    ctx.metrics.documents.labels(source_id, "failed").inc()
    log.error("document failed", extra={"event": "document_failed", "source": source_id, "key": key,
                                        "reason": DocumentError.WORKER_CRASHED, "detail": detail})
    return DocumentOutcome(document_id=doc_id, key=key, outcome=DocumentOutcomeKind.FAILED,
                           error_reason=DocumentError.WORKER_CRASHED, error_detail=detail)


def _end_attempt(ctx: PipelineContext, doc_id: str, *, outcome: bool) -> None:
    # Best effort: when the registry is away the attempt stays open and the
    # next one counts a crash that was not; the error that got here matters more.
    try:
        ctx.registry.end_document_attempt(doc_id, outcome=outcome)
    except Exception:
        log.warning("could not end the attempt on %s", doc_id, exc_info=True)


def record_stale(ctx: PipelineContext, task: str, exc: StaleTaskError, **context: object) -> None:
    """Count and log a task fenced off by :class:`core.errors.StaleTaskError`.

    The metric ``freshindex_stale_tasks_total{task}`` and the stale run's
    ``stale_tasks`` column both count it; the registry was not changed.
    """
    ctx.metrics.stale_tasks.labels(task).inc()
    try:
        total = ctx.registry.count_stale_task(exc.run_id)
    except RetryableError:  # counting is best effort; the fence already held
        total = -1
    log.warning("stale task fenced off", extra={"event": "stale_task", "task": task, "run": exc.run_id,
                                                "changeset": exc.changeset_id, "why": exc.why,
                                                "stale_tasks": total, **context})


def _process_document(
    ctx: PipelineContext, run_id: int, changeset_id: int, source_id: str, key: str, etag: str | None, size: int
) -> DocumentOutcome:
    """The work of :func:`process_document` once the run was seen open.

    Bad input raises nothing: it is recorded against the document (and a
    metric counted) and the outcome says ``failed``.  Infrastructure errors
    (registry, source unreachable) propagate so the task shell can retry.
    """
    started = time.perf_counter()
    source = ctx.registry.get_source(source_id)
    doc_id = document_id(source_id, key)
    raw_digest: str | None = None  # the fetched bytes' hash: what a later sync matches a move by
    try:
        check_key(key)
        if size > ctx.max_file_bytes:
            raise DocumentError(DocumentError.TOO_LARGE, f"{size} bytes, limit {ctx.max_file_bytes}")
        # Retried here through a source outage, then recorded as fetch_failed
        # (transient): one retry loop for both runners (connectors/retry.py).
        connector = ctx.connector_for(source)
        ready = ctx.ahead.take(key) if ctx.ahead is not None else None
        if ready is not None and ready.data is not None:
            data = ready.data
        else:
            ready = None
            data = fetch_with_retry(
                connector.fetch, key, ctx.fetch_policy, source_id=source_id,
                on_retry=lambda _attempt, _exc: ctx.metrics.fetch_retries.labels(source_id).inc(),
            )
        digest = raw_digest = content_hash(data)
        if ready is not None and (ready.digest != digest or (ready.parsed is None and ready.error is None)):
            ready = None
        acl = _resolve_document_acl(ctx, source, connector, key)
        known = ctx.registry.get_document(doc_id)

        def unchanged(digest: str) -> DocumentOutcome | None:
            """The indexed version has this content: touch it (a re-tag if its ACL moved), never re-embed."""
            if (known is None or known.state != DocState.ACTIVE or known.content_hash != digest
                    or known.parser_version != PIPELINE_VERSION):
                return None
            ctx.registry.touch_document(run_id, doc_id, etag=etag, size=len(data),
                                        seconds=time.perf_counter() - started, changeset_id=changeset_id)
            ctx.registry.apply_document_acls(source_id, {doc_id: acl}, run_id=run_id, changeset_id=changeset_id)
            ctx.metrics.documents.labels(source_id, "unchanged").inc()
            return DocumentOutcome(document_id=doc_id, key=key, outcome=DocumentOutcomeKind.UNCHANGED)

        if (same := unchanged(digest)) is not None:
            return same
        if ready is not None and ready.parsed is None and ready.error is not None:
            raise ready.error  # parsing failed ahead: the same failure, recorded here
        # (a ready result holds a parse or, raised just above, its error)
        parsed = (ready.parsed if ready is not None and ready.parsed is not None
                  else ctx.parsers.for_source(source.options).parse(data, key))
        ctx.metrics.ocr_pages.labels(source_id).inc(len(parsed.meta.get("ocr_pages", ())))
        ctx.metrics.ocr_low_confidence_pages.labels(source_id).inc(len(parsed.meta.get("ocr_low_confidence_pages", ())))
        # A parser that hashes its extracted content (furniture removed) lets a
        # page whose bytes changed only in the navigation skip chunking and
        # staging: the release cost a parse, no embedding.
        digest = parsed.meta.get("content_hash") or digest
        if (same := unchanged(digest)) is not None:
            return same
        # The same content under the same permissions is already indexed elsewhere: one canonical
        # document with this one as its mirror, one set of points (registry/freshness.py).
        twin = ctx.registry.canonical_twin(doc_id, source.kb, digest, acl=acl) if acl is not None else None
        if twin is not None:
            mirrored = ctx.registry.stage_mirror(
                run_id, changeset_id, source_id=source_id, document_id=doc_id, key=key, etag=etag, size=len(data),
                content_hash=digest, canonical_id=twin, acl=acl, seconds=time.perf_counter() - started,
                source_uri=provenance(data, kind=source.kind, location=source.location, key=key)["source_uri"])
            ctx.metrics.documents.labels(source_id, mirrored.outcome).inc()
            return mirrored
        if ready is not None and ready.error is not None:
            raise ready.error  # chunking failed ahead (too_large): the same failure, recorded here
        chunks = ready.chunks if ready is not None else ctx.chunker.chunk(doc_id, parsed)
        if not chunks:
            raise DocumentError(DocumentError.EMPTY, "no text could be extracted (the page holds only navigation, "
                                "an index or a table of contents, or no text at all)")
        if isinstance(connector, ChunkMeta):  # e.g. a git source's commit: in the payload, not in the embedded text
            stamp = connector.chunk_meta(key)
            for c in chunks:
                c.meta.update(stamp)
        old_ids = ctx.registry.live_chunk_ids(doc_id)
        new_ids = {c.id for c in chunks}
        added_ids, removed_ids = new_ids - old_ids, old_ids - new_ids
        added = [c for c in chunks if c.id in added_ids]
        # Moved: same content under a new id (another heading, another position).
        # Its vector comes from the cache, but its point is rewritten.
        removed_hashes = set(ctx.registry.chunk_hashes(sorted(removed_ids)).values()) if removed_ids else set()
        moved = sum(1 for c in added if c.content_hash in removed_hashes)
        # A text over the model's input limit, or one a remote model refuses, fails this document only.
        result = embed_with_cache(added, ctx.embedder, ctx.registry)
    except DocumentError as exc:
        seconds = time.perf_counter() - started
        if exc.reason in DocumentError.SKIP:  # nothing to index, on purpose: a skip, never a failure
            ctx.registry.record_skips(run_id, changeset_id, source_id, [{
                "document_id": doc_id, "key": key, "reason": exc.reason, "detail": exc.detail, "etag": etag,
                "size": size, "seconds": seconds, "parser_version": PIPELINE_VERSION, "source_hash": raw_digest}])
            ctx.metrics.documents_skipped.labels(source_id, exc.reason).inc()
            ctx.metrics.documents.labels(source_id, DocumentOutcomeKind.SKIPPED).inc()
            log.info("document skipped", extra={"event": "document_skipped", "source": source_id, "key": key,
                                                "reason": exc.reason, "detail": exc.detail})
            return DocumentOutcome(document_id=doc_id, key=key, outcome=DocumentOutcomeKind.SKIPPED,
                                   error_reason=exc.reason, error_detail=exc.detail, seconds=seconds)
        ctx.registry.record_failure(
            run_id, source_id=source_id, document_id=doc_id, key=key, reason=exc.reason, detail=exc.detail,
            etag=etag, size=size, seconds=seconds, changeset_id=changeset_id, parser_version=PIPELINE_VERSION,
        )
        ctx.metrics.document_errors.labels(source_id, exc.reason).inc()
        ctx.metrics.documents.labels(source_id, "failed").inc()
        log.warning(
            "document failed",
            extra={"event": "document_failed", "source": source_id, "key": key, "reason": exc.reason,
                   "detail": exc.detail},
        )
        return DocumentOutcome(document_id=doc_id, key=key, outcome=DocumentOutcomeKind.FAILED, error_reason=exc.reason,
                               error_detail=exc.detail, seconds=seconds)

    rechunk_reason = None
    if known is not None and known.content_hash == digest and known.parser_version != PIPELINE_VERSION:
        rechunk_reason = f"pipeline {known.parser_version} -> {PIPELINE_VERSION}"
    outcome = DocumentOutcome(
        document_id=doc_id, key=key, outcome=DocumentOutcomeKind.MODIFIED if known is not None and known.version else DocumentOutcomeKind.ADDED,
        chunks_embedded=result.embedded, chunks_reused=result.reused, chunks_kept=len(new_ids & old_ids),
        chunks_added=len(added_ids), chunks_moved=moved, tombstones=len(removed_ids),
        seconds=time.perf_counter() - started, rechunk_reason=rechunk_reason,
    )
    ctx.registry.stage_document(
        run_id, changeset_id, source=source, document_id=doc_id, key=key, etag=etag, size=len(data),
        content_hash=digest, title=parsed.title, parser=parsed.parser, parser_version=PIPELINE_VERSION,
        chunks=chunks, added_ids=added_ids, removed_ids=removed_ids, outcome=outcome, acl=acl, source_hash=raw_digest,
    )
    # Validity and provenance (front matter, source URI): the freshness sweep reads them (workers/provenance.py).
    ctx.registry.record_provenance(doc_id, **provenance(data, kind=source.kind, location=source.location, key=key))
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
    if run.status in SUCCESSFUL_RUNS and run.finished_at is not None:
        ctx.metrics.last_sync.labels(run.source_id).set(run.finished_at.timestamp())
    log.info("sync finished", extra={"event": "sync_finished", "source": run.source_id, "run": run_id,
                                      "status": run.status, **run.summary.get("documents", {})})
    return run, True


@dataclass(frozen=True)
class BuildRecord:
    """What the build after a run did, as recorded on the run."""

    status: BuildStatus
    reason: str | None
    snapshot_id: str | None


def record_build(registry: RunLedger, run_id: int | None, outcome: BuildResult | LockHeldError) -> BuildRecord:
    """Decide, and record on the run, what a build attempt means for it.

    The one rule the inline runner and the Celery ``build_snapshot`` task
    both follow:

    * the builder ran: its status, except that ``unchanged`` counts as
      ``built`` when an earlier build already applied this run's changeset;
    * another builder held the lock (after ``snapshots.lock_wait``): the
      build is *queued*: the run stays ``pending`` with the reason, its
      changeset stays staged, and the next build (the lock holder's
      successor, the reaper, or ``freshindex snapshots build``) applies it.
      It is not a verification failure.  The Celery shell also retries the
      task; the inline runner reports it and exits 0.

    With ``run_id`` None (a build asked for directly) nothing is recorded.
    What it does not guarantee: that a queued build is picked up before the
    run's lease (``sync.run_lease_s``) lets the reaper see it.
    """
    if isinstance(outcome, LockHeldError):
        record = BuildRecord(BuildStatus.PENDING, f"queued behind another builder: {outcome}", None)
        if run_id is not None:
            registry.set_run_build(run_id, status=record.status, snapshot_id=None, error=record.reason)
        return record
    status = BuildStatus(outcome.status)
    if run_id is not None and status is BuildStatus.UNCHANGED and registry.run_changeset_applied(run_id):
        status = BuildStatus.BUILT  # an earlier build already took this run's changes
    record = BuildRecord(status, outcome.reason, outcome.snapshot_id)
    if run_id is not None:
        registry.set_run_build(run_id, status=status, snapshot_id=outcome.snapshot_id, error=outcome.reason)
        if status is BuildStatus.BUILT and outcome.snapshot_id is not None:
            registry.record_run_lag(run_id)  # type: ignore[attr-defined]  # change observed -> visible
    return record


def _note_observed(ctx: PipelineContext, source_id: str, run_id: int, refs: list[ObjectRef], keys: set[str]) -> None:
    """Record when this run's earliest change was made: a changed object's modification time, never
    before the source's last successful sync (a change cannot be seen before the look that missed it)."""
    import datetime as dt

    last_ok = ctx.registry.last_successful_sync(source_id)
    if last_ok is None:
        return  # a first load has no change to measure; its lag counts from the run's start
    floor = (last_ok if last_ok.tzinfo else last_ok.replace(tzinfo=dt.UTC)).timestamp()
    times = [max(r.modified, floor) for r in refs if r.modified and r.key in keys]
    if times:
        ctx.registry.note_observed(run_id, dt.datetime.fromtimestamp(min(times), dt.UTC))
