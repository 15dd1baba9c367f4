"""The packet part of the line: its state, from admitted candidates to a numbered, fitted, rendered block.

:class:`PacketState` is the typed input and output of the pool, rerank,
group, select, fit and render stages (:func:`injection.context.compose`
runs them).  ``order`` is the current ranked list and ``relevance`` its
scores (the fusion score, or the last reranker's); ``counts`` the reasons
every candidate went (merged with the caller's own); ``insufficient`` the
reason the packet is insufficient, which ends the line.  What it does not
do: decide access or refusal (the question part has), or run a stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from freshindex.injection.assemble import Candidate, Reranker, SessionNumbers
from freshindex.injection.budget import ContextPolicy, QueryType, Tokenizer
from freshindex.injection.types import Evidence

__all__ = ["PacketState"]


@dataclass
class PacketState:
    """What the packet stages read and write (see the module docstring)."""

    question: str
    kb: str
    snapshot_id: str
    qtype: QueryType
    policy: ContextPolicy
    counter: Tokenizer
    numbers: SessionNumbers
    order: list[Candidate]
    counts: dict[str, int]
    rerankers: tuple[Reranker, ...] = ()
    deterministic: bool = False
    kb_version: str | None = None
    relevance: list[float] = field(default_factory=list)
    joined: int = 0
    mmr: bool = False
    tokens: int = 0  # the block's token budget (fit)
    evidence: list[Evidence] = field(default_factory=list)  # fitted, then numbered (render)
    rendered: str = ""
    insufficient: str | None = None

    @property
    def stopped(self) -> bool:
        return self.insufficient is not None

    def order_ids(self) -> list[str]:
        return [c.chunk_id for c in self.order]

    def evidence_ids(self) -> list[str]:
        return [e.chunk_id for e in self.evidence]
