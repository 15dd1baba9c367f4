"""The injection client: a question and a principal in, a cited context block out.

Retrieval on the knowledge base's alias with the ACL and tenant filter
inside the query; then every hit is decided again against the registry's
current row of its chunk and document (:func:`acl.access.decide`: tombstoned
or orphaned chunks, ACLs changed since the point was written, sensitive
documents rechecked at their ACL source), before any quota, budget or
rendering.  Denials go to the observer's ``denied`` (the audit trail); the packet's
``dropped`` shows only reasons that say nothing about access or existence
(:data:`PUBLIC_DROPS`), so a denied document and a missing one answer the
same bytes.  When nothing is admitted (no hit over the dense floor
``min_score`` nor in the lexical ranking), or the calibrated refusal of
:mod:`injection.refusal` finds that the admitted evidence does not cover the
question's key terms, the answer is an *insufficient evidence* packet rather
than weak context; its ``reason`` says why.  One :class:`~injection.observer.QueryObserver`
hears every stage, denial, decision and packet, on every path (metrics, audit).

The client does not import the pipeline: its store, embedder and (optional)
recheck are passed in, so it runs next to the service or inside an app.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from freshindex.acl import Principal, query_filter, visible
from freshindex.acl.access import DocumentStatus, SensitiveRecheck, Verdict, decide, denial_records
from freshindex.core.clock import as_utc
from freshindex.core.errors import ModelMismatchError, NotFoundError, StoreError
from freshindex.core.naming import Naming
from freshindex.core.payload import PayloadError, PointPayload
from freshindex.core.types import Embedder
from freshindex.injection.assemble import Candidate, Reranker, SessionNumbers, coverage_reranker
from freshindex.injection.budget import ContextPolicy, Tokenizer
from freshindex.injection.conflicts import mark_conflicts
from freshindex.injection.context import StageTimer, compose
from freshindex.injection.observer import Observers, QueryObserver
from freshindex.injection.planning import plan as plan_query
from freshindex.injection.planning import report as subquery_report
from freshindex.injection.planning import run as run_plan
from freshindex.injection.refusal import (
    FUNCTION_WORDS,
    RefusalPolicy,
    RefusalReason,
    Signals,
    absent_idf,
    evidence_tokens,
    ordinary_words,
)
from freshindex.injection.refusal import decide as decide_refusal
from freshindex.injection.refusal import signals as refusal_signals
from freshindex.injection.types import (
    ContextPacket,
    Evidence,
    NextAction,
    SearchReport,
    SubQueryReport,
    insufficient_context,
    render_context,
)
from freshindex.settings.sections.context import ContextSettings
from freshindex.vectorstore.base import LexicalStats, ScoredHit, VectorStore
from freshindex.vectorstore.lexical import tokenize as lexical_tokens

log = logging.getLogger("freshindex.injection")

#: The defaults, read from the ``context`` settings section (their one home).
_DEFAULTS = ContextSettings()

#: chunk ids -> the registry's status of each chunk and its document; ids missing from the mapping are orphans.
Recheck = Callable[[Sequence[str]], Mapping[str, DocumentStatus]]


#: ``ContextPacket.dropped`` keys a caller may see: reasons that do not depend on who may read what, or on
#: what exists. Every other reason (acl, tenant, tombstoned, orphan, ...) is kept in ``withheld``, the audit
#: trail and the metrics, so "denied" and "not found" answer the same bytes.
PUBLIC_DROPS = frozenset({"low_score", "per_document", "budget", "duplicate", "pool", "max_chunks", "expired",
                          "refused", "stale"})


#: kb -> {source id: its freshness (``.last_verified_at``, ``.stale_reason``)} for the sources that are stale now.
StaleSources = Callable[[str], Mapping[str, Any]]

#: kb -> its source records (``registry.records.SourceInfo``: ``.id``, ``.owner``, ``.acl``, ``.tenant``,
#: ``.removed``): who to ask and what to refresh when a question goes unanswered.
SourceDirectory = Callable[[str], Iterable[Any]]


@dataclass(frozen=True)
class SnapshotFacts:
    """What a query needs to know of the snapshot it reads, from the registry's record of it.

    ``model``: the embedding model of its vectors (None: unknown, not checked); ``revisions``: source id
    -> the revision the snapshot was built from (a git source's commit), cited for every chunk of that
    source, whichever commit the chunk was read at.
    """

    model: str | None = None
    revisions: Mapping[str, str] = field(default_factory=dict)


#: At most this many sources are listed as searched, and this many next actions proposed, per packet.
MAX_LISTED_SOURCES = 20
MAX_NEXT_ACTIONS = 5


class InjectionClient:
    def __init__(
        self,
        store: VectorStore,
        embedder: Embedder,
        *,
        naming: Naming = Naming(),
        recheck: Recheck | None = None,
        sensitive: SensitiveRecheck | None = None,
        stale_sources: StaleSources | None = None,
        min_score: float = _DEFAULTS.min_score,
        policy: ContextPolicy | None = None,
        tokenizer: Tokenizer | None = None,
        reranker: Reranker | None = None,
        refusal: RefusalPolicy | None = None,
        calibration: Callable[[str], Mapping[str, Any] | None] | None = None,
        snapshot_facts: Callable[[str], SnapshotFacts | None] | None = None,
        lexical_rerank: bool = _DEFAULTS.lexical_rerank,
        sources: SourceDirectory | None = None,
        max_stale_s: float | None = _DEFAULTS.max_stale_s,
        observer: QueryObserver | None = None,
        clock: Callable[[], dt.datetime] | None = None,
        planning: bool = _DEFAULTS.query_planning,
    ) -> None:
        self.store, self.embedder, self.naming = store, embedder, naming
        self.recheck, self.sensitive = recheck, sensitive
        # every per-query measurement and the denial audit (injection.observer), on every path
        self.observer = Observers(observer)
        self.stale_sources = stale_sources
        self.min_score = min_score
        self.policy = policy or ContextPolicy()
        self.tokenizer, self.reranker = tokenizer, reranker
        self.refusal = refusal or RefusalPolicy()
        # snapshot id -> its refusal calibration (injection.calibration), read once per snapshot; None: shipped bias
        self.calibration = calibration
        self._calibrated: dict[str, tuple[float, RefusalPolicy]] = {}
        # snapshot id -> its embedding model and its sources' revisions (None: unknown, not checked)
        self.snapshot_facts = snapshot_facts
        self._facts: dict[str, SnapshotFacts] = {}
        self.lexical_rerank = lexical_rerank
        # The insufficient-evidence packet's report: the kb's sources (who owns what), a staleness policy
        # (evidence of a source unverified for longer than max_stale_s is rejected, not served labelled;
        # None: served labelled).
        self.sources, self.max_stale_s = sources, max_stale_s
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        # Query planning (injection.planning): the question's exact identifiers also searched lexically alone.
        self.planning = planning
        # collection -> point count, for the weight of absent terms (a count that lags a little shifts it little)
        self._points: dict[str, int] = {}

    def resolve(self, kb: str) -> tuple[str, str] | None:
        """(collection, snapshot id) the alias of ``kb`` points at now."""
        collection = self.store.get_alias(self.naming.alias(kb))
        if collection is None:
            return None
        return collection, self.naming.snapshot_of(collection) or collection

    def retrieve(self, question: str, *, kb: str, principal: Principal = Principal(), limit: int = 5,
                 query_type: str | None = None, numbers: SessionNumbers | None = None,
                 deterministic: bool = False) -> ContextPacket:
        """Evidence for ``question`` as ``principal`` from the snapshot the alias of ``kb`` serves now.

        ``limit`` caps the evidence items; ``query_type`` (fact, procedure,
        compare, diverse; guessed from the question when None) picks the
        budget row; one ``numbers`` per conversation keeps ``[n]`` stable;
        ``deterministic`` renders byte-stable blocks for prompt caching.
        """
        timer = StageTimer(self.observer.stage)
        with timer.stage("total"):
            packet = self._retrieve(question, kb=kb, principal=principal, limit=limit, query_type=query_type,
                                    numbers=numbers, deterministic=deterministic, timer=timer)
        self.observer.finished(kb, packet)
        return packet

    def evidence_signals(self, question: str, *, kb: str, principal: Principal = Principal(),
                         limit: int = 5) -> Signals | None:
        """The refusal signals of ``question``'s admitted evidence, with no packet composed; None when none is admitted.

        The search, recheck and admission of :meth:`retrieve` (no snapshot, or
        nothing above the score floor: None, a refusal whatever the bias),
        then the signals the refusal would decide on: what a refusal
        calibration asks of each pseudo-question, without the assembly and
        rendering that cost most of a query.  Nothing is observed.
        """
        _plan, found, got = self._gather(question, kb, principal, limit, StageTimer(None))
        if found is None or got is None or not got.candidates or not got.dense_ok:
            return None
        return self._admitted_signals(question, found[0][0], principal, got.candidates, found[1])

    def _gather(self, question: str, kb: str, principal: Principal, limit: int,
                timer: StageTimer) -> tuple[Any, Any, _Admitted | None]:
        """The question's query plan, its search (:meth:`_search`; None: ``kb`` serves nothing) and what was admitted."""
        with timer.stage("embed"):
            vector = self.embedder.embed([question])[0].tolist()
        query_plan = plan_query(question, enabled=self.planning)
        found = self._search(kb, vector, query_plan, max(self.policy.candidate_pool, limit), principal, timer)
        got = self._admit(kb, found[0][1], found[1], principal, timer) if found is not None else None
        return query_plan, found, got

    def _admitted_signals(self, question: str, collection: str, principal: Principal,
                          candidates: Sequence[Candidate], hits: Sequence[ScoredHit]) -> Signals:
        """The refusal signals of the admitted ``candidates``, against the hits they came from."""
        admitted = {c.chunk_id for c in candidates}
        return self._signals(question, collection, principal, candidates, [h for h in hits if h.id in admitted])

    def _retrieve(self, question: str, *, kb: str, principal: Principal, limit: int, query_type: str | None,
                  numbers: SessionNumbers | None, deterministic: bool, timer: StageTimer) -> ContextPacket:
        query_plan, found, got = self._gather(question, kb, principal, limit, timer)
        if found is None or got is None:
            return self._refuse(question, kb, None, RefusalReason.NO_SNAPSHOT,
                                "the knowledge base has no snapshot yet",
                                tally=_Tally(), principal=principal, deterministic=deterministic)
        (collection, snapshot_id), hits, searched = found
        got.tally.searched = subquery_report(query_plan, searched, got.readable_ids)
        if got.denied:
            self.observer.denied(denial_records(kb, principal, got.denied))
        if not got.readable_ids:
            self.observer.empty_recall(kb)
        candidates, dropped, tally = got.candidates, got.dropped, got.tally
        if not candidates or not got.dense_ok:
            if candidates:
                dropped["low_score"] = dropped.get("low_score", 0) + len(candidates)
                tally.demote(len(candidates), "low_score")
            return self._refuse(question, kb, snapshot_id, RefusalReason.NO_EVIDENCE,
                                "no evidence above the relevance threshold", dropped,
                                tally=tally, principal=principal, deterministic=deterministic)
        sig = self._admitted_signals(question, collection, principal, candidates, hits)
        refused = decide_refusal(self._policy(snapshot_id), sig)
        if refused is not None:
            dropped["refused"] = dropped.get("refused", 0) + len(candidates)
            return self._refuse(question, kb, snapshot_id, refused[0], refused[1], dropped, sig,
                                tally=tally, principal=principal, deterministic=deterministic)
        if got.stale:  # the source could not be verified lately: its last good content, labelled with when
            candidates = [_label_stale(c, got.stale.get(c.evidence.source_id)) for c in candidates]
        packet = compose(question, kb, snapshot_id, candidates, policy=self.policy, query_type=query_type,
                         tokenizer=self.tokenizer, reranker=self._reranker(sig), numbers=numbers,
                         deterministic=deterministic, kb_version=snapshot_id, dropped=dropped, limit=limit,
                         on_stage=timer.sink)
        if packet.insufficient:  # assembly left nothing, or the budget cannot hold even the frame
            budget = (packet.reason or "").startswith("the context budget")
            why = RefusalReason.BUDGET if budget else RefusalReason.NO_EVIDENCE
            self._decided(kb, why, sig)
            report = self._report(kb, snapshot_id, principal, tally, why, got.stale)
            self._count_insufficient(kb, tally, why)
            rendered = insufficient_context(kb, snapshot_id, reason=packet.reason, search=report,
                                            deterministic=deterministic)
            return replace(packet, dropped=_public(packet.dropped), withheld=dict(packet.dropped), search=report,
                           rendered=rendered)
        self._decided(kb, None, sig)
        packet = replace(packet, dropped=_public(packet.dropped), withheld=dict(packet.dropped),
                         search=self._report(kb, snapshot_id, principal, tally, None, got.stale))
        return mark_conflicts(packet, deterministic=deterministic)  # sources that disagree: both shown, labelled

    def _search(self, kb: str, vector: list[float], query_plan: Any, pool: int, principal: Principal,
                timer: StageTimer) -> tuple[tuple[str, str], list[ScoredHit], tuple[tuple[str, ...], ...]] | None:
        """((collection, snapshot id), fused hits, each sub-query's hit ids); None when ``kb`` serves nothing."""
        target = None
        for _attempt in range(2):
            target = self.resolve(kb)
            if target is None:
                return None
            self._check_model(kb, target[1])
            try:
                # One alias resolution, one collection: every hit comes from one snapshot.
                with timer.stage("search"):
                    # Every sub-query under the same engine filter; fused before the recheck.
                    hits, searched = run_plan(self.store, target[0], vector, query_plan, limit=pool,
                                              flt=query_filter(principal))
                return target, hits, searched
            except NotFoundError:
                continue  # the collection was pruned between resolve and search: resolve again
        return (target, [], ()) if target is not None else None

    def _facts_of(self, snapshot_id: str) -> SnapshotFacts:
        """What the registry says of ``snapshot_id`` (read once per snapshot: a snapshot never changes)."""
        facts = self._facts.get(snapshot_id)
        if facts is None:
            if len(self._facts) > 64:  # old versions go out of service: keep the cache small
                self._facts.pop(next(iter(self._facts)))
            got = self.snapshot_facts(snapshot_id) if self.snapshot_facts is not None else None
            facts = self._facts[snapshot_id] = got or SnapshotFacts()
        return facts

    def _check_model(self, kb: str, snapshot_id: str) -> None:
        """Raise :class:`ModelMismatchError` when ``snapshot_id``'s vectors are not the question embedder's model's."""
        built = self._facts_of(snapshot_id).model
        if built is not None and built != self.embedder.model_id:
            raise ModelMismatchError(
                f"knowledge base {kb!r} serves snapshot {snapshot_id}, embedded with {built!r}, but questions are "
                f"embedded with {self.embedder.model_id!r}: the next build re-embeds it (freshindex snapshots build "
                f"{kb}), or set the embedding settings back")

    def _admit(self, kb: str, snapshot_id: str, hits: Sequence[ScoredHit], principal: Principal,
               timer: StageTimer) -> _Admitted:
        """Each hit decided against the registry, the ACL, the score floor and the staleness policy."""
        got = _Admitted()
        dropped, tally, denied, candidates = got.dropped, got.tally, got.denied, got.candidates
        with timer.stage("recheck"):
            statuses = self.recheck([h.id for h in hits]) if (self.recheck and hits) else None
        stale = got.stale = self.stale_sources(kb) if self.stale_sources is not None else {}
        now = self.clock() if stale and self.max_stale_s is not None else None
        revisions = self._facts_of(snapshot_id).revisions
        for h in hits:
            status = None
            if not visible(principal, h.payload):
                dropped["acl"] = dropped.get("acl", 0) + 1  # the engine filter let it through: never serve it
                continue
            if statuses is not None:
                status = statuses.get(h.id)
                verdict = decide(principal, h.payload, status, self.sensitive)
                if verdict is not Verdict.SERVABLE:
                    dropped[str(verdict)] = dropped.get(str(verdict), 0) + 1
                    if verdict.denial:
                        denied.append((h.id, verdict, status))
                    elif verdict is Verdict.EXPIRED:  # decided only for a hit the principal may read
                        tally.reject("expired", getattr(status, "source_id", None) or h.payload.get("source_id"))
                    continue
            got.readable_ids.add(h.id)
            # Admission: dense similarity over the floor, or a place in the lexical ranking (an exact
            # identifier the dense side ranks low). Order: the engine's fused rank, never the dense score.
            if h.score < self.min_score and h.lexical_rank is None:
                dropped["low_score"] = dropped.get("low_score", 0) + 1
                tally.reject("low_score", h.payload.get("source_id"))
                continue
            try:
                p = PointPayload.from_dict(h.payload)
            except PayloadError:
                # Not a point the builder wrote: nothing to cite it by.
                dropped["bad_payload"] = dropped.get("bad_payload", 0) + 1
                continue
            if now is not None and _beyond(stale.get(p.source_id), now, self.max_stale_s):
                # Unverified for longer than the staleness policy allows: rejected, its source named to refresh.
                dropped["stale"] = dropped.get("stale", 0) + 1
                tally.reject("stale", p.source_id)
                continue
            tally.accept(p.source_id)
            got.dense_ok = got.dense_ok or h.score >= self.min_score
            rank_score = h.fused if h.fused is not None else h.score
            # evidence.score stays the dense cosine (what callers see); Candidate.score orders the pool
            candidate = replace(Candidate.from_point(h.id, h.score, p, snapshot_id,
                                                     revision=revisions.get(p.source_id)), score=rank_score)
            if getattr(status, "pending_deletion", False):  # the deletion guard holds its document's deletion
                candidate = replace(candidate, evidence=replace(candidate.evidence, pending_deletion=True))
            candidates.append(candidate)
        return got

    def _signals(self, question: str, collection: str, principal: Principal, candidates: Sequence[Candidate],
                 hits: Sequence[ScoredHit]) -> Signals:
        """The refusal signals of the admitted evidence: its top ``depth`` by fused rank, IDF from the engine."""
        top = sorted(candidates, key=lambda c: (-c.score, c.chunk_id))[: self.refusal.depth]
        tokens = [evidence_tokens(c.evidence.text, c.evidence.title, c.evidence.heading_path, c.evidence.key)
                  for c in top]
        terms = [t for t in dict.fromkeys(lexical_tokens(question)) if t not in FUNCTION_WORDS]
        if not isinstance(self.store, LexicalStats) or not terms:  # no lexical statistics: every term weighs the same
            idf, missing = {t: 1.0 for t in terms}, 1.0
        else:
            try:
                idf = self.store.lexical_idf(collection, terms, flt=query_filter(principal))
                missing = absent_idf(self._count(collection))
            except (NotFoundError, StoreError) as exc:  # the evidence is in hand: weigh terms alike, do not fail
                log.warning("lexical statistics of %s unavailable (%s): refusal terms weigh the same", collection, exc)
                idf, missing = {t: 1.0 for t in terms}, 1.0
        lexical_top = max((h.lexical for h in hits if h.lexical is not None), default=None)
        dense_top = max((h.score for h in hits), default=None)
        present: set[str] = set()  # every admitted candidate passed the registry recheck
        ocr_read: set[str] = set()
        for c in candidates:
            got = evidence_tokens(c.evidence.text, c.evidence.title, c.evidence.heading_path, c.evidence.key)
            present |= got
            if c.evidence.ocr:
                ocr_read |= got
        return refusal_signals(question, tokens, idf=idf, missing_idf=missing, lexical_top=lexical_top,
                               dense_top=dense_top, present=present, rarity=self.refusal.key_term_rarity,
                               ocr_read=ocr_read,
                               ordinary=ordinary_words() if self.refusal.ordinary_words else frozenset())

    def _policy(self, snapshot_id: str) -> RefusalPolicy:
        """The refusal policy with the calibrated bias of ``snapshot_id``; the shipped one without a calibration.

        A calibration is read once per snapshot; a snapshot without one is asked again after a minute (an
        operator may run ``freshindex snapshots calibrate`` on the version that serves).
        """
        if self.calibration is None:
            return self.refusal
        import time

        hit = self._calibrated.get(snapshot_id)
        if hit is not None and (hit[1] is not self.refusal or time.monotonic() - hit[0] < 60.0):
            return hit[1]
        try:
            policy = self.refusal.calibrated(self.calibration(snapshot_id))
        except Exception:  # the shipped policy still decides; the query must not fail on its calibration
            log.warning("the refusal calibration of %s is unavailable", snapshot_id, exc_info=True)
            policy = self.refusal
        if len(self._calibrated) > 64:  # old versions go out of service: keep the cache small
            self._calibrated.pop(next(iter(self._calibrated)))
        self._calibrated[snapshot_id] = (time.monotonic(), policy)
        return policy

    def _reranker(self, sig: Signals) -> Reranker | None:
        """The caller's reranker; else, with ``lexical_rerank``, the coverage reranker on the refusal's IDF."""
        if self.reranker is not None or not self.lexical_rerank or not sig.weights:
            return self.reranker
        return coverage_reranker(sig.weights)

    def _count(self, collection: str) -> int:
        n = self._points.get(collection)
        if n is None:
            n = self._points[collection] = self.store.count(collection)
            if len(self._points) > 64:  # old versions go out of service: keep the cache small
                self._points.pop(next(iter(self._points)))
        return n

    def _decided(self, kb: str, reason: RefusalReason | None, sig: Signals | None) -> None:
        self.observer.decided(kb, reason, sig)

    def _refuse(self, question: str, kb: str, snapshot_id: str | None, reason: RefusalReason, why: str,
                dropped: dict[str, int] | None = None, sig: Signals | None = None, *, tally: _Tally,
                principal: Principal, deterministic: bool = False) -> ContextPacket:
        self._decided(kb, reason, sig)
        report = self._report(kb, snapshot_id, principal, tally, reason)
        self._count_insufficient(kb, tally, reason)
        text = f"insufficient evidence ({reason}): {why}"
        rendered = insufficient_context(kb, snapshot_id, reason=text, search=report, deterministic=deterministic)
        return ContextPacket(question, kb, snapshot_id, (), True, text, rendered, _public(dropped or {}),
                             withheld=dict(dropped or {}), search=report)

    def _count_insufficient(self, kb: str, tally: _Tally, reason: RefusalReason) -> None:
        self.observer.insufficient(kb, tally.nearest, reason)

    def _report(self, kb: str, snapshot_id: str | None, principal: Principal, tally: _Tally,
                reason: RefusalReason | None, stale: Mapping[str, Any] | None = None) -> SearchReport:
        """What was searched and rejected, and (``reason`` set: insufficient) what to do next.

        Names only the sources of candidates the caller may read: a source's
        own ACL admitting it proves nothing, since per-document rules can
        deny it every document. When nothing readable came back no source is
        named, and the one action is to ask the knowledge base's operators
        (``source_id`` None) for the reason (``no_snapshot`` or ``not_found``).
        """
        directory: dict[str, Any] = {}
        if self.sources is not None and reason is not None:  # answered: the evidence names its own sources
            try:
                directory = {str(s.id): s for s in self.sources(kb) if not getattr(s, "removed", False)}
            except Exception:  # the report helps; it must not fail the answer
                log.warning("the source directory of %s is unavailable", kb, exc_info=True)
        seen = set(tally.readable_sources)
        listed = tuple(sorted(seen)[:MAX_LISTED_SOURCES])
        actions: list[NextAction] = []
        if reason is not None:
            def owner(source_id: str) -> str | None:
                rec = directory.get(source_id)
                return str(rec.owner) if rec is not None and getattr(rec, "owner", None) else None

            def add(action: str, why: str, source_id: str | None) -> None:
                if len(actions) < MAX_NEXT_ACTIONS and all(a.source_id != source_id for a in actions):
                    actions.append(NextAction(action, why, source_id, owner(source_id) if source_id else None))

            for source_id, why in tally.flagged.items():  # evidence the caller could read was too old
                add("refresh_source", why, source_id)
            for source_id in tally.accepted_sources:  # refused, and the evidence it had came from a stale source
                if stale and source_id in stale:
                    add("refresh_source", "stale", source_id)
            if reason is RefusalReason.NO_SNAPSHOT:
                for source_id in sorted(seen):
                    add("refresh_source", "no_snapshot", source_id)
            if not actions:  # nothing to refresh: ask who owns the nearest readable content
                for source_id in tally.readable_sources:
                    add("ask_owner", "not_found", source_id)
            if not actions:  # nothing readable: no source is named, the operators are the ones to ask
                actions.append(NextAction("ask_owner", "no_snapshot" if reason is RefusalReason.NO_SNAPSHOT
                                          else "not_found"))
        return SearchReport(kb, snapshot_id, listed, tally.candidates, tally.accepted, dict(tally.rejected),
                            tuple(actions), subqueries=tally.searched)


@dataclass
class _Admitted:
    """What :meth:`InjectionClient._admit` made of one query's hits."""

    candidates: list[Candidate] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # by reason, every reason (the public part is filtered)
    tally: _Tally = field(default_factory=lambda: _Tally())  # what the caller may be told: hits it may read
    denied: list[tuple[str, Verdict, DocumentStatus | None]] = field(default_factory=list)
    readable_ids: set[str] = field(default_factory=set)  # hits the principal may read now (before the floor)
    dense_ok: bool = False  # insufficient unless some admitted hit clears the dense floor
    stale: Mapping[str, Any] = field(default_factory=dict)  # source id -> freshness, for stale sources


class _Tally:
    """One query's candidates the caller may read: accepted, rejected by reason, and their sources in rank order."""

    def __init__(self) -> None:
        self.candidates = self.accepted = 0
        self.rejected: dict[str, int] = {}
        self.flagged: dict[str, str] = {}  # source id -> expired / stale, first seen first
        self.readable_sources: list[str] = []  # distinct, in the engine's rank order
        self.accepted_sources: list[str] = []
        self.searched: tuple[SubQueryReport, ...] = ()  # the plan's sub-queries (text, mode, hits)

    @property
    def nearest(self) -> str | None:
        """The source of the best-ranked candidate the caller may read (the metric's ``source``)."""
        return self.readable_sources[0] if self.readable_sources else None

    def _seen(self, source_id: Any) -> str | None:
        self.candidates += 1
        if not source_id:
            return None
        sid = str(source_id)
        if sid not in self.readable_sources:
            self.readable_sources.append(sid)
        return sid

    def reject(self, why: str, source_id: Any) -> None:
        sid = self._seen(source_id)
        self.rejected[why] = self.rejected.get(why, 0) + 1
        if sid is not None and why in ("expired", "stale"):
            self.flagged.setdefault(sid, why)

    def accept(self, source_id: Any) -> None:
        sid = self._seen(source_id)
        self.accepted += 1
        if sid is not None and sid not in self.accepted_sources:
            self.accepted_sources.append(sid)

    def demote(self, n: int, why: str) -> None:
        """``n`` accepted candidates rejected after all (none cleared the dense floor)."""
        self.accepted -= n
        self.rejected[why] = self.rejected.get(why, 0) + n


def _beyond(freshness: Any, now: dt.datetime, max_stale_s: float | None) -> bool:
    """Whether a stale source's last verification is older than ``max_stale_s`` (never verified: beyond)."""
    if freshness is None or max_stale_s is None:
        return False
    verified = getattr(freshness, "last_verified_at", None)
    if verified is None:
        return True
    return (now - as_utc(verified)).total_seconds() > max_stale_s


def _label_stale(c: Candidate, freshness: Any) -> Candidate:
    if freshness is None:
        return c
    verified = getattr(freshness, "last_verified_at", None)
    evidence = replace(c.evidence, stale=True, verified_at=verified.isoformat() if verified is not None else None)
    return replace(c, evidence=evidence)


def _public(dropped: Mapping[str, int]) -> dict[str, int]:
    return {k: n for k, n in dropped.items() if k in PUBLIC_DROPS}


#: The evidence types live in :mod:`injection.types` (importable by the thin HTTP client); re-exported here.
__all__ = ["PUBLIC_DROPS", "ContextPacket", "Evidence", "InjectionClient", "QueryObserver", "Recheck", "Verdict",
           "render_context"]
