"""Stage ``recall``: the question embedded, planned (sub-queries) and searched, dense and lexical, in one snapshot.

In: a :class:`~injection.stages.question.QuestionState` with the question;
out: the same with ``plan``, ``target`` (the collection and snapshot the
alias serves; None ends the line), the fused ``hits`` and each sub-query's
hit ids.  The ACL and tenant filter is inside the engine query.  What it
does not do: decide anything of a hit (the recheck and filter stages do),
or order hits other than by the engine's fusion.  It cannot be switched off.
"""

from __future__ import annotations

from freshindex.injection.planning import plan as plan_query
from freshindex.injection.stages.base import StageSpec, StageTrace
from freshindex.injection.stages.question import QuestionState

__all__ = ["STAGE", "run"]


def run(state: QuestionState, rec: StageTrace | None) -> QuestionState:
    deps = state.deps
    with state.timer.stage("embed"):
        vector = deps.embedder.embed([state.question])[0].tolist()
    state.plan = plan_query(state.question, enabled=deps.planning)
    found = deps.search_plan(state, vector)
    state.recalled = True
    if found is not None:
        state.target, state.hits, state.searched = found
    if rec is not None:
        rec.notes["dense_scores"] = {h.id: h.score for h in state.hits}
        rec.notes["lexical_ranks"] = {h.id: h.lexical_rank for h in state.hits if h.lexical_rank is not None}
        rec.notes["snapshot"] = state.target[1] if state.target is not None else None
    return state


STAGE: StageSpec[QuestionState] = StageSpec("recall", "question", run, ids=QuestionState.hit_ids,
                                            what="embed, plan (sub-queries), search dense + lexical, fused")
