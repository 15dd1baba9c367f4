"""Stage ``conflicts``: sources in the finished packet that disagree, both shown and labelled.

In and out: an :class:`AnswerState` (the packet the render stage made,
its dropped reasons already split into public and withheld); the packet
gains its ``conflicts``, a note inside the rendered fence and the reason
``conflicting`` (:func:`injection.conflicts.mark_conflicts`).  Switched
off, the packet is returned as is.  What it does not do: drop or reorder
evidence; an insufficient packet passes unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from freshindex.injection.conflicts import mark_conflicts
from freshindex.injection.stages.base import StageSpec, StageTrace, passthrough
from freshindex.injection.types import ContextPacket

__all__ = ["STAGE", "AnswerState", "run"]


@dataclass
class AnswerState:
    """The answer part's state: the finished packet."""

    packet: ContextPacket
    deterministic: bool = False
    stopped: bool = False

    def ids(self) -> list[str]:
        return [e.chunk_id for e in self.packet.evidence]


def run(state: AnswerState, rec: StageTrace | None) -> AnswerState:
    state.packet = mark_conflicts(state.packet, deterministic=state.deterministic)
    if rec is not None:
        rec.notes["conflicts"] = [c.subject for c in state.packet.conflicts]
    return state


STAGE: StageSpec[AnswerState] = StageSpec("conflicts", "answer", run, passthrough, ids=AnswerState.ids,
                                          what="sources that disagree: both shown, labelled")
