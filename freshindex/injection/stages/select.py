"""Stage ``select``: the ranked items walked under the per-document quota and ``max_chunks``; neighbours joined.

In and out: a :class:`~injection.stages.packet.PacketState`; ``order``
becomes the selection, strongest first (MMR picks for ``diverse``
questions).  Drops: ``per_document``, ``max_chunks``, and ``joined:<id>``
in the trace for a chunk folded into its selected neighbour.  An empty
selection ends the line (insufficient: no evidence).  What it does not
do: count tokens (fit).  It cannot be switched off: the quota and the
chunk limit are what keep a packet within its query type.
"""

from __future__ import annotations

from freshindex.injection.assemble import select
from freshindex.injection.stages.base import StageSpec, StageTrace
from freshindex.injection.stages.packet import PacketState

__all__ = ["STAGE", "run"]

NO_EVIDENCE = "no evidence above the relevance threshold"


def run(state: PacketState, rec: StageTrace | None) -> PacketState:
    lost = rec.dropped if rec is not None else None
    state.order, state.joined, state.mmr = select(state.order, state.relevance, state.policy, state.qtype,
                                                  state.counts, lost)
    if not state.order:
        state.insufficient = NO_EVIDENCE
    return state


STAGE: StageSpec[PacketState] = StageSpec("select", "packet", run, ids=PacketState.order_ids,
                                          what="per-document quota, max_chunks, MMR (diverse), joins")
