"""Stage ``filter``: the admission rules (the dense score floor, the staleness policy) and the candidates built.

In and out: a :class:`~injection.stages.question.QuestionState`.  Walks
the hits in the engine's fused order: a hit with a recheck verdict is
counted under it; a readable one is admitted when its dense cosine clears
``min_score`` or it has a lexical rank, its payload is a point the builder
wrote, and its source is not stale beyond ``max_stale_s``; evidence of a
stale source is labelled with its last verification.  Writes ``got``
(candidates, counts by reason, the caller's tally).  Switched off, the
floor and the staleness rules are not applied (every readable point with a
valid payload is admitted); the recheck's verdicts still hold.  What it
does not do: order or cap candidates (the packet part does).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from freshindex.core.payload import PayloadError, PointPayload
from freshindex.injection.assemble import Candidate
from freshindex.injection.stages.base import StageSpec, StageTrace
from freshindex.injection.stages.question import Admitted, QuestionState, beyond, label_stale
from freshindex.vectorstore.base import ScoredHit

__all__ = ["STAGE", "run"]


def _count(got: Admitted, why: str) -> None:
    got.dropped[why] = got.dropped.get(why, 0) + 1


def _judged(state: QuestionState, h: ScoredHit) -> bool:
    """Count a hit the recheck judged (True); False for a readable one."""
    why = state.verdicts.get(h.id)
    if why is None:
        return False
    _count(state.got, why)
    if why == "expired":  # decided only for a hit the principal may read
        status = state.statuses.get(h.id) if state.statuses is not None else None
        state.got.tally.reject("expired", getattr(status, "source_id", None) or h.payload.get("source_id"))
    return True


def _admit(state: QuestionState, rec: StageTrace | None, rules: bool) -> QuestionState:
    deps, got = state.deps, state.got
    snapshot_id = state.target[1] if state.target is not None else ""
    stale = got.stale = deps.stale_sources(state.kb) if deps.stale_sources is not None else {}
    now = deps.clock() if rules and stale and deps.max_stale_s is not None else None
    revisions = deps.revisions(snapshot_id)
    for h in state.hits:
        if _judged(state, h):
            continue
        why, p = _rejected(state, h, rules)
        if p is None:
            if rec is not None:
                rec.drop([h.id], why or "")
            continue
        if now is not None and beyond(stale.get(p.source_id), now, deps.max_stale_s):
            # Unverified for longer than the staleness policy allows: rejected, its source named to refresh.
            _count(got, "stale")
            got.tally.reject("stale", p.source_id)
            if rec is not None:
                rec.drop([h.id], "stale")
            continue
        got.tally.accept(p.source_id)
        got.dense_ok = got.dense_ok or h.score >= deps.min_score or not rules
        got.candidates.append(_candidate(h, p, snapshot_id, revisions.get(p.source_id), state))
    state.filtered = True
    if stale:  # the source could not be verified lately: its last good content, labelled with when
        got.candidates = [label_stale(c, stale.get(c.evidence.source_id)) for c in got.candidates]
    return state


def _rejected(state: QuestionState, h: ScoredHit, rules: bool) -> tuple[str | None, PointPayload | None]:
    """(why a readable hit is not admitted: low_score, bad_payload, counted; None), or (None, its payload)."""
    got = state.got
    # Admission: dense similarity over the floor, or a place in the lexical ranking (an exact identifier the
    # dense side ranks low). Order: the engine's fused rank, never the dense score.
    if rules and h.score < state.deps.min_score and h.lexical_rank is None:
        _count(got, "low_score")
        got.tally.reject("low_score", h.payload.get("source_id"))
        return "low_score", None
    try:
        return None, PointPayload.from_dict(h.payload)
    except PayloadError:
        _count(got, "bad_payload")  # not a point the builder wrote: nothing to cite it by
        return "bad_payload", None


def _candidate(h: ScoredHit, p: PointPayload, snapshot_id: str, revision: str | None,
               state: QuestionState) -> Candidate:
    rank_score = h.fused if h.fused is not None else h.score
    # evidence.score stays the dense cosine (what callers see); Candidate.score orders the pool
    candidate = replace(Candidate.from_point(h.id, h.score, p, snapshot_id, revision=revision), score=rank_score)
    status: Any = state.statuses.get(h.id) if state.statuses is not None else None
    if isinstance(ordinal := getattr(status, "ordinal", None), int):
        candidate = replace(candidate, ordinal=ordinal)  # the registry's: consecutive now, not when written
    if getattr(status, "pending_deletion", False):  # the deletion guard holds its document's deletion
        candidate = replace(candidate, evidence=replace(candidate.evidence, pending_deletion=True))
    return candidate


def run(state: QuestionState, rec: StageTrace | None) -> QuestionState:
    return _admit(state, rec, rules=True)


def off(state: QuestionState, rec: StageTrace | None) -> QuestionState:
    """Switched off: candidates built from every readable hit with a valid payload, no floor, no staleness."""
    return _admit(state, rec, rules=False)


def ids(state: QuestionState) -> list[str]:
    """Before: the hits the recheck let through; after: the candidates, in the engine's order."""
    if state.filtered:
        return state.candidate_ids()
    return [h.id for h in state.hits if h.id not in state.verdicts]


STAGE: StageSpec[QuestionState] = StageSpec("filter", "question", run, off, ids=ids,
                                            what="dense score floor, staleness policy; candidates built")
