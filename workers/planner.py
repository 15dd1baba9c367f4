"""The sync planner: list a source, diff it against the registry, guard deletions.

:func:`plan_sync` opens a run (or joins the live one) and calls its steps in
order: :func:`list_source`, :func:`diff_listing` (which
documents to process, which moved to a new key (:func:`_find_moves`), which
vanished), :func:`guard_deletions` (:func:`deletion_hold`: a listing that
would delete too much waits for a person), :func:`record_plan` and
:func:`apply_deletions`.  All of it is registry-only work except the few
fetches (and, for moves by similarity, parses without OCR) that tell a
move from a deletion, bounded by ``sync.move_comparisons``; the documents
themselves are processed by :func:`workers.pipeline.process_document`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from freshindex.acl.model import DocumentAcl, is_sidecar
from freshindex.acl.resolution import AclSourceError, SourceAcl
from freshindex.core.enums import BuildStatus, DocumentState
from freshindex.core.errors import ConfigError, DocumentError
from freshindex.core.ids import content_hash, document_id
from freshindex.core.types import ObjectRef
from freshindex.registry import TRANSIENT_REASONS, DocumentFailure, DocumentRecord, SourceInfo
from freshindex.workers import pipeline
from freshindex.workers.connectors import Connector, for_run
from freshindex.workers.connectors.listing import CURSOR_KEY, listing_of
from freshindex.workers.connectors.retry import fetch_with_retry
from freshindex.workers.document_acl import acl_resolver
from freshindex.workers.pipeline import PipelineContext
from freshindex.workers.selection import Selection
from freshindex.workers.similarity import Lines, match_moves, similarity
from freshindex.workers.steps import DocumentLine, Raw

log = logging.getLogger("freshindex.pipeline")

#: A document failed on these (its ACL could not be resolved) is re-tagged once it resolves again.
_ACL_REASONS = (DocumentError.ACL_INVALID, DocumentError.ACL_UNAVAILABLE)


@dataclass(frozen=True)
class PlannedDocument:
    key: str
    etag: str | None
    size: int
    media_type: str | None = None  # the listing's (ObjectRef.media_type): picks the parser of a bare key


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
    #: The source location listed and the ACL sidecars its complete listing saw (None: a partial listing, or a
    #: connector without sidecars): the inline loop reads only these there (``RunBatch.acl_resolver``).
    sidecars: tuple[str, frozenset[str]] | None = None


@dataclass(frozen=True)
class Listing:
    """What the source listed in this run, and what its patterns leave out."""

    connector: Connector
    source_acl: SourceAcl
    refs: list[ObjectRef]  # every listed object but sidecars
    excluded: dict[str, str]  # listed keys the source's patterns leave out, with why
    docs: list[ObjectRef]  # the listed objects the patterns keep
    #: ``connector`` as this run planned it (:func:`workers.connectors.for_run`): what the plan fetches through.
    reader: Connector
    #: False: a partial listing (:class:`workers.connectors.listing.SourceListing`): ``refs`` are what changed,
    #: and only ``deleted`` is gone; what it does not mention stays as it is.
    complete: bool = True
    deleted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SourceDiff:
    """What changed since the registry last saw the source."""

    known: dict[str, DocumentRecord]
    planned: tuple[PlannedDocument, ...]
    planned_keys: set[str]
    gone: list[DocumentRecord]  # vanished and not moved: tombstoned, or held by the guard
    moves: dict[str, DocumentRecord]  # new key -> the vanished document whose content it holds
    new_skips: list[tuple[ObjectRef, str]]  # excluded keys to record as skipped, with why
    carried: int  # listed documents still skipped as before
    live: int
    deleting: int  # the live documents among ``gone``


def _needs_processing(known: DocumentRecord | None, ref: ObjectRef, version: str) -> bool:
    if known is None or known.state == DocumentState.DELETED:
        return True
    if known.state == DocumentState.SKIPPED and known.error_reason == DocumentError.EXCLUDED:
        return True  # no longer excluded (the patterns changed): a document now
    if known.state in (DocumentState.ERROR, DocumentState.SKIPPED):
        # A new pipeline (a parser fix) tries again what an older one failed on, once.
        return (known.etag != ref.etag or known.error_reason in TRANSIENT_REASONS
                or known.parser_version != version)
    if known.parser_version != version:
        return True
    return known.etag is None or known.etag != ref.etag


def deletion_hold(*, deleting: int, live: int, listed: int | None, max_share: float, min_held: int) -> str | None:
    """Why deleting ``deleting`` of a source's ``live`` documents must wait, or None.

    An empty complete listing (a prefix emptied, a bucket re-created, a mount gone)
    looks exactly like "every document was deleted", so it is always held
    when the source has a live document; ``listed`` None is a partial listing,
    whose emptiness only says nothing changed.  Otherwise deleting more than
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
    The steps live in ``workers/py``.
    """
    source = ctx.registry.get_source(source_id)
    if source.removed:  # `freshindex sources remove`: its documents were withdrawn for good
        raise ConfigError(f"source {source_id!r} was removed; add it again with `freshindex sources add --replace`")
    # One sync per source at a time: the same decision for the inline runner
    # and the sync_source task (a live running run is joined, never doubled).
    claim = ctx.registry.open_or_join_run(source_id, trigger, lease_s=ctx.sync.run_lease_s)
    if claim.joined:
        ctx.observer.run_joined(source_id, claim.run_id)
        return SyncPlan(claim.run_id, claim.changeset_id or 0, source_id, source.kb, joined=True)
    run_id, changeset_id = claim.run_id, claim.changeset_id or 0
    ctx.observer.run_started(source_id, run_id)
    listing = list_source(ctx, source, run_id)
    # Each document's version: its parser's (the registry's) and the line's (chunker, transforms), read from
    # their modules when called (a test patches one to stand for an upgrade).
    diff = diff_listing(ctx, source_id, listing,
                        version=lambda ref: pipeline.version_now(ctx, ref.key, ref.media_type))
    held = guard_deletions(ctx, source_id, run_id, diff, listed=len(listing.docs) if listing.complete else None)
    record_plan(ctx, source, run_id, changeset_id, listing, diff)
    deleted = apply_deletions(ctx, source, run_id, changeset_id, listing, diff, held)
    ctx.observer.run_planned(source_id, run_id, {
        "listed": len(listing.refs), "planned": len(diff.planned), "deleted": deleted,
        "deletions_held": diff.deleting if held else 0, "moved": len(diff.moves), "excluded": len(listing.excluded)})
    sidecars = getattr(listing.connector, "sidecar_keys", None) if listing.complete else None
    return SyncPlan(run_id, changeset_id, source_id, source.kb, diff.planned, deleted, len(listing.refs),
                    sidecars=(source.location, frozenset(sidecars)) if sidecars is not None else None)


def list_source(ctx: PipelineContext, source: SourceInfo, run_id: int) -> Listing:
    """List the source; a listing that fails closes the run as ``failed`` and raises.

    A listing's cursor becomes the run's pending source state, promoted when the run succeeds
    (:mod:`workers.connectors.listing`).
    """
    source_id = source.id
    try:
        connector = ctx.connector_for(source)
        listed = listing_of(connector.list())
        # Sidecars are ACL, never documents (the connectors skip them; this is the backstop).
        refs = [r for r in listed.refs if not is_sidecar(r.key)]
        source_acl = SourceAcl.of(source)
        if listed.cursor is not None:
            ctx.registry.set_pending_state(source_id, {CURSOR_KEY: listed.cursor}, run_id=run_id)
    except Exception as exc:
        # Any listing failure (not only SourceError: a bug, a bad location)
        # must close the run, or the source looks busy until its lease ends.
        ctx.registry.finish_sync_run(run_id, error=f"cannot list the source: {exc}")
        ctx.registry.set_run_build(run_id, status=BuildStatus.FAILED, snapshot_id=None, error=str(exc))
        ctx.observer.listing_failed(source_id, run_id, str(exc))
        raise
    # The source's --include/--exclude patterns, applied here for every connector kind (workers/selection.py).
    excluded = _excluded(Selection.of(source.options), refs)
    return Listing(connector, source_acl, refs, excluded, [r for r in refs if r.key not in excluded],
                   for_run(connector, run_id), listed.is_complete, listed.deleted)


def _unapplied(doc: DocumentRecord) -> bool:
    """Whether a partial listing must try ``doc`` again although it does not name it (its cursor moved past it).

    A document that failed for a passing reason; and an indexed one whose update failed for any reason: it
    keeps its old etag and serves its old text, and a complete listing would offer it again on every sync (its
    etag differs from the source's), which a partial listing that moved on never does.
    """
    if doc.error_reason is None:
        return False
    return doc.state == DocumentState.ACTIVE or (doc.state == DocumentState.ERROR
                                                 and doc.error_reason in TRANSIENT_REASONS)


def diff_listing(ctx: PipelineContext, source_id: str, listing: Listing, *,
                 version: Callable[[ObjectRef], str]) -> SourceDiff:
    """Diff the listing against the registry: what to process, what moved, what vanished, what is skipped.

    ``version(ref)`` is the version the document would record now (:func:`workers.pipeline.version_now`):
    a document that recorded another (its parser's or the chunker's changed) is processed again.
    A partial listing deletes only the keys it reports deleted, and tries again the documents an earlier
    run failed on for a passing reason, and the indexed ones whose update failed (:func:`_unapplied`).
    """
    known = ctx.registry.documents_for_source(source_id)
    refs, docs, excluded = listing.refs, listing.docs, listing.excluded
    listed = {ref.key for ref in docs}
    planned = tuple(PlannedDocument(r.key, r.etag, r.size, r.media_type) for r in docs
                    if _needs_processing(known.get(r.key), r, version(r)))
    if not listing.complete:
        planned += tuple(PlannedDocument(doc.key, doc.etag, doc.size) for key, doc in sorted(known.items())
                         if key not in listed and key not in listing.deleted and _unapplied(doc))
    planned_keys = {d.key for d in planned}
    # Under a folder the connector could not read (listed as one unreadable entry), nothing is gone.
    unlisted = tuple(getattr(listing.connector, "unlisted_prefixes", ()))
    gone = [doc for key, doc in known.items() if key not in listed and (listing.complete or key in listing.deleted)
            and doc.state in (DocumentState.ACTIVE, DocumentState.ERROR, DocumentState.SKIPPED)
            and not (doc.state == DocumentState.SKIPPED and key in excluded)  # excluded before: still a skip
            and not (unlisted and key.startswith(unlisted))]
    # A vanished document whose content reappears under a new key in this sync moved: its old key goes in
    # this build and the guard does not count it (a rename hint, the same bytes or mostly the same text: _find_moves).
    moves = _find_moves(ctx, listing.reader, source_id, [r for r in docs if r.key in planned_keys], known,
                        [d for d in gone if d.state == DocumentState.ACTIVE])
    moved_from = {old.key for old in moves.values()}
    gone = [doc for doc in gone if doc.key not in moved_from]
    # Excluded keys are recorded once as skipped (again only if they were something else before).
    new_skips = [(r, why) for r, why in ((r, excluded[r.key]) for r in refs if r.key in excluded)
                 if not _skipped_as(known.get(r.key), DocumentError.EXCLUDED)
                 and (known.get(r.key) is None or known[r.key].state not in (DocumentState.ACTIVE, DocumentState.ERROR))]
    carried = sum(1 for r in docs if r.key not in planned_keys and (k := known.get(r.key)) is not None
                  and k.state == DocumentState.SKIPPED) + sum(
        1 for r in refs if r.key in excluded and _skipped_as(known.get(r.key), DocumentError.EXCLUDED))
    return SourceDiff(known=known, planned=planned, planned_keys=planned_keys, gone=gone, moves=moves,
                 new_skips=new_skips, carried=carried,
                 live=sum(1 for doc in known.values() if doc.state == DocumentState.ACTIVE),
                 deleting=sum(1 for doc in gone if doc.state == DocumentState.ACTIVE))


def guard_deletions(ctx: PipelineContext, source_id: str, run_id: int, diff: SourceDiff, *,
                    listed: int | None) -> str | None:
    """Why this run's deletions wait for a person (:func:`deletion_hold`), or None.

    A confirmation (`freshindex sources confirm-deletions`) is taken here, used or not.
    """
    guard = ctx.sync
    held = deletion_hold(deleting=diff.deleting, live=diff.live, listed=listed, max_share=guard.max_deletion_share,
                         min_held=guard.min_held_deletions)
    if held is not None:
        confirmed = ctx.registry.take_deletion_confirmation(source_id)  # one shot: used or not, it is gone
        if confirmed is not None and diff.deleting <= confirmed:
            ctx.observer.deletions_confirmed(source_id, run_id, diff.deleting, confirmed)
            held = None
        elif confirmed is not None:
            held += f"; the confirmation covered only {confirmed}"
    return held


def record_plan(ctx: PipelineContext, source: SourceInfo, run_id: int, changeset_id: int, listing: Listing,
                 diff: SourceDiff) -> None:
    """Record the plan on the run, re-tag unchanged documents, stage the moves and record new skips."""
    source_id = source.id
    ctx.registry.set_run_planned(run_id, listed=len(listing.refs), planned=len(diff.planned),
                                 # lets the reaper resume; the media type picks a bare key's parser on any worker
                                 documents=[(d.key, d.etag, d.size, d.media_type) for d in diff.planned],
                                 skipped=diff.carried, moves=[{"from": old.key, "to": new} for new, old in
                                                              sorted(diff.moves.items())],
                                 truncated=getattr(listing.connector, "unlisted_reason", None))
    _note_observed(ctx, source_id, run_id, listing.docs, diff.planned_keys)  # sync lag (registry/freshness.py)
    _retag_listed(ctx, source, listing.source_acl, listing, run_id, changeset_id, diff.known, diff.planned_keys)
    for new_key, old in sorted(diff.moves.items()):
        # Not held, whatever the guard says of real deletions: one build never serves both keys.
        n = ctx.registry.stage_deletion(run_id, changeset_id, old.id, moved_to=new_key)
        ctx.observer.tombstoned(source.kb, "superseded", n)
        ctx.observer.document_moved(source_id, run_id, old.key, new_key)
    if diff.new_skips:
        ctx.registry.record_skips(run_id, changeset_id, source_id, [
            {"document_id": document_id(source_id, r.key), "key": r.key, "reason": DocumentError.EXCLUDED,
             "detail": why, "etag": r.etag, "size": r.size} for r, why in diff.new_skips])
        ctx.observer.skips_recorded(source_id, DocumentError.EXCLUDED, len(diff.new_skips))


def apply_deletions(ctx: PipelineContext, source: SourceInfo, run_id: int, changeset_id: int, listing: Listing,
                     diff: SourceDiff, held: str | None) -> int:
    """Hold the vanished documents (they keep serving) or tombstone them; how many were deleted."""
    source_id = source.id
    if held is not None:
        reason = f"{held}; confirm with `freshindex sources confirm-deletions {source_id}`"
        pending = [doc.id for doc in diff.gone if doc.state == DocumentState.ACTIVE]
        ctx.registry.hold_deletions(run_id, reason=reason, held={
            "deletions": diff.deleting, "live": diff.live, "listed": len(listing.docs),
            "limit": ctx.sync.max_deletion_share, "keys": sorted(doc.key for doc in diff.gone)[:20],
            "moved": len(diff.moves),
        })
        # Held documents keep serving, labelled "pending deletion" in the context until a person decides.
        ctx.registry.mark_pending_deletion(source_id, run_id, pending)
        ctx.observer.deletions_held(source_id, run_id, reason, {
            "deleting": diff.deleting, "live": diff.live, "listed": len(listing.docs), "moved": len(diff.moves)})
        return 0
    ctx.registry.mark_pending_deletion(source_id, run_id, ())  # whatever an earlier hold labelled
    deleted = 0
    for doc in diff.gone:
        why = listing.excluded.get(doc.key)
        n = ctx.registry.stage_deletion(
            run_id, changeset_id, doc.id,
            skipped=(DocumentError.EXCLUDED, why) if why is not None else None)
        ctx.observer.tombstoned(source.kb, "deleted", n)
        ctx.observer.document_outcome(source_id, "deleted")
        deleted += 1
    return deleted


def _excluded(selection: Selection, refs: list[ObjectRef]) -> dict[str, str]:
    """Listed keys the source's patterns leave out, with why (the skip detail)."""
    if selection.everything:
        return {}
    return {r.key: why for r in refs if (why := selection.why_excluded(r.key)) is not None}


def _skipped_as(known: DocumentRecord | None, reason: str) -> bool:
    return known is not None and known.state == DocumentState.SKIPPED and known.error_reason == reason


def _find_moves(ctx: PipelineContext, connector: Connector, source_id: str, new: list[ObjectRef],
                known: dict[str, DocumentRecord], gone: list[DocumentRecord]) -> dict[str, DocumentRecord]:
    """New keys of this sync that continue a vanished document: ``{new key: the vanished document}``.

    Candidates are the listed keys the registry does not serve (new, or
    deleted before); each vanished document moves at most once, each key
    continues at most one, in three passes, as ``git diff -M`` does:

    1. A connector may name a rename itself: a listed ref's ``moved_from``
       (a git connector's ``git diff -M``) pairs it with that vanished key,
       whatever its content.
    2. Identical bytes: a key whose bytes hash to a vanished document's
       recorded hash (``source_hash``; ``content_hash`` for documents indexed
       before it was recorded).  Only keys whose listed size equals a
       vanished document's are fetched.
    3. Similar content (:func:`_similar_moves`): the candidate's chunk texts
       hold at least ``sync.move_similarity`` of the vanished document's
       (lines, :mod:`workers.similarity`), for at most
       ``sync.move_comparisons`` pairs of the same basename, or of the same
       suffix and a plausible size.

    A sync without vanished documents fetches nothing here.  Every fetch
    goes through ``connector`` (the run's view of the source).  Not
    guaranteed: a candidate that cannot be fetched or parsed here is not a
    move (its old key is then deleted, or held, as usual); pairs beyond the
    comparison cap are not looked at.
    """
    if not gone or not new:
        return {}
    by_key = {doc.key: doc for doc in gone}
    moves: dict[str, DocumentRecord] = {}
    fresh = sorted((r for r in new if (k := known.get(r.key)) is None or k.state != DocumentState.ACTIVE),
                   key=lambda r: r.key)
    for ref in fresh:
        hint = getattr(ref, "moved_from", None)
        if isinstance(hint, str) and hint in by_key:
            moves[ref.key] = by_key.pop(hint)
    reads = _MoveReads(ctx, connector, source_id, known)
    moves.update(_identical_moves(reads, [r for r in fresh if r.key not in moves], by_key))
    moves.update(_similar_moves(ctx, reads, [r for r in fresh if r.key not in moves], list(by_key.values())))
    return moves


def _identical_moves(reads: _MoveReads, fresh: list[ObjectRef],
                     by_key: dict[str, DocumentRecord]) -> dict[str, DocumentRecord]:
    """Keys holding a vanished document's exact bytes (popped from ``by_key``); fetched only on a size match."""
    by_content: dict[tuple[int, str], list[DocumentRecord]] = {}
    for _, doc in sorted(by_key.items()):
        if doc.source_hash or doc.content_hash:
            by_content.setdefault((doc.size, doc.source_hash or doc.content_hash or ""), []).append(doc)
    sizes = {size for size, _ in by_content}
    moves: dict[str, DocumentRecord] = {}
    for ref in fresh:
        if ref.size not in sizes or (data := reads.data(ref)) is None:
            continue
        twins = by_content.get((len(data), content_hash(data)))
        if twins:
            moves[ref.key] = by_key.pop(twins.pop(0).key)
            sizes = {size for (size, _), left in by_content.items() if left}
    return moves


def _similar_moves(ctx: PipelineContext, reads: _MoveReads, fresh: list[ObjectRef],
                   gone: list[DocumentRecord]) -> dict[str, DocumentRecord]:
    """The moves that changed content on the way (:func:`workers.similarity.match_moves`)."""
    guard = ctx.sync
    if not fresh or not gone or guard.move_comparisons <= 0:
        return {}
    refs = {r.key: r for r in fresh}
    docs = {d.key: d for d in gone}

    def score(new_key: str, old_key: str) -> float | None:
        old = reads.old_lines(docs[old_key])  # registry only: a document with no text fetches nothing
        now = reads.new_lines(refs[new_key]) if old is not None else None
        return None if old is None or now is None else similarity(old, now)

    found = match_moves({r.key: r.size for r in fresh}, {d.key: d.size for d in gone}, score,
                        threshold=guard.move_similarity, max_comparisons=guard.move_comparisons,
                        deadline=time.monotonic() + guard.move_seconds)
    for m in found:
        log.info("move found by similarity", extra={"event": "move_similar", "source": reads.source_id,
                                                    "from": m.old, "to": m.new, "similarity": round(m.score, 3),
                                                    "by": m.by})
    return {m.new: docs[m.old] for m in found}


class _MoveReads:
    """What move finding reads, each at most once per plan: a candidate's text, a vanished document's
    text (its live chunks in the registry, or its canonical twin's when it is a mirror).  Bytes are
    not kept (a same-size candidate compared by hash, then by text, is fetched twice)."""

    def __init__(self, ctx: PipelineContext, connector: Connector, source_id: str,
                 known: dict[str, DocumentRecord]) -> None:
        self.ctx, self.connector, self.source_id, self.known = ctx, connector, source_id, known
        self._lines: dict[str, Lines | None] = {}
        self._old: dict[str, Lines | None] = {}
        self._line: DocumentLine | None = None

    def data(self, ref: ObjectRef) -> bytes | None:
        """The candidate's bytes through the run's reader, or None (over the size limit, or unreadable)."""
        if ref.size > self.ctx.max_file_bytes:
            return None
        try:
            # A reader that holds what its listing read (a crawl's pages) lends it without giving it up,
            # so the document task reads the same bytes the plan compared (invariant 9).
            read = getattr(self.connector, "peek", None) or self.connector.fetch
            return fetch_with_retry(read, ref.key, self.ctx.fetch_policy, source_id=self.source_id)
        except Exception as exc:  # not a move then; processing records what is wrong with it
            log.info("move candidate not read", extra={"event": "move_candidate_unread", "source": self.source_id,
                                                       "key": ref.key, "error": str(exc)})
            return None

    def new_lines(self, ref: ObjectRef) -> Lines | None:
        """The candidate's chunk texts as the pipeline would cut them (no OCR: a page needing it, no text)."""
        if ref.key not in self._lines:
            self._lines[ref.key] = None
            if (data := self.data(ref)) is not None:
                try:
                    if self._line is None:  # the document line's steps (workers/steps), transforms included
                        options = self.ctx.registry.get_source(self.source_id).options
                        self._line = self.ctx.line.for_source(options).deferring_ocr()
                    parsed = self._line.parse(Raw(data, ref.key, getattr(ref, "media_type", None)))  # a bare web key
                    chunks = self._line.chunk(document_id(self.source_id, ref.key), parsed)
                    self._lines[ref.key] = Lines.of(c.text for c in chunks)
                except Exception as exc:  # unparsable, too large, needs OCR: compared with nothing
                    log.info("move candidate not parsed", extra={"event": "move_candidate_unparsed",
                                                                 "source": self.source_id, "key": ref.key,
                                                                 "error": str(exc)})
        return self._lines[ref.key]

    def old_lines(self, doc: DocumentRecord) -> Lines | None:
        """A vanished document's live chunk texts (a mirror has none: its canonical twin's, in this source)."""
        if doc.key not in self._old:
            registry = self.ctx.registry
            ids = registry.live_chunk_ids(doc.id)
            twins = sorted(d.id for d in self.known.values() if d.id != doc.id and d.state == DocumentState.ACTIVE
                           and doc.content_hash and d.content_hash == doc.content_hash) if not ids else []
            for twin in twins:
                if ids := registry.live_chunk_ids(twin):
                    break
            self._old[doc.key] = Lines.of(r.text for r in registry.chunk_rows(sorted(ids))) if ids else None
        return self._old[doc.key]


def _retag_listed(ctx: PipelineContext, source: SourceInfo, source_acl: SourceAcl, listing: Listing,
                  run_id: int, changeset_id: int, known: dict[str, DocumentRecord], planned: set[str]) -> None:
    """Re-resolve the ACL of every listed document this run does not process, and stage re-tags.

    An unchanged document is not fetched, but a sidecar, a tag or a rule may
    have changed who may read it: its new ACL is stored (``acl_version``
    bumped) and its live chunks get upsert entries in this run's changeset,
    so the build rewrites their points with vectors from the cache (0
    embeds).  A document whose ACL cannot be resolved keeps its previous ACL
    and is recorded as failed with ``acl_invalid`` / ``acl_unavailable``.
    """
    resolver = acl_resolver(ctx, source_acl, listing.reader,
                            sidecar_keys=getattr(listing.connector, "sidecar_keys", None))
    acls: dict[str, DocumentAcl] = {}
    for ref in listing.docs:
        doc = known.get(ref.key)
        if doc is None or doc.state == DocumentState.DELETED or ref.key in planned:
            continue
        try:
            acl = resolver.resolve(ref.key)
            if doc.acl is None or doc.acl_fingerprint != acl.fingerprint() or doc.error_reason in _ACL_REASONS:
                acls[doc.id] = acl  # only what changed goes to the registry's write transaction
        except AclSourceError as exc:
            ctx.registry.record_failure(run_id, DocumentFailure(
                source_id=source.id, document_id=doc.id, key=ref.key, reason=exc.reason, detail=exc.detail,
                etag=doc.etag, size=doc.size), changeset_id=changeset_id)
            ctx.observer.acl_unresolved(source.id, ref.key, exc.reason, exc.detail)
    if not acls:
        return
    applied = ctx.registry.apply_document_acls(source.id, acls, run_id=run_id, changeset_id=changeset_id)
    if applied.bumped:
        log.info("document ACLs changed", extra={"event": "acl_retagged", "source": source.id, "run": run_id,
                                                  "documents": len(applied.bumped),
                                                  "chunks": applied.retagged_chunks})


def _note_observed(ctx: PipelineContext, source_id: str, run_id: int, refs: list[ObjectRef], keys: set[str]) -> None:
    """Record when this run's earliest change was made: a changed object's modification time, never
    before the source's last successful sync (a change cannot be seen before the look that missed it)."""
    import datetime as dt

    last_ok = ctx.registry.last_successful_sync(source_id)
    if last_ok is None:
        return  # a first load has no change to measure; its lag counts from the run's start
    floor = last_ok.timestamp()  # aware: registry times are UTC
    times = [max(r.modified, floor) for r in refs if r.modified and r.key in keys]
    if times:
        ctx.registry.note_observed(run_id, dt.datetime.fromtimestamp(min(times), dt.UTC))
