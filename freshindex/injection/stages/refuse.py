"""Stage ``refuse``: whether the admitted evidence supports an answer, read from the signals stages wrote.

In and out: a :class:`~injection.stages.question.QuestionState`.  Nothing
admitted, or no admitted hit over the dense floor: ``no_evidence``.  Else
the refusal signals of the admitted evidence (:mod:`injection.refusal`:
IDF-weighted coverage of the question's key terms, BM25 and dense tops,
names no permitted document mentions) go on the signal board, and the
refusal policy decides on them plus any signal another stage added to the
board (weighed by the policy's ``extra_weights``).  Writes ``refused``
(reason, sentence): the line then ends in an insufficient-evidence packet.
Switched off, nothing is refused here (assembly may still find nothing).
What it does not do: compose the refusal packet (the client does, with
its search report), or read the packet part's order (it decides on the
admitted evidence in the engine's fused order, before assembly, so a
refused question costs no assembly).
"""

from __future__ import annotations

from dataclasses import replace

from freshindex.injection.refusal import RefusalPolicy, RefusalReason
from freshindex.injection.refusal import decide as decide_refusal
from freshindex.injection.stages.base import StageSpec, StageTrace, as_mapping, passthrough
from freshindex.injection.stages.question import QuestionState

__all__ = ["STAGE", "run", "with_extra"]


def with_extra(policy: RefusalPolicy, extra: dict[str, float]) -> RefusalPolicy:
    """``policy`` with the board's extra signals folded into its bias (its ``extra_weights``; none: unchanged)."""
    if not policy.extra_weights or not extra:
        return policy
    return replace(policy, bias=policy.bias + sum(w * extra.get(name, 0.0) for name, w in policy.extra_weights))


def run(state: QuestionState, rec: StageTrace | None) -> QuestionState:
    got = state.got
    if not got.candidates or not got.dense_ok:
        if state.signals_only:
            return state
        if got.candidates:
            got.dropped["low_score"] = got.dropped.get("low_score", 0) + len(got.candidates)
            got.tally.demote(len(got.candidates), "low_score")
        state.refused = RefusalReason.NO_EVIDENCE, "no evidence above the relevance threshold"
        _note(state, rec)
        return state
    sig = state.board.evidence = state.deps.evidence_signals_of(state)
    if state.signals_only:
        return state
    snapshot_id = state.target[1] if state.target is not None else ""
    refused = decide_refusal(with_extra(state.deps.refusal_policy(snapshot_id), state.board.extra), sig)
    if refused is not None:
        got.dropped["refused"] = got.dropped.get("refused", 0) + len(got.candidates)
        state.refused = refused
    _note(state, rec)
    return state


def _note(state: QuestionState, rec: StageTrace | None) -> None:
    if rec is None:
        return
    rec.notes["reason"] = str(state.refused[0]) if state.refused is not None else None
    rec.notes["why"] = state.refused[1] if state.refused is not None else None
    rec.notes["signals"] = dict(as_mapping(state.board.evidence))
    rec.notes["extra"] = dict(state.board.extra)
    if state.refused is not None:
        rec.drop(state.candidate_ids(), "refused" if state.refused[0] is not RefusalReason.NO_EVIDENCE
                 else "low_score")


STAGE: StageSpec[QuestionState] = StageSpec("refuse", "question", run, passthrough, ids=QuestionState.candidate_ids,
                                            what="the calibrated refusal on the signal board")
