"""Stage ``recheck``: every hit decided again against the ACL and the registry's current row (access, validity).

In and out: a :class:`~injection.stages.question.QuestionState`; it writes
``statuses`` (the registry's row of each hit's chunk and document) and
``verdicts`` (hit id -> why it may not be served: ``acl`` when the engine
filter let through a point the principal may not read, else the
:class:`~acl.access.Verdict`: tombstoned, orphan, tenant, expired, ...),
the denials for the audit trail, and the ids the principal may read now.
The counts are written by the filter stage, in the hits' order, so that
the packet's reasons keep their order.  What it does not do: apply the
score floor or the staleness policy (filter).  It cannot be switched off:
without it a caller could be served what it may not read.
"""

from __future__ import annotations

from freshindex.acl import visible
from freshindex.acl.access import PointAcl, Verdict, decide
from freshindex.injection.stages.base import StageSpec, StageTrace
from freshindex.injection.stages.question import QuestionState

__all__ = ["STAGE", "run"]


def run(state: QuestionState, rec: StageTrace | None) -> QuestionState:
    deps, got, hits = state.deps, state.got, state.hits
    with state.timer.stage("recheck"):
        state.statuses = deps.recheck([h.id for h in hits]) if (deps.recheck and hits) else None
    for h in hits:
        if not visible(state.principal, h.payload):
            state.verdicts[h.id] = "acl"  # the engine filter let it through: never serve it
            continue
        if state.statuses is not None:
            status = state.statuses.get(h.id)
            verdict = decide(state.principal, PointAcl.of(h.payload), status, deps.sensitive)
            if verdict is not Verdict.SERVABLE:
                state.verdicts[h.id] = str(verdict)
                if verdict.denial:
                    got.denied.append((h.id, verdict, status))
                continue
        got.readable_ids.add(h.id)
    if rec is not None:
        for hit_id, why in state.verdicts.items():
            rec.drop([hit_id], why)
    return state


def ids(state: QuestionState) -> list[str]:
    """The hits still in the running: those without a verdict."""
    return [h.id for h in state.hits if h.id not in state.verdicts]


STAGE: StageSpec[QuestionState] = StageSpec("recheck", "question", run, ids=ids,
                                            what="ACL, tenant, registry validity (tombstoned, orphan, expired)")
