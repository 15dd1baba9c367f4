"""Stage ``rerank``: the pool ordered by a chain of rerankers, each ordering what the one before it ordered.

In and out: a :class:`~injection.stages.packet.PacketState`; ``order`` and
``relevance`` become the last reranker's (ties keep the previous order),
and each evidence's ``score`` its score.  The chain is the client's: the
coverage reranker (``context.lexical_rerank``) first, then the caller's
rerankers in the order given.  Switched off (or with no reranker), the
order stays the fusion order and relevance the fusion score.  What it
does not do: admit or drop a candidate; a reranker returning the wrong
number of scores is an error, not a skip.
"""

from __future__ import annotations

from freshindex.injection.assemble import rerank
from freshindex.injection.stages.base import StageSpec, StageTrace, passthrough, ranks
from freshindex.injection.stages.packet import PacketState

__all__ = ["STAGE", "run"]


def run(state: PacketState, rec: StageTrace | None) -> PacketState:
    before = state.order_ids() if rec is not None else []
    state.order, state.relevance = rerank(state.question, state.order, state.rerankers)
    if rec is not None:
        rec.ranks = ranks(before, state.order_ids())
        rec.notes["rerankers"] = len(state.rerankers)
    return state


STAGE: StageSpec[PacketState] = StageSpec("rerank", "packet", run, passthrough, ids=PacketState.order_ids,
                                          what="a chain of rerankers: coverage, then the caller's")
