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

The order of all this is the query line's (:data:`injection.stages.STAGES`):
the client runs its question part (recall, recheck, filter, refuse) and its
answer part (conflicts), and :func:`injection.context.compose` the packet
part between them; ``retrieve(trace=...)`` records each stage.  The client
does not import the pipeline: its store, embedder and (optional)
recheck are passed in, so it runs next to the service or inside an app.
"""

from __future__ import annotations

import datetime as dt
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypedDict, Unpack

from freshindex.acl import Principal, query_filter
from freshindex.acl.access import SensitiveRecheck, Verdict, denial_records
from freshindex.core.errors import ModelMismatchError, NotFoundError, StoreError
from freshindex.core.naming import Naming
from freshindex.core.types import Embedder
from freshindex.injection.assemble import Candidate, Reranker, SessionNumbers, rerankers_of
from freshindex.injection.budget import ContextPolicy, Tokenizer
from freshindex.injection.context import LineOptions, PacketOptions, compose
from freshindex.injection.coverage import coverage_reranker
from freshindex.injection.observer import Observers, QueryObserver
from freshindex.injection.planning import report as subquery_report
from freshindex.injection.planning import run as run_plan
from freshindex.injection.refusal import (
    FUNCTION_WORDS,
    RefusalPolicy,
    RefusalReason,
    Signals,
    TermWeights,
    absent_idf,
    evidence_tokens,
    ordinary_words,
)
from freshindex.injection.refusal import signals as refusal_signals
from freshindex.injection.stages import Trace, disabled_of, run_part
from freshindex.injection.stages.conflicts import AnswerState
from freshindex.injection.stages.question import QuestionState, Recheck, Tally
from freshindex.injection.timing import StageTimer
from freshindex.injection.types import (
    ContextPacket,
    Evidence,
    NextAction,
    SearchReport,
    insufficient_context,
    render_context,
)
from freshindex.settings.sections.context import ContextSettings
from freshindex.vectorstore.base import LexicalStats, ScoredHit, VectorStore
from freshindex.vectorstore.lexical import tokenize as lexical_tokens

log = logging.getLogger("freshindex.injection")

#: The defaults, read from the ``context`` settings section (their one home).
_DEFAULTS = ContextSettings()

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


@dataclass(frozen=True, kw_only=True)
class QueryTuning:
    """How an :class:`InjectionClient` answers: thresholds and policies (the ``context`` settings' values).

    ``min_score``: the dense floor; ``policy``: the packet's budget and quotas (None: the defaults);
    ``tokenizer``: counts the budget (None: the policy's); ``reranker``: the caller's reranker(s), after the
    coverage reranker when ``lexical_rerank``; ``refusal``: the refusal policy (None: the shipped one);
    ``max_stale_s``: evidence of a source unverified for longer is rejected (None: served labelled);
    ``planning``: the question's exact identifiers are also searched lexically alone.
    """

    min_score: float = _DEFAULTS.min_score
    policy: ContextPolicy | None = None
    tokenizer: Tokenizer | None = None
    reranker: Reranker | Sequence[Reranker] | None = None
    refusal: RefusalPolicy | None = None
    lexical_rerank: bool = _DEFAULTS.lexical_rerank
    max_stale_s: float | None = _DEFAULTS.max_stale_s
    planning: bool = _DEFAULTS.query_planning

    @classmethod
    def of(cls, context: ContextSettings, *, refusal: RefusalPolicy | None = None) -> QueryTuning:
        """The tuning the ``context`` settings section states (its policy included)."""
        return cls(min_score=context.min_score, policy=ContextPolicy.from_mapping(context.model_dump()),
                   refusal=refusal, lexical_rerank=context.lexical_rerank, max_stale_s=context.max_stale_s,
                   planning=context.query_planning)


@dataclass(frozen=True, kw_only=True)
class QueryHooks:
    """What an :class:`InjectionClient` asks of the rest of the service, each optional (None: not checked).

    ``naming``: alias and collection names; ``recheck``: the registry's current row of each hit
    (:func:`acl.access.decide`); ``sensitive``: the recheck at the ACL source; ``stale_sources``: the kb's
    stale sources; ``calibration``: a snapshot's refusal calibration; ``snapshot_facts``: a snapshot's model
    and revisions; ``sources``: the kb's source records, for an insufficient-evidence report; ``observer``:
    hears every stage, denial and packet; ``clock``: now (UTC), injectable for tests.
    """

    naming: Naming = field(default_factory=Naming)
    recheck: Recheck | None = None
    sensitive: SensitiveRecheck | None = None
    stale_sources: StaleSources | None = None
    calibration: Callable[[str], Mapping[str, Any] | None] | None = None
    snapshot_facts: Callable[[str], SnapshotFacts | None] | None = None
    sources: SourceDirectory | None = None
    observer: QueryObserver | None = None
    clock: Callable[[], dt.datetime] | None = None


class LegacyClientArguments(TypedDict, total=False):
    """:class:`InjectionClient`'s keyword arguments before :class:`QueryTuning` and :class:`QueryHooks`
    (deprecated: each is the field of the same name of one of them)."""

    min_score: float
    policy: ContextPolicy | None
    tokenizer: Tokenizer | None
    reranker: Reranker | Sequence[Reranker] | None
    refusal: RefusalPolicy | None
    lexical_rerank: bool
    max_stale_s: float | None
    planning: bool
    naming: Naming
    recheck: Recheck | None
    sensitive: SensitiveRecheck | None
    stale_sources: StaleSources | None
    calibration: Callable[[str], Mapping[str, Any] | None] | None
    snapshot_facts: Callable[[str], SnapshotFacts | None] | None
    sources: SourceDirectory | None
    observer: QueryObserver | None
    clock: Callable[[], dt.datetime] | None


def _records(tuning: QueryTuning | None, hooks: QueryHooks | None,
             legacy: Mapping[str, Any]) -> tuple[QueryTuning, QueryHooks]:
    """``tuning`` and ``hooks`` (None: the defaults) with the deprecated keyword arguments ``legacy`` applied."""
    tuning, hooks = tuning or QueryTuning(), hooks or QueryHooks()
    if not legacy:
        return tuning, hooks
    tuned, hooked = {f.name for f in fields(QueryTuning)}, {f.name for f in fields(QueryHooks)}
    unknown = sorted(set(legacy) - tuned - hooked)
    if unknown:
        raise TypeError(f"InjectionClient() got unexpected keyword arguments: {', '.join(unknown)}")
    warnings.warn(f"InjectionClient's keyword arguments {', '.join(legacy)} are deprecated and go in the next "
                  "release: pass tuning=QueryTuning(...) and hooks=QueryHooks(...)", DeprecationWarning, stacklevel=3)
    return (replace(tuning, **{k: v for k, v in legacy.items() if k in tuned}),
            replace(hooks, **{k: v for k, v in legacy.items() if k in hooked}))


@dataclass(frozen=True)
class _Asked:
    """One :meth:`InjectionClient.retrieve` call's arguments."""

    question: str
    kb: str
    principal: Principal
    limit: int
    query_type: str | None
    numbers: SessionNumbers | None
    deterministic: bool


#: At most this many sources are listed as searched, and this many next actions proposed, per packet.
MAX_LISTED_SOURCES = 20
MAX_NEXT_ACTIONS = 5


class InjectionClient:
    def __init__(self, store: VectorStore, embedder: Embedder, tuning: QueryTuning | None = None,
                 hooks: QueryHooks | None = None, **legacy: Unpack[LegacyClientArguments]) -> None:
        # legacy: the keyword arguments of the release before the two records, for one release more
        tuning, hooks = _records(tuning, hooks, legacy)
        self.store, self.embedder, self.naming = store, embedder, hooks.naming
        self.recheck, self.sensitive = hooks.recheck, hooks.sensitive
        # every per-query measurement and the denial audit (injection.observer), on every path
        self.observer = Observers(hooks.observer)
        self.stale_sources = hooks.stale_sources
        self.min_score = tuning.min_score
        self.policy = tuning.policy or ContextPolicy()
        # The rerank stage's chain: the coverage reranker (lexical_rerank), then the caller's reranker(s).
        self.tokenizer, self.reranker = tuning.tokenizer, tuning.reranker
        self.rerankers = rerankers_of(tuning.reranker)
        # Stages of the line switched off (context.disabled_stages, carried by the policy); checked here.
        self.disabled = disabled_of(self.policy.disabled_stages)
        self.refusal = tuning.refusal or RefusalPolicy()
        # snapshot id -> its refusal calibration (injection.calibration), read once per snapshot; None: shipped bias
        self.calibration = hooks.calibration
        self._calibrated: dict[str, tuple[float, RefusalPolicy]] = {}
        # snapshot id -> its embedding model and its sources' revisions (None: unknown, not checked)
        self.snapshot_facts = hooks.snapshot_facts
        self._facts: dict[str, SnapshotFacts] = {}
        self.lexical_rerank = tuning.lexical_rerank
        # The insufficient-evidence packet's report: the kb's sources (who owns what), a staleness policy
        # (evidence of a source unverified for longer than max_stale_s is rejected, not served labelled;
        # None: served labelled).
        self.sources, self.max_stale_s = hooks.sources, tuning.max_stale_s
        self.clock = hooks.clock or (lambda: dt.datetime.now(dt.UTC))
        # Query planning (injection.planning): the question's exact identifiers also searched lexically alone.
        self.planning = tuning.planning
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
                 deterministic: bool = False, trace: Trace | None = None) -> ContextPacket:
        """Evidence for ``question`` as ``principal`` from the snapshot the alias of ``kb`` serves now.

        ``limit`` caps the evidence items; ``query_type`` (fact, procedure,
        compare, diverse; guessed from the question when None) picks the
        budget row; one ``numbers`` per conversation keeps ``[n]`` stable;
        ``deterministic`` renders byte-stable blocks for prompt caching.
        ``trace`` (None: nothing is recorded, at no cost) is filled with what
        each stage of the line (:data:`injection.stages.STAGES`) took in and
        let out: ids dropped with the reason, ranks, groups, the budget cut,
        the refusal's reason and signals.
        """
        timer = StageTimer(self.observer.stage)
        with timer.stage("total"):
            packet = self._retrieve(_Asked(question, kb, principal, limit, query_type, numbers, deterministic),
                                    timer, trace)
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
        state = self._ask(question, kb, principal, limit, StageTimer(None), None, signals_only=True)
        return state.board.evidence if state.target is not None else None

    def _ask(self, question: str, kb: str, principal: Principal, limit: int, timer: StageTimer,
             trace: Trace | None, *, signals_only: bool = False) -> QuestionState:
        """The question part of the line (recall, recheck, filter, refuse) for ``question``."""
        state = QuestionState(question, kb, principal, limit, self, timer, signals_only=signals_only)
        disabled = self.disabled - {"refuse"} if signals_only else self.disabled
        return run_part("question", state, disabled=disabled, trace=trace)

    # -- what the question stages ask of the client (stages.question.QuestionDeps) --------------------------

    def search_plan(self, state: QuestionState, vector: list[float]) -> Any:
        """The recall stage's search: the plan's sub-queries, under the principal's filter, fused."""
        pool = max(self.policy.candidate_pool, state.limit)
        return self._search(state.kb, vector, state.plan, pool, state.principal, state.timer)

    def revisions(self, snapshot_id: str) -> Mapping[str, str]:
        return self._facts_of(snapshot_id).revisions

    def evidence_signals_of(self, state: QuestionState) -> Signals:
        """The refusal signals of the state's admitted candidates, against the hits they came from."""
        collection = state.target[0] if state.target is not None else ""
        admitted = {c.chunk_id for c in state.got.candidates}
        return self._signals(state.question, collection, state.principal, state.got.candidates,
                             [h for h in state.hits if h.id in admitted])

    def refusal_policy(self, snapshot_id: str) -> RefusalPolicy:
        return self._policy(snapshot_id)

    def _retrieve(self, asked: _Asked, timer: StageTimer, trace: Trace | None) -> ContextPacket:
        question, kb, principal, deterministic = asked.question, asked.kb, asked.principal, asked.deterministic
        state = self._ask(question, kb, principal, asked.limit, timer, trace)
        if state.target is None:
            return self._refuse(asked, None, RefusalReason.NO_SNAPSHOT, "the knowledge base has no snapshot yet",
                                tally=Tally())
        snapshot_id, got = state.target[1], state.got
        tally = got.tally
        tally.searched = subquery_report(state.plan, state.searched, got.readable_ids)
        if got.denied:
            self.observer.denied(denial_records(kb, principal, got.denied))
        if not got.readable_ids:
            self.observer.empty_recall(kb)
        if state.refused is not None:
            return self._refuse(asked, snapshot_id, state.refused[0], state.refused[1], tally=tally,
                                dropped=got.dropped, sig=state.board.evidence)
        packet = compose(question, kb, snapshot_id, got.candidates, policy=self.policy, query_type=asked.query_type,
                         tokenizer=self.tokenizer,
                         options=PacketOptions(reranker=self._rerankers(state), numbers=asked.numbers,
                                               deterministic=deterministic, kb_version=snapshot_id,
                                               dropped=got.dropped, limit=asked.limit, on_stage=timer.sink,
                                               line=LineOptions(self.disabled, trace)))
        sig = state.board.evidence
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
        # sources that disagree: both shown, labelled (the answer part of the line)
        return run_part("answer", AnswerState(packet, deterministic), disabled=self.disabled, trace=trace).packet


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
        weights = TermWeights(idf, missing, rarity=self.refusal.key_term_rarity,
                              ordinary=ordinary_words() if self.refusal.ordinary_words else frozenset())
        return refusal_signals(question, tokens, weights=weights, lexical_top=lexical_top, dense_top=dense_top,
                               present=present, ocr_read=ocr_read)

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

    def _rerankers(self, state: QuestionState) -> tuple[Reranker, ...]:
        """The rerank stage's chain: with ``lexical_rerank``, the coverage reranker on the refusal's IDF term
        weights (computed here when the refuse stage was switched off); then the caller's rerankers."""
        chain: list[Reranker] = []
        if self.lexical_rerank and "rerank" not in self.disabled and state.got.candidates:
            if state.board.evidence is None:
                state.board.evidence = self.evidence_signals_of(state)
            if state.board.evidence.weights:
                chain.append(coverage_reranker(state.board.evidence.weights))
        return (*chain, *self.rerankers)


    def _count(self, collection: str) -> int:
        n = self._points.get(collection)
        if n is None:
            n = self._points[collection] = self.store.count(collection)
            if len(self._points) > 64:  # old versions go out of service: keep the cache small
                self._points.pop(next(iter(self._points)))
        return n

    def _decided(self, kb: str, reason: RefusalReason | None, sig: Signals | None) -> None:
        self.observer.decided(kb, reason, sig)

    def _refuse(self, asked: _Asked, snapshot_id: str | None, reason: RefusalReason, why: str, *, tally: Tally,
                dropped: dict[str, int] | None = None, sig: Signals | None = None) -> ContextPacket:
        kb = asked.kb
        self._decided(kb, reason, sig)
        report = self._report(kb, snapshot_id, asked.principal, tally, reason)
        self._count_insufficient(kb, tally, reason)
        text = f"insufficient evidence ({reason}): {why}"
        rendered = insufficient_context(kb, snapshot_id, reason=text, search=report, deterministic=asked.deterministic)
        return ContextPacket(asked.question, kb, snapshot_id, (), True, text, rendered, _public(dropped or {}),
                             withheld=dict(dropped or {}), search=report)

    def _count_insufficient(self, kb: str, tally: Tally, reason: RefusalReason) -> None:
        self.observer.insufficient(kb, tally.nearest, reason)

    def _report(self, kb: str, snapshot_id: str | None, principal: Principal, tally: Tally,
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


def _public(dropped: Mapping[str, int]) -> dict[str, int]:
    return {k: n for k, n in dropped.items() if k in PUBLIC_DROPS}


#: The evidence types live in :mod:`injection.types` (importable by the thin HTTP client); re-exported here.
__all__ = ["PUBLIC_DROPS", "ContextPacket", "Evidence", "InjectionClient", "QueryHooks", "QueryObserver", "QueryTuning",
           "Recheck", "SnapshotFacts", "Verdict",
           "render_context"]
