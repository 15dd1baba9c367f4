"""Stage ``group``: near-copies across documents become one item citing the others; older versions go last.

In and out: a :class:`~injection.stages.packet.PacketState`.  Members of a
group of near-copies (:mod:`injection.duplicates`) fold into the canonical
one, placed at the group's best rank, which cites the others as mirrors
(``Evidence.also_in``); items of a superseded version of a document go
after every other item.  Drops: ``duplicate`` (traced as ``grouped``, with
``grouped_into``).  Switched off, nothing is grouped or moved.  What it
does not do: detect paraphrase (grouping is lexical).
"""

from __future__ import annotations

from freshindex.injection.assemble import group
from freshindex.injection.stages.base import StageSpec, StageTrace, passthrough
from freshindex.injection.stages.packet import PacketState

__all__ = ["STAGE", "run"]


def run(state: PacketState, rec: StageTrace | None) -> PacketState:
    into = rec.grouped_into if rec is not None else None
    state.order, state.relevance = group(state.question, state.order, state.relevance, state.policy,
                                         state.counts, into)
    if rec is not None:
        rec.drop(list(rec.grouped_into), "grouped")
    return state


STAGE: StageSpec[PacketState] = StageSpec("group", "packet", run, passthrough, ids=PacketState.order_ids,
                                          what="near-copies across documents as mirrors; superseded versions last")
