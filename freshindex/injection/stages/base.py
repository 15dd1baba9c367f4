"""What every stage of the query line shares: its declaration, the per-query trace and the signals record.

A stage is a module of :mod:`injection.stages` with one :class:`StageSpec`:
its name, the part of the line it belongs to (``question``: from the
question to admitted evidence and the refusal; ``packet``: from admitted
evidence to the rendered block; ``answer``: the finished packet), and a
``run(state, rec)`` that takes the part's state and returns it.  A stage
that can be switched off by configuration (``context.disabled_stages``)
names what runs instead (``off``: a pass-through, or the stage's work
without its rules where later stages need its output's shape).

:class:`Trace` is what an evaluator reads to say which stage lost a chunk:
per stage, the chunk ids in and out, the ids dropped with the reason, ranks
before and after, what was grouped into what, and notes (the refusal's
reason and signals, the budget).  It costs nothing unless asked for: with
no trace a stage's ``rec`` is None.

:class:`SignalBoard` is the record stages write refusal signals into; the
refuse stage reads it.  What this module does not do: run stages (the line
does, :mod:`injection.stages.line`) or decide what a signal means (the
refusal policy weighs them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["SignalBoard", "StageSpec", "StageTrace", "Trace"]

S = TypeVar("S")


@dataclass
class StageTrace:
    """What one stage did to one query.

    ``ran``: False when the stage was switched off (its ``off`` ran).  ``before``/``after``: the chunk ids
    that went in and came out, in order.  ``dropped``: chunk id -> why it went (the reasons of
    ``ContextPacket.withheld``, plus ``joined:<id>`` for a chunk folded into its neighbour).
    ``ranks``: chunk id -> (position before, position after), both 0-based.  ``grouped_into``: chunk id ->
    the chunk id of the item that now cites it (a near-copy, a mirror).  ``notes``: anything else the stage
    says (the refusal's ``reason`` and ``signals``, the budget's ``tokens``).
    """

    name: str
    ran: bool = True
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    dropped: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    grouped_into: dict[str, str] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def drop(self, chunk_ids: Iterable[str], why: str) -> None:
        for chunk_id in chunk_ids:
            self.dropped.setdefault(chunk_id, why)


@dataclass
class Trace:
    """One query's path through the line: a :class:`StageTrace` per stage reached, in order.

    Pass one to ``InjectionClient.retrieve(trace=...)``; it is filled in place.  Stages after the line
    stopped (no snapshot, a refusal) are absent.  What it does not hold: chunk texts or the principal.
    """

    stages: list[StageTrace] = field(default_factory=list)

    def open(self, name: str, *, ran: bool = True) -> StageTrace:
        rec = StageTrace(name, ran)
        self.stages.append(rec)
        return rec

    def stage(self, name: str) -> StageTrace | None:
        """The record of stage ``name`` (None when the query did not reach it)."""
        return next((s for s in self.stages if s.name == name), None)

    def lost(self, chunk_id: str) -> tuple[str, str] | None:
        """(stage, reason) of the first stage that dropped ``chunk_id``; None when no stage did."""
        for s in self.stages:
            if chunk_id in s.dropped:
                return s.name, s.dropped[chunk_id]
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"stages": [dict(vars(s)) for s in self.stages]}


@dataclass
class SignalBoard:
    """Refusal signals of one query, written by any stage, read by the refuse stage.

    ``evidence``: the calibrated signals of the admitted evidence (``injection.refusal.Signals``, set once
    by whichever stage needs them first: the coverage reranker reads their term weights).  ``extra``:
    signal name -> value, added by any stage (a reranker's top score, ...); the refusal policy's
    ``extra_weights`` weigh them.  What it does not do: decide; the refuse stage does.
    """

    evidence: Any = None
    extra: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.extra[name] = float(value)


@dataclass(frozen=True)
class StageSpec(Generic[S]):
    """One stage: its name, its part of the line, what it does, and what runs when it is switched off.

    ``off`` None: the stage cannot be switched off (recall and the access recheck, the budget and the
    render: without them there is no packet, or a packet the caller may not read).
    """

    name: str
    part: str
    run: Callable[[S, StageTrace | None], S]
    off: Callable[[S, StageTrace | None], S] | None = None
    ids: Callable[[S], Iterable[str]] | None = None
    what: str = ""

    @property
    def switchable(self) -> bool:
        return self.off is not None


def passthrough(state: S, _rec: StageTrace | None) -> S:
    """What a switched-off stage that changes nothing runs."""
    return state


def ranks(before: Iterable[str], after: Iterable[str]) -> dict[str, tuple[int | None, int | None]]:
    """chunk id -> (position in ``before``, position in ``after``); None where absent."""
    was = {c: i for i, c in enumerate(before)}
    now = {c: i for i, c in enumerate(after)}
    return {c: (was.get(c), now.get(c)) for c in {**was, **now}}


def as_mapping(signals: Any) -> Mapping[str, Any]:
    """A refusal signals record as plain data for a trace note (None: empty)."""
    return signals.as_dict() if signals is not None and hasattr(signals, "as_dict") else {}
