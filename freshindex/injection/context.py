"""One call from rechecked candidates to a :class:`ContextPacket`: the packet part of the query line.

This is what :class:`injection.client.InjectionClient` calls after its
query, rechecks and refusal.  The order lives in one place,
:data:`injection.stages.STAGES`: ``pool`` (dedup, fusion admits the pool),
``rerank`` (the chain), ``group`` (near-copies, versions), ``select``
(quota, MMR, joins), ``fit`` (the session's numbers peeked, the budget
trims the ranked list against the rendered block, :func:`injection.budget.fit`)
and ``render`` (the numbers of what survived recorded, the block rendered
once more with the same fence token in placement order, counted again).
The renders repeat most lines, and both the counter (each distinct line
encoded once) and the renderer (each evidence's parts neutralised once)
remember them, so the repeats cost joins, not tokenizer calls.  What it
does not do: rechecks, refusal, conflicts (the client's parts of the line).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from freshindex.injection.assemble import Candidate, Reranker, SessionNumbers, rerankers_of
from freshindex.injection.budget import ContextPolicy, QueryType, Tokenizer, default_tokenizer, guess_query_type
from freshindex.injection.render import insufficient_block
from freshindex.injection.stages import Trace, run_part
from freshindex.injection.stages.packet import PacketState
from freshindex.injection.timing import QUERY_STAGES, StageSink, StageTimer
from freshindex.injection.types import ContextPacket

__all__ = ["QUERY_STAGES", "LineOptions", "PacketOptions", "StageSink", "StageTimer", "compose"]


@dataclass(frozen=True)
class LineOptions:
    """How the packet part runs: the stages switched off (``context.disabled_stages``) and the trace to fill."""

    disabled: frozenset[str] = frozenset()
    trace: Trace | None = None


@dataclass(frozen=True)
class PacketOptions:
    """The optional rest of one :func:`compose` call.

    ``reranker``: one, or a chain (each orders what the one before ordered).  ``numbers``: one
    :class:`SessionNumbers` per conversation keeps ``[n]`` stable across turns.  ``deterministic`` and
    ``kb_version``: the deterministic mode's ordering and the version it names.  ``dropped`` (counts from the
    caller's own filters) is merged with the reasons assembly and the budget add.  ``limit`` (the API's
    ``limit``) lowers the query type's ``max_chunks``.  ``on_stage`` hears the ``compose`` stage's time (the
    ``freshindex_query_seconds`` histogram); ``line`` switches packet stages off and fills a trace.
    """

    reranker: Reranker | tuple[Reranker, ...] | None = None
    numbers: SessionNumbers | None = None
    deterministic: bool = False
    kb_version: str | None = None
    dropped: dict[str, int] | None = None
    limit: int | None = None
    on_stage: StageSink | None = None
    line: LineOptions = LineOptions()


def compose(
    question: str,
    kb: str,
    snapshot_id: str,
    candidates: Iterable[Candidate],
    *,
    policy: ContextPolicy = ContextPolicy(),
    query_type: QueryType | str | None = None,
    tokenizer: Tokenizer | None = None,
    options: PacketOptions = PacketOptions(),
) -> ContextPacket:
    """The packet for ``question`` from rechecked ``candidates`` (never over the type's token budget).

    ``options`` (:class:`PacketOptions`) carries the rerankers, the session's numbers, the deterministic
    mode, the caller's drops and limit, the stage sink and the line's switches.  An empty selection, or a
    budget too small for even the block's frame, gives an *insufficient evidence* packet.
    """
    with StageTimer(options.on_stage).stage("compose"):
        qtype = QueryType(query_type) if query_type is not None else guess_query_type(question)
        if options.limit is not None:
            row = policy.row(qtype)
            capped = replace(row, max_chunks=max(1, min(options.limit, row.max_chunks)))
            policy = replace(policy, budgets={**policy.budgets, qtype: capped})
        numbers = options.numbers if options.numbers is not None else SessionNumbers()
        state = PacketState(question, kb, snapshot_id, qtype, policy, tokenizer or default_tokenizer(), numbers,
                            list(candidates), dict(options.dropped or {}), rerankers_of(options.reranker),
                            options.deterministic, options.kb_version)
        state = run_part("packet", state, disabled=options.line.disabled, trace=options.line.trace)
        if state.insufficient is not None:
            return ContextPacket(question, kb, snapshot_id, (), True, state.insufficient,
                                 insufficient_block(kb, snapshot_id), state.counts)
        return ContextPacket(question, kb, snapshot_id, tuple(state.evidence), False, None, state.rendered,
                             state.counts)
