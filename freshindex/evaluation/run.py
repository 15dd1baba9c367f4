"""Running a golden set against a knowledge base: each question asked through the query line, scored, diagnosed.

:func:`evaluate` is the one entry point (the CLI's ``freshindex eval``, a scheduled evaluation after a swap,
a benchmark): it asks every question of a :class:`~evaluation.golden.GoldenSet` through the injection client
of the given services, as the question's principal, on the snapshot it names (``as_of``: a snapshot id or a
time; else ``snapshot``; else the one the alias serves), with a :class:`~injection.stages.Trace`; scores the
packet (:mod:`core.scoring`) and diagnoses a miss (:mod:`evaluation.diagnose`).  :func:`ablate` runs the
same set once per row of :data:`ABLATIONS` (stages switched off).

The queries are real queries: they go through the client's observer (its metrics on the evaluation's own
services, denials in the audit trail).  What it does not do: write anything but what a query writes, gate
(the :class:`~evaluation.report.Report` does), or check an answer an LLM wrote (only the evidence).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from freshindex.acl import Principal
from freshindex.core.errors import ConfigError, NotFoundError
from freshindex.core.scoring import score_items
from freshindex.evaluation.diagnose import Diagnosis, Snapshot, diagnose
from freshindex.evaluation.golden import GoldenQuestion, GoldenSet, Thresholds
from freshindex.evaluation.report import Ablation, QuestionResult, Report
from freshindex.injection.stages import Trace

__all__ = ["ABLATIONS", "ablate", "evaluate"]

#: The ablation rows: (name, stages switched off), each adding one part of the line to the row before.
ABLATIONS: tuple[tuple[str, frozenset[str]], ...] = (
    ("dense+lexical", frozenset({"filter", "refuse", "rerank", "group"})),
    ("+filters", frozenset({"refuse", "rerank", "group"})),
    ("+rerank", frozenset({"refuse", "group"})),
    ("+group", frozenset({"refuse"})),
    ("+refusal (all)", frozenset()),
)


class _PinnedStore:
    """A store whose alias of one knowledge base points at one collection (an evaluated snapshot); the rest as is."""

    def __init__(self, store: Any, alias: str, collection: str) -> None:
        self._store, self._alias, self._collection = store, alias, collection

    def get_alias(self, alias: str) -> str | None:
        return self._collection if alias == self._alias else self._store.get_alias(alias)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _snapshot_at(registry: Any, kb: str, as_of: str) -> str:
    """The snapshot id ``as_of`` names: a snapshot id, or (an ISO time) the one activated last by then."""
    try:
        return str(registry.get_snapshot(as_of).id)
    except NotFoundError:
        pass
    try:
        when = dt.datetime.fromisoformat(as_of.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"as_of {as_of!r} is neither a snapshot of {kb!r} nor an ISO time") from None
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    served = [s for s in registry.list_snapshots(kb) if s.activated_at is not None and s.activated_at <= when]
    if not served:
        raise ConfigError(f"no snapshot of {kb!r} was serving at {as_of}")
    return str(max(served, key=lambda s: s.activated_at).id)


class _Clients:
    """One injection client per (snapshot, stages switched off), built from the caller's services' parts."""

    def __init__(self, services: Any, kb: str) -> None:
        self.services, self.kb = services, kb
        #: The kb's documents by source, read once per evaluation when a miss is diagnosed.
        self.listing: dict[str, dict[str, Any]] = {}
        self._built: dict[tuple[str | None, frozenset[str] | None], Any] = {}

    def target(self, snapshot_id: str | None) -> tuple[str | None, str | None]:
        """(collection, snapshot id) evaluated: the named snapshot's, else the alias's (None, None: nothing)."""
        svc = self.services
        if snapshot_id is not None:
            return str(svc.registry.get_snapshot(snapshot_id).collection), snapshot_id
        collection = svc.store.get_alias(svc.naming.alias(self.kb))
        if collection is None:
            return None, None
        return collection, svc.naming.snapshot_of(collection) or collection

    def client(self, snapshot_id: str | None, disabled: frozenset[str] | None) -> Any:
        key = (snapshot_id, disabled)
        if key not in self._built:
            svc = self.services
            if snapshot_id is None and disabled is None:
                self._built[key] = svc.client
            else:
                settings = svc.settings
                if disabled is not None:
                    context = settings.context.model_copy(update={"disabled_stages": disabled})
                    settings = settings.model_copy(update={"context": context})
                store = svc.store
                if snapshot_id is not None:
                    store = _PinnedStore(store, svc.naming.alias(self.kb), self.target(snapshot_id)[0] or "")
                # The caller's registry, store and embedder, wired as its services wire a client.
                derived = type(svc)(settings, registry=svc.registry, store=store, embedder=svc.embedder,
                                    naming=svc.naming)
                self._built[key] = derived.client
        return self._built[key]


def _principal(q: GoldenQuestion) -> Principal:
    p = q.principal
    return Principal.of(p.get("id") or "anonymous", p.get("groups") or (), tenant=p.get("tenant"))


def _ask(clients: _Clients, q: GoldenQuestion, snapshot_id: str | None, disabled: frozenset[str] | None,
         limit: int) -> QuestionResult:
    """One question asked, scored and diagnosed."""
    principal = _principal(q)
    trace = Trace()
    packet = clients.client(snapshot_id, disabled).retrieve(q.question, kb=clients.kb, principal=principal,
                                                            limit=limit, trace=trace)
    exp = q.expected
    score = None
    if exp is not None and exp.key is not None:
        score = score_items(packet.evidence, exp.key, q.required_passage, page=exp.page, k=limit)
    collection, evaluated = clients.target(snapshot_id)
    svc = clients.services
    snap = Snapshot(svc.registry, svc.store, svc.embedder, clients.kb, collection, evaluated, clients.listing)
    found: Diagnosis = diagnose(snap, q, principal, packet, trace, score)
    return QuestionResult.of(q, found, packet, score, evaluated)


def evaluate(services: Any, golden: GoldenSet, kb: str, *, snapshot: str | None = None, limit: int = 5,
             disabled: Iterable[str] | None = None, thresholds: Thresholds | None = None) -> Report:
    """Every question of ``golden`` asked on ``kb`` (see the module docstring); the :class:`Report`.

    ``services``: a :class:`freshindex.services.Services` (its ``registry``, ``store``, ``embedder``,
    ``naming``, ``settings`` and ``client``).  ``disabled``: the query stages switched off (None: the
    settings' own).  ``thresholds``: gates over the set's own (each given one replaces the set's).
    """
    clients = _Clients(services, kb)
    off = frozenset(disabled) if disabled is not None else None
    results = []
    for q in golden.questions:
        at = _snapshot_at(services.registry, kb, q.as_of) if q.as_of else snapshot
        results.append(_ask(clients, q, at, off, limit))
    gates = golden.thresholds.merged(thresholds or Thresholds())
    return Report(kb=kb, golden=golden.name, limit=limit, results=tuple(results), thresholds=gates,
                  disabled=tuple(sorted(off)) if off is not None else None)


def ablate(services: Any, golden: GoldenSet, kb: str, *, snapshot: str | None = None, limit: int = 5,
           rows: Sequence[tuple[str, frozenset[str]]] = ABLATIONS,
           thresholds: Thresholds | None = None) -> Ablation:
    """The golden set run once per ablation row (stages switched off), side by side."""
    return Ablation(tuple((name, evaluate(services, golden, kb, snapshot=snapshot, limit=limit, disabled=off,
                                          thresholds=thresholds)) for name, off in rows))
