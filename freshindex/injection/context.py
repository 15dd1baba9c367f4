"""One call from rechecked candidates to a :class:`ContextPacket`: assemble, number, budget, place, render.

This is what :class:`injection.client.InjectionClient` calls after its query
and rechecks.  The order matters and lives only here: assembly picks and
ranks (:func:`injection.assemble.assemble`); the session's numbers are
peeked; the budget trims the ranked list against the rendered block
(:func:`injection.budget.fit`); the numbers of what survived are recorded;
the block is rendered once more with the same fence token, in placement
order (:func:`injection.assemble.place`), and counted again.  The renders
repeat most lines, and both the counter (each distinct line encoded once)
and the renderer (each evidence's parts neutralised once) remember them, so
the repeats cost joins, not tokenizer calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from freshindex.injection.assemble import Candidate, Reranker, SessionNumbers, assemble, place
from freshindex.injection.budget import ContextPolicy, QueryType, Tokenizer, default_tokenizer, fit, guess_query_type
from freshindex.injection.render import insufficient_block, render_block
from freshindex.injection.types import ContextPacket, Evidence

__all__ = ["QUERY_STAGES", "StageSink", "StageTimer", "compose"]

log = logging.getLogger("freshindex.injection")

#: The stages a query's time is reported in (the ``stage`` label of ``freshindex_query_seconds``: a fixed set).
QUERY_STAGES = ("embed", "search", "recheck", "compose", "total")

#: (stage, seconds): one query's time in one stage of :data:`QUERY_STAGES`; must not raise.
StageSink = Callable[[str, float], None]


class StageTimer:
    """Times the stages of one query for a :data:`StageSink` (None: nothing is timed or reported).

    Why a class: the client times embed, search and recheck, :func:`compose`
    times itself, and a sink that raises must never fail a query (it is
    logged and ignored).
    """

    def __init__(self, sink: StageSink | None) -> None:
        self.sink = sink

    def report(self, stage: str, seconds: float) -> None:
        if self.sink is None:
            return
        if stage not in QUERY_STAGES:
            raise ValueError(f"unknown query stage {stage!r}; one of {', '.join(QUERY_STAGES)}")
        try:
            self.sink(stage, seconds)
        except Exception:  # a metrics sink must not fail the query it measures
            log.warning("the query stage sink failed for %s", stage, exc_info=True)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.report(name, time.perf_counter() - t0)


def compose(
    question: str,
    kb: str,
    snapshot_id: str,
    candidates: Iterable[Candidate],
    *,
    policy: ContextPolicy = ContextPolicy(),
    query_type: QueryType | str | None = None,
    tokenizer: Tokenizer | None = None,
    reranker: Reranker | None = None,
    numbers: SessionNumbers | None = None,
    deterministic: bool = False,
    kb_version: str | None = None,
    dropped: dict[str, int] | None = None,
    limit: int | None = None,
    on_stage: StageSink | None = None,
) -> ContextPacket:
    """The packet for ``question`` from rechecked ``candidates`` (never over the type's token budget).

    ``dropped`` (counts from the caller's own filters) is merged with the
    reasons assembly and the budget add.  ``limit`` (the API's ``limit``)
    lowers the query type's ``max_chunks``.  Pass one :class:`SessionNumbers`
    per conversation to keep ``[n]`` stable across turns.  An empty
    selection, or a budget too small for even the block's frame, gives an
    *insufficient evidence* packet.  ``on_stage`` hears the ``compose``
    stage's time (the ``freshindex_query_seconds`` histogram).
    """
    with StageTimer(on_stage).stage("compose"):
        return _compose(question, kb, snapshot_id, candidates, policy=policy, query_type=query_type,
                        tokenizer=tokenizer, reranker=reranker, numbers=numbers, deterministic=deterministic,
                        kb_version=kb_version, dropped=dropped, limit=limit)


def _compose(
    question: str,
    kb: str,
    snapshot_id: str,
    candidates: Iterable[Candidate],
    *,
    policy: ContextPolicy,
    query_type: QueryType | str | None,
    tokenizer: Tokenizer | None,
    reranker: Reranker | None,
    numbers: SessionNumbers | None,
    deterministic: bool,
    kb_version: str | None,
    dropped: dict[str, int] | None,
    limit: int | None,
) -> ContextPacket:
    qtype = QueryType(query_type) if query_type is not None else guess_query_type(question)
    counter = tokenizer or default_tokenizer()
    numbers = numbers if numbers is not None else SessionNumbers()
    counts = dict(dropped or {})
    if limit is not None:
        row = policy.row(qtype)
        policy = replace(policy, budgets={**policy.budgets, qtype: replace(row, max_chunks=max(1, min(limit, row.max_chunks)))})
    asm = assemble(question, candidates, policy=policy, query_type=qtype, reranker=reranker)
    for why, n in asm.dropped.items():
        counts[why] = counts.get(why, 0) + n
    if not asm.ranked:
        return ContextPacket(question, kb, snapshot_id, (), True, "no evidence above the relevance threshold",
                             insufficient_block(kb, snapshot_id), counts)
    limit = policy.tokens_for(qtype)

    def render(evidence: Sequence[Evidence], token: str | None) -> str:
        return render_block(kb, snapshot_id, place(evidence), deterministic=deterministic, kb_version=kb_version,
                            token=token)

    fitted = fit(numbers.peek([c.evidence for c in asm.ranked]), limit, counter, render)
    if fitted.dropped:
        counts["budget"] = counts.get("budget", 0) + fitted.dropped
    if not fitted.evidence:
        return ContextPacket(question, kb, snapshot_id, (), True, f"the context budget ({limit} tokens) is too small",
                             insufficient_block(kb, snapshot_id), counts)
    # Record numbers for what is shown only; a piece the budget dropped takes no number.
    kept = numbers.assign(list(fitted.evidence))
    token = fitted.rendered.split("DATA-", 1)[1][:32] if "DATA-" in fitted.rendered else None
    rendered = render(kept, token)
    while counter.count(rendered) > limit and kept:  # numbers shrank or the token changed: count again
        kept.pop()
        counts["budget"] = counts.get("budget", 0) + 1
        rendered = render(kept, token)
    if not kept:  # pragma: no cover - fit() already found this frame to fit
        return ContextPacket(question, kb, snapshot_id, (), True, f"the context budget ({limit} tokens) is too small",
                             insufficient_block(kb, snapshot_id), counts)
    return ContextPacket(question, kb, snapshot_id, tuple(sorted(kept, key=lambda e: e.n)), False, None, rendered,
                         counts)
