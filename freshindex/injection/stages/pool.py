"""Stage ``pool``: one copy per chunk id, the best ``candidate_pool`` by fusion score, near-copies within a document.

In and out: a :class:`~injection.stages.packet.PacketState`; ``order``
becomes the pool in fusion order (ties by chunk id), superseded versions
of a document after the rest (so that a reranker's positions are those the
current versions would have).  Drops: ``pool`` (past the pool's depth),
``duplicate`` (a near-copy inside one document).  What it does not do:
fold near-copies across documents (group) or rerank.  It cannot be
switched off: every later stage assumes one entry per chunk id.
"""

from __future__ import annotations

from freshindex.injection.assemble import admit_pool
from freshindex.injection.stages.base import StageSpec, StageTrace
from freshindex.injection.stages.packet import PacketState

__all__ = ["STAGE", "run"]


def run(state: PacketState, rec: StageTrace | None) -> PacketState:
    lost = rec.dropped if rec is not None else None
    state.order = admit_pool(state.question, state.order, state.policy, state.counts, lost)
    state.relevance = [c.score for c in state.order]
    return state


STAGE: StageSpec[PacketState] = StageSpec("pool", "packet", run, ids=PacketState.order_ids,
                                          what="dedup by chunk id, fusion admits candidate_pool, near-copies "
                                               "within a document, superseded versions last")
