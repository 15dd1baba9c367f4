"""Query planning: a question becomes a few controlled sub-queries, fused before the access recheck.

A question that names exact identifiers (``QuerySet.select_related``,
``max_retries``, ``HttpResponse``, ``--no-input``, ``DJANGO_SETTINGS_MODULE``,
`` `quoted code` ``) is searched twice: as asked (hybrid, dense and lexical
fused by the engine, as without planning) and by its identifiers alone on the
lexical side, where the rest of the question's words cannot outvote them.
The two hit lists are fused by reciprocal rank fusion, the question as asked
weighted first, duplicates merged by chunk id.  A question without
identifiers is searched once, as asked, and its hits are passed through
untouched.

Every sub-query carries the same engine-side filter (the caller's
``query_filter(principal)``): planning changes what is searched for, never
who may read it, and every hit still goes through the registry recheck
after fusion.

What it does not do:

* a semantic sub-query of the question with its identifiers removed: the
  question as asked already embeds the whole sentence, a second embedding
  costs a model call, and its cosine is to another vector, so the dense
  floor (``min_score``) would mean two things in one pool;
* version filters: a mention such as "in 3.2" or "Django 4.0" stays in the
  text, since the point payload (:class:`core.payload.PointPayload`) has no
  software-version field to filter on (``doc_version`` counts revisions of a
  document, not releases of what it describes).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from freshindex.injection.types import SubQueryReport

if TYPE_CHECKING:
    from freshindex.vectorstore.base import ScoredHit

#: Sub-query modes: ``hybrid`` (the question as asked, dense and lexical fused by the engine), ``lexical``
#: (exact identifiers, only hits the lexical side ranked, in its order).
MODES = ("hybrid", "lexical")

#: The RRF constant of the fusion across sub-queries (the common 60: ranks, not scores, are fused).
RRF_K = 60
#: Weights of the sub-queries in the fusion: the question as asked first, so an identifier hit the question
#: also found rises, and one only the identifiers found joins the pool below the question's own best.
WEIGHTS = {"hybrid": 1.0, "lexical": 0.5}
#: At most this many identifiers go into the lexical sub-query (a question is short; a pasted log is not).
MAX_IDENTIFIERS = 8

# Identifier shapes, most specific first; each match is taken whole (a dotted name is one identifier).
_QUOTED = re.compile(r"`([^`\n]{1,80})`")
_CALL = re.compile(r"\b([A-Za-z_][\w.]*)\(\)")
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w(])")
_SNAKE = re.compile(r"(?<![\w.])(_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_*)(?![\w.])")
_CAMEL = re.compile(r"(?<![\w.])([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[a-z]+(?:[A-Z][a-z0-9]*)+)(?![\w.])")
#: Dotted abbreviations that are prose, not names (every part one letter: "e.g", "i.e").
_ABBREVIATION = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")
_VERSION = re.compile(r"\b(?:v(?:ersion)?\s*)?\d+(?:\.\d+){1,3}\b", re.IGNORECASE)


@dataclass(frozen=True)
class SubQuery:
    """One search of a plan: its text and how it is searched (one of :data:`MODES`)."""

    text: str
    mode: str

    @property
    def weight(self) -> float:
        return WEIGHTS[self.mode]


@dataclass(frozen=True)
class QueryPlan:
    """The sub-queries of one question, the question as asked first (always there).

    ``versions`` are the version mentions of the question: kept in the text,
    reported, not filtered on (no payload field holds a release).
    """

    question: str
    subqueries: tuple[SubQuery, ...]
    identifiers: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()


def identifiers(question: str) -> tuple[str, ...]:
    """The exact identifiers a question names, in order of appearance, at most :data:`MAX_IDENTIFIERS`."""
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []

    def add(m: re.Match[str], group: int = 1) -> None:
        start, end = m.span(group)
        if any(s < end and start < e for s, e in taken):
            return  # inside an identifier already taken (a dotted name's snake_case part)
        text = m.group(group).strip()
        if not text or _ABBREVIATION.match(text):
            return
        taken.append((start, end))
        found.append((start, text))

    for m in _QUOTED.finditer(question):
        add(m)
    for pattern in (_CALL, _FLAG, _DOTTED, _SNAKE, _CAMEL):
        for m in pattern.finditer(question):
            add(m)
    out = list(dict.fromkeys(text for _start, text in sorted(found)))
    return tuple(out[:MAX_IDENTIFIERS])


def plan(question: str, *, enabled: bool = True) -> QueryPlan:
    """The sub-queries for ``question``: as asked (hybrid), and its identifiers alone (lexical) when it names any.

    ``enabled`` False (the ``context.query_planning`` setting off) plans the question as asked only.
    """
    versions = tuple(m.group(0) for m in _VERSION.finditer(question))
    subqueries = [SubQuery(question, "hybrid")]
    names = identifiers(question) if enabled else ()
    if names:
        subqueries.append(SubQuery(" ".join(names), "lexical"))
    return QueryPlan(question, tuple(subqueries), names, versions)


def run(store: Any, collection: str, vector: Sequence[float], query: QueryPlan, *, limit: int,
        flt: Any) -> tuple[list[ScoredHit], tuple[tuple[str, ...], ...]]:
    """Search every sub-query of ``query`` on ``collection`` under the same filter ``flt``; fuse.

    Returns the fused hits and, per sub-query, the ids of its hits (for :func:`report`).

    The lexical sub-query is one hybrid search (the question's vector, the
    identifiers' text: the store has no lexical-only query) of which only the
    hits the lexical side ranked are kept, in its order: the engine filter
    applies to both of its sides.  Errors of the store propagate (the caller
    resolves the alias again on :class:`core.errors.NotFoundError`).
    """
    lists: list[tuple[SubQuery, list[ScoredHit]]] = []
    for sub in query.subqueries:
        if sub.mode == "hybrid":
            hits = store.search(collection, vector, limit=limit, flt=flt, text=sub.text)
        else:
            found = store.search(collection, vector, limit=limit, flt=flt, text=sub.text)
            hits = sorted((h for h in found if h.lexical_rank is not None), key=lambda h: (h.lexical_rank, h.id))
        lists.append((sub, hits))
    ids = tuple(tuple(h.id for h in hits) for _sub, hits in lists)
    if len(lists) == 1:  # the question as asked alone: its hits as the engine ranked them
        return lists[0][1], ids
    return fuse(lists), ids


def report(query: QueryPlan, ids: Sequence[Sequence[str]], readable: set[str]) -> tuple[SubQueryReport, ...]:
    """Each sub-query with the count of its hits the caller may read (after the recheck, as ``candidates``
    counts): a hit the recheck denies counts nowhere, so denied and absent answer the same."""
    if not ids:  # nothing was searched (no snapshot)
        return ()
    return tuple(SubQueryReport(sub.text, sub.mode, sum(1 for i in found if i in readable))
                 for sub, found in zip(query.subqueries, ids, strict=True))


def fuse(lists: Sequence[tuple[SubQuery, Sequence[ScoredHit]]]) -> list[ScoredHit]:
    """Weighted reciprocal rank fusion of the sub-queries' hit lists, one hit per chunk id.

    A hit keeps the fields of the first list that has it (the question as
    asked comes first: its dense score, BM25 score and lexical rank, which
    the refusal signals read); ``fused`` becomes the plan's fusion score.
    A hit only a lexical sub-query found keeps its lexical rank there (it is
    an exact-identifier match: admitted like any lexically ranked hit) but no
    BM25 score, which was computed for another query than the question.
    """
    score: dict[str, float] = {}
    first: dict[str, ScoredHit] = {}
    for sub, hits in lists:
        for rank, h in enumerate(hits, start=1):
            score[h.id] = score.get(h.id, 0.0) + sub.weight / (RRF_K + rank)
            if h.id not in first:
                first[h.id] = h if sub.mode == "hybrid" else replace(h, lexical=None)
    order = sorted(first, key=lambda pid: (-score[pid], pid))
    return [replace(first[pid], fused=score[pid]) for pid in order]
