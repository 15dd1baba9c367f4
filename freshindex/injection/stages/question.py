"""The question part of the line: its state, from a question to admitted evidence and the refusal's decision.

:class:`QuestionState` is the typed input and output of the recall,
recheck, filter and refuse stages; :class:`QuestionDeps` is what they ask
of the client that runs them (its store, embedder, registry recheck and
policies), so a stage never imports the client.  :class:`Admitted` and
:class:`Tally` are what the filter made of the hits and what the caller
may be told of them.  What it does not do: run a stage, or say anything
about assembly (the packet part, :mod:`injection.stages.packet`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from freshindex.acl import Principal
from freshindex.acl.access import DocumentStatus, SensitiveRecheck, Verdict
from freshindex.core.clock import as_utc
from freshindex.core.types import Embedder
from freshindex.injection.assemble import Candidate
from freshindex.injection.budget import ContextPolicy
from freshindex.injection.refusal import RefusalPolicy, RefusalReason, Signals
from freshindex.injection.stages.base import SignalBoard
from freshindex.injection.timing import StageTimer
from freshindex.injection.types import SubQueryReport
from freshindex.vectorstore.base import ScoredHit

__all__ = ["Admitted", "QuestionDeps", "QuestionState", "Recheck", "Tally", "beyond", "label_stale"]

#: chunk ids -> the registry's status of each chunk and its document; ids missing from the mapping are orphans.
Recheck = Callable[[Sequence[str]], Mapping[str, DocumentStatus]]

#: ((collection, snapshot id), fused hits, each sub-query's hit ids); None when the knowledge base serves nothing.
Found = tuple[tuple[str, str], list[ScoredHit], tuple[tuple[str, ...], ...]] | None


class QuestionDeps(Protocol):
    """What the question stages ask of the client that runs them."""

    embedder: Embedder
    planning: bool
    policy: ContextPolicy
    recheck: Recheck | None
    sensitive: SensitiveRecheck | None
    stale_sources: Callable[[str], Mapping[str, Any]] | None
    clock: Callable[[], dt.datetime]
    max_stale_s: float | None
    min_score: float

    def search_plan(self, state: QuestionState, vector: list[float]) -> Found: ...

    def revisions(self, snapshot_id: str) -> Mapping[str, str]: ...

    def evidence_signals_of(self, state: QuestionState) -> Signals: ...

    def refusal_policy(self, snapshot_id: str) -> RefusalPolicy: ...


class Tally:
    """One query's candidates the caller may read: accepted, rejected by reason, and their sources in rank order."""

    def __init__(self) -> None:
        self.candidates = self.accepted = 0
        self.rejected: dict[str, int] = {}
        self.flagged: dict[str, str] = {}  # source id -> expired / stale, first seen first
        self.readable_sources: list[str] = []  # distinct, in the engine's rank order
        self.accepted_sources: list[str] = []
        self.searched: tuple[SubQueryReport, ...] = ()  # the plan's sub-queries (text, mode, hits)

    @property
    def nearest(self) -> str | None:
        """The source of the best-ranked candidate the caller may read (the metric's ``source``)."""
        return self.readable_sources[0] if self.readable_sources else None

    def _seen(self, source_id: Any) -> str | None:
        self.candidates += 1
        if not source_id:
            return None
        sid = str(source_id)
        if sid not in self.readable_sources:
            self.readable_sources.append(sid)
        return sid

    def reject(self, why: str, source_id: Any) -> None:
        sid = self._seen(source_id)
        self.rejected[why] = self.rejected.get(why, 0) + 1
        if sid is not None and why in ("expired", "stale"):
            self.flagged.setdefault(sid, why)

    def accept(self, source_id: Any) -> None:
        sid = self._seen(source_id)
        self.accepted += 1
        if sid is not None and sid not in self.accepted_sources:
            self.accepted_sources.append(sid)

    def demote(self, n: int, why: str) -> None:
        """``n`` accepted candidates rejected after all (none cleared the dense floor)."""
        self.accepted -= n
        self.rejected[why] = self.rejected.get(why, 0) + n


@dataclass
class Admitted:
    """What the recheck and filter stages made of one query's hits."""

    candidates: list[Candidate] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # by reason, every reason (the public part is filtered)
    tally: Tally = field(default_factory=Tally)  # what the caller may be told: hits it may read
    denied: list[tuple[str, Verdict, DocumentStatus | None]] = field(default_factory=list)
    readable_ids: set[str] = field(default_factory=set)  # hits the principal may read now (before the floor)
    dense_ok: bool = False  # insufficient unless some admitted hit clears the dense floor
    stale: Mapping[str, Any] = field(default_factory=dict)  # source id -> freshness, for stale sources


@dataclass
class QuestionState:
    """The question part's state: each stage reads what the ones before it wrote.

    recall writes ``plan``, ``target`` (collection, snapshot id; None: nothing served, the line stops),
    ``hits`` and ``searched``; recheck writes ``statuses`` and ``verdicts`` (hit id -> why it may not be
    served); filter writes ``got``; refuse writes ``refused`` (reason, sentence) and the board's signals.
    ``signals_only``: the refuse stage computes the signals and decides nothing (refusal calibration).
    """

    question: str
    kb: str
    principal: Principal
    limit: int
    deps: QuestionDeps
    timer: StageTimer
    signals_only: bool = False
    plan: Any = None
    target: tuple[str, str] | None = None
    hits: list[ScoredHit] = field(default_factory=list)
    searched: tuple[tuple[str, ...], ...] = ()
    statuses: Mapping[str, DocumentStatus] | None = None
    verdicts: dict[str, str] = field(default_factory=dict)
    got: Admitted = field(default_factory=Admitted)
    board: SignalBoard = field(default_factory=SignalBoard)
    refused: tuple[RefusalReason, str] | None = None
    recalled: bool = False
    filtered: bool = False

    @property
    def stopped(self) -> bool:
        """Whether the line ends here: nothing served (after recall), or a refusal decided."""
        return (self.recalled and self.target is None) or self.refused is not None

    def candidate_ids(self) -> list[str]:
        return [c.chunk_id for c in self.got.candidates]

    def hit_ids(self) -> list[str]:
        return [h.id for h in self.hits]


def beyond(freshness: Any, now: dt.datetime, max_stale_s: float | None) -> bool:
    """Whether a stale source's last verification is older than ``max_stale_s`` (never verified: beyond)."""
    if freshness is None or max_stale_s is None:
        return False
    verified = getattr(freshness, "last_verified_at", None)
    if verified is None:
        return True
    return (now - as_utc(verified)).total_seconds() > max_stale_s


def label_stale(c: Candidate, freshness: Any) -> Candidate:
    """``c`` labelled with its stale source's last verification (unchanged when its source is not stale)."""
    if freshness is None:
        return c
    verified = getattr(freshness, "last_verified_at", None)
    evidence = replace(c.evidence, stale=True, verified_at=verified.isoformat() if verified is not None else None)
    return replace(c, evidence=evidence)
