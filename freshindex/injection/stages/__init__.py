"""The query line as declared stages: the one ordered list of what a question goes through.

:data:`STAGES` is that list.  Each entry is a module of this package with
one :class:`~injection.stages.base.StageSpec` (name, part, ``run``, what
runs when it is switched off), taking and returning its part's typed state:

- question part (:class:`~injection.stages.question.QuestionState`, run by
  ``InjectionClient``): ``recall`` (dense, lexical, sub-queries), ``recheck``
  (ACL, tenant, registry validity), ``filter`` (score floor, staleness),
  ``refuse`` (the calibrated refusal on the signal board);
- packet part (:class:`~injection.stages.packet.PacketState`, run by
  :func:`injection.context.compose`): ``pool``, ``rerank`` (a chain),
  ``group`` (near-copies, versions), ``select`` (quota, MMR, joins),
  ``fit`` (the budget), ``render`` (numbers, the final block);
- answer part (the finished packet): ``conflicts``.

The refusal sits before the packet part: it decides on the admitted
evidence in fused order, so a refused question costs no assembly, and the
reranker reads the term weights the refusal's signals computed.  A stage
is switched off by naming it in ``context.disabled_stages``; the ones
whose ``off`` is None (:data:`REQUIRED`) refuse to be (access, the budget,
the packet's shape).  :func:`run_part` runs one part in order, filling a
:class:`~injection.stages.base.Trace` when one is given.  What this
package does not do: measure time (the client's ``StageTimer`` does) or
choose a stage's order at run time (the order is this list).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from freshindex.core.errors import ConfigError
from freshindex.injection.stages import conflicts, fit, group, pool, recall, recheck, refuse, render, rerank
from freshindex.injection.stages import filter as filter_stage
from freshindex.injection.stages import select as select_stage
from freshindex.injection.stages.base import SignalBoard, StageSpec, StageTrace, Trace

__all__ = ["NAMES", "REQUIRED", "STAGES", "SignalBoard", "StageSpec", "StageTrace", "Trace", "disabled_of",
           "run_part"]

#: The query line, in order: the one place a stage is listed.
STAGES: tuple[StageSpec[Any], ...] = (
    recall.STAGE,
    recheck.STAGE,
    filter_stage.STAGE,
    refuse.STAGE,
    pool.STAGE,
    rerank.STAGE,
    group.STAGE,
    select_stage.STAGE,
    fit.STAGE,
    render.STAGE,
    conflicts.STAGE,
)

NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
#: Stages that cannot be switched off.
REQUIRED: frozenset[str] = frozenset(s.name for s in STAGES if not s.switchable)

S = TypeVar("S")


def disabled_of(names: Iterable[str]) -> frozenset[str]:
    """``names`` checked: each a stage of :data:`STAGES` that may be switched off (ConfigError otherwise)."""
    out = frozenset(names)
    unknown = sorted(out - set(NAMES))
    if unknown:
        raise ConfigError(f"unknown query stages {unknown}: one of {', '.join(NAMES)}")
    required = sorted(out & REQUIRED)
    if required:
        raise ConfigError(f"query stages {required} cannot be switched off; these can: "
                          f"{', '.join(n for n in NAMES if n not in REQUIRED)}")
    return out


def run_part(part: str, state: S, *, disabled: frozenset[str] = frozenset(), trace: Trace | None = None) -> S:
    """The stages of ``part`` run in :data:`STAGES` order on ``state`` until one stops the line."""
    for spec in STAGES:
        if spec.part != part:
            continue
        if getattr(state, "stopped", False):
            break
        on = spec.off is None or spec.name not in disabled
        rec = trace.open(spec.name, ran=on) if trace is not None else None
        if rec is not None and spec.ids is not None:
            rec.before = tuple(spec.ids(state))
        state = (spec.run if on else spec.off)(state, rec)  # type: ignore[misc]
        if rec is not None and spec.ids is not None:
            rec.after = tuple(spec.ids(state))
    return state
