"""Stage ``render``: the fitted evidence numbered for the session and rendered once more, counted again.

In and out: a :class:`~injection.stages.packet.PacketState`.  Numbers are
recorded for what is shown only (:class:`~injection.assemble.SessionNumbers`);
the block is rendered with the fit stage's fence token, and when the final
numbers make it longer than the budget its last item goes (``budget``)
until it fits.  What it does not do: mark conflicts (the answer part) or
render an insufficient packet (the client does, with its search report).
It cannot be switched off.
"""

from __future__ import annotations

from freshindex.injection.stages.base import StageSpec, StageTrace
from freshindex.injection.stages.fit import block, too_small
from freshindex.injection.stages.packet import PacketState

__all__ = ["STAGE", "run"]


def run(state: PacketState, rec: StageTrace | None) -> PacketState:
    # Record numbers for what is shown only; a piece the budget dropped takes no number.
    kept = state.numbers.assign(state.evidence)
    token = state.rendered.split("DATA-", 1)[1][:32] if "DATA-" in state.rendered else None
    rendered = block(state, kept, token)
    while state.counter.count(rendered) > state.tokens and kept:  # numbers shrank or the token changed
        gone = kept.pop()
        state.counts["budget"] = state.counts.get("budget", 0) + 1
        if rec is not None:
            rec.drop([gone.chunk_id], "budget")
        rendered = block(state, kept, token)
    state.evidence, state.rendered = sorted(kept, key=lambda e: e.n), rendered
    if not kept:  # pragma: no cover - fit already found this frame to fit
        state.insufficient = too_small(state.tokens)
    if rec is not None:
        rec.notes["numbers"] = {e.chunk_id: e.n for e in state.evidence}
    return state


STAGE: StageSpec[PacketState] = StageSpec("render", "packet", run, ids=PacketState.evidence_ids,
                                          what="session numbers, the final render, counted again")
