"""Stage ``fit``: the selection, numbered as the session would number it, trimmed to the query type's token budget.

In and out: a :class:`~injection.stages.packet.PacketState`; ``evidence``
becomes what fits the budget when rendered (:func:`injection.budget.fit`,
the tail dropped first), ``rendered`` that trial block (its fence token is
kept by the render stage).  Drops: ``budget``.  A budget too small for
even the block's frame ends the line (insufficient).  What it does not do:
record the session's numbers (render does, for what is shown only).  It
cannot be switched off: the budget is a bound the caller relies on.
"""

from __future__ import annotations

from collections.abc import Sequence

from freshindex.injection.assemble import place
from freshindex.injection.budget import fit
from freshindex.injection.render import render_block
from freshindex.injection.stages.base import StageSpec, StageTrace
from freshindex.injection.stages.packet import PacketState
from freshindex.injection.types import Evidence

__all__ = ["STAGE", "block", "run", "too_small"]


def block(state: PacketState, evidence: Sequence[Evidence], token: str | None) -> str:
    """The rendered block of ``evidence`` in prompt order (:func:`injection.assemble.place`)."""
    return render_block(state.kb, state.snapshot_id, place(evidence), deterministic=state.deterministic,
                        kb_version=state.kb_version, token=token)


def too_small(tokens: int) -> str:
    return f"the context budget ({tokens} tokens) is too small"


def run(state: PacketState, rec: StageTrace | None) -> PacketState:
    state.tokens = state.policy.tokens_for(state.qtype)
    peeked = state.numbers.peek([c.evidence for c in state.order])
    fitted = fit(peeked, state.tokens, state.counter, lambda ev, token: block(state, ev, token))
    if fitted.dropped:
        state.counts["budget"] = state.counts.get("budget", 0) + fitted.dropped
    state.evidence, state.rendered = list(fitted.evidence), fitted.rendered
    if rec is not None:
        rec.notes["tokens"] = state.tokens
        kept = {e.chunk_id for e in state.evidence}
        rec.drop([e.chunk_id for e in peeked if e.chunk_id not in kept], "budget")
    if not state.evidence:
        state.insufficient = too_small(state.tokens)
    return state


def ids(state: PacketState) -> list[str]:
    """Before: the selection; after: what fits."""
    return state.evidence_ids() if state.tokens else state.order_ids()


STAGE: StageSpec[PacketState] = StageSpec("fit", "packet", run, ids=ids, what="the token budget")
