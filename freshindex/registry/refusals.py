"""The refusal audit: which subjects get *insufficient evidence*, and from which sources.

The query path records one :class:`RefusalRecord` per insufficient-evidence
packet (``query_refusals``): knowledge base, time, snapshot, reason, the
question's key terms and those the evidence lacked, the sources searched,
and the question text only where the audit settings allow it.
:func:`refusal_topics` groups a window of them by key term (terms the
evidence lacked first) and by source searched, which is what
``freshindex audit refusals`` prints: a term refused again and again names a
subject without a source, a failing sync or an ACL too narrow.

Sizes are bounded where a record is built (:meth:`RefusalRecord.bounded`):
at most :data:`MAX_TERMS` terms of :data:`MAX_TERM_CHARS`, :data:`MAX_SOURCES`
sources, a question cut to the caller's limit.  Old rows are deleted as new
ones of their knowledge base are written (``keep_since``).

What it does not do: say why a subject lacks a source (the reason and the
sources searched are the leads); group paraphrases (terms are the refusal's
lexical tokens, so "folder" and "directory" are two terms); or keep a
question when storing questions is off (nothing else in a row holds it
whole, though key terms are words of it).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, insert, select

from freshindex.registry.base import _Base
from freshindex.registry.schema import QueryRefusal, utcnow

#: Bounds of one row: terms kept (heaviest first), each term's length, sources kept, each source id's length.
MAX_TERMS = 12
MAX_TERM_CHARS = 64
MAX_SOURCES = 16
MAX_SOURCE_CHARS = 255
#: The group a refusal that searched no readable source falls in (nothing the caller may read came back).
NO_SOURCE = "(none)"


def _cut(values: Iterable[str], n: int, chars: int) -> list[str]:
    """The first ``n`` distinct non-empty values of ``values``, each cut to ``chars``."""
    out: list[str] = []
    for v in values:
        v = str(v)[:chars]
        if v and v not in out:
            out.append(v)
            if len(out) == n:
                break
    return out


@dataclass(frozen=True)
class RefusalRecord:
    """One insufficient-evidence answer, as the audit keeps it."""

    kb: str
    reason: str
    terms: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    snapshot_id: str | None = None
    question: str | None = None
    at: dt.datetime = field(default_factory=utcnow)

    def bounded(self, question_chars: int) -> RefusalRecord:
        """This record cut to the row's bounds; a missing term kept only if it is one of the kept terms."""
        terms = _cut(self.terms, MAX_TERMS, MAX_TERM_CHARS)
        missing = [t for t in _cut(self.missing, MAX_TERMS, MAX_TERM_CHARS) if t in terms]
        question = self.question[:question_chars] if self.question and question_chars > 0 else None
        return RefusalRecord(self.kb[:63], self.reason[:32], tuple(terms), tuple(missing),
                             tuple(_cut(self.sources, MAX_SOURCES, MAX_SOURCE_CHARS)),
                             self.snapshot_id[:128] if self.snapshot_id else None, question, self.at)


class RefusalStore(_Base):
    """Write and read ``query_refusals``."""

    def record_refusal(self, record: RefusalRecord, *, keep_since: dt.datetime | None = None) -> None:
        """Append ``record`` (bound it first: :meth:`RefusalRecord.bounded`); delete its knowledge base's rows
        older than ``keep_since`` in the same transaction."""
        with self.session() as s:  # Core statements: the query path pays for this write (no ORM unit of work)
            s.execute(insert(QueryRefusal).values(
                at=record.at, kb=record.kb, snapshot_id=record.snapshot_id, reason=record.reason,
                terms=list(record.terms), missing=list(record.missing), sources=list(record.sources),
                question=record.question))
            if keep_since is not None:
                s.execute(delete(QueryRefusal).where(QueryRefusal.kb == record.kb, QueryRefusal.at < keep_since)
                          .execution_options(synchronize_session=False))

    def refusals(self, kb: str, *, since: dt.datetime | None = None, limit: int = 10_000) -> list[RefusalRecord]:
        """The newest ``limit`` refusals of ``kb`` first, from ``since`` on."""
        with self.session() as s:
            q = select(QueryRefusal).where(QueryRefusal.kb == kb)
            if since is not None:
                q = q.where(QueryRefusal.at >= since)
            rows = s.scalars(q.order_by(QueryRefusal.at.desc(), QueryRefusal.id.desc()).limit(limit))
            return [RefusalRecord(kb=r.kb, reason=r.reason, terms=tuple(r.terms or ()),
                                  missing=tuple(r.missing or ()), sources=tuple(r.sources or ()),
                                  snapshot_id=r.snapshot_id, question=r.question, at=r.at) for r in rows]


@dataclass
class _Group:
    """One key term's or one source's refusals while they are counted."""

    name: str
    refusals: int = 0
    missing: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    other: Counter[str] = field(default_factory=Counter)  # a term's sources, a source's terms
    example: str | None = None

    def add(self, r: RefusalRecord, other: Iterable[str], missing: bool = False) -> None:
        self.refusals += 1
        self.missing += missing
        self.reasons[r.reason] += 1
        self.other.update(other)
        if self.example is None and r.question:  # records come newest first: the newest stored question
            self.example = r.question

    def as_dict(self, kind: str, other: str, top: int) -> dict[str, Any]:
        d: dict[str, Any] = {kind: self.name, "refusals": self.refusals}
        if kind == "term":
            d["missing"] = self.missing
        d["reasons"] = dict(sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        d[other] = [name for name, _ in sorted(self.other.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]
        d["example"] = self.example
        return d


def refusal_topics(records: Sequence[RefusalRecord], *, limit: int = 20, top: int = 5) -> dict[str, Any]:
    """``records`` (newest first) grouped by key term and by source searched, ``limit`` groups of each.

    Terms are ordered by how often the evidence lacked them, then by how
    often they were refused, then by name; sources by refusals, then name
    (:data:`NO_SOURCE` for refusals where nothing readable came back).  Each
    group has its reasons with counts, its ``top`` most frequent sources (a
    term's) or terms (a source's), and the newest stored question (None
    when none was stored).
    """
    terms: dict[str, _Group] = {}
    sources: dict[str, _Group] = {}
    reasons: Counter[str] = Counter()
    for r in records:
        reasons[r.reason] += 1
        searched = r.sources or (NO_SOURCE,)
        for t in r.terms:
            terms.setdefault(t, _Group(t)).add(r, searched, missing=t in r.missing)
        for src in searched:
            sources.setdefault(src, _Group(src)).add(r, r.terms)
    by_term = sorted(terms.values(), key=lambda g: (-g.missing, -g.refusals, g.name))
    by_source = sorted(sources.values(), key=lambda g: (-g.refusals, g.name))
    return {"refusals": len(records), "with_question": sum(1 for r in records if r.question),
            "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
            "terms": [g.as_dict("term", "sources", top) for g in by_term[:limit]],
            "sources": [g.as_dict("source", "terms", top) for g in by_source[:limit]],
            "more_terms": max(0, len(by_term) - limit), "more_sources": max(0, len(by_source) - limit)}


__all__ = ["MAX_SOURCES", "MAX_TERMS", "NO_SOURCE", "RefusalRecord", "RefusalStore", "refusal_topics"]
