"""The refusal audit's rows on a real registry (SQLite and PostgreSQL): bounds, retention, grouping by topic."""

from __future__ import annotations

import datetime as dt

from freshindex.registry import Registry
from freshindex.registry.refusals import MAX_SOURCES, MAX_TERMS, NO_SOURCE, RefusalRecord, refusal_topics

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


def _rec(kb: str, reason: str, terms: tuple[str, ...], missing: tuple[str, ...], sources: tuple[str, ...],
         at: dt.datetime, question: str | None = None) -> RefusalRecord:
    return RefusalRecord(kb=kb, reason=reason, terms=terms, missing=missing, sources=sources, at=at,
                         question=question).bounded(200)


def test_refusals_of_two_subjects_group_by_term_and_by_source(registry: Registry) -> None:
    # Given refusals of two subjects (SAML sign-on: 3, nothing readable came back for two of them;
    # kubernetes: 2, searched the ops source), one of another knowledge base, one before the window
    saml = [_rec("docs", "no_evidence", ("saml", "okta"), ("saml", "okta"), (), T0 + dt.timedelta(minutes=i),
                 question=f"saml question {i}") for i in range(2)]
    saml.append(_rec("docs", "key_terms_missing", ("saml", "login"), ("saml",), ("auth",), T0 + dt.timedelta(minutes=5)))
    kube = [_rec("docs", "key_terms_missing", ("kubernete", "replica"), ("kubernete",), ("ops",),
                 T0 + dt.timedelta(minutes=10 + i)) for i in range(2)]
    for r in [*saml, *kube, _rec("other", "no_evidence", ("saml",), ("saml",), (), T0),
              _rec("docs", "no_evidence", ("helm",), ("helm",), (), T0 - dt.timedelta(days=1))]:
        registry.record_refusal(r)
    # When the window's rows are read (newest first) and grouped
    rows = registry.refusals("docs", since=T0)
    assert [r.at for r in rows] == sorted((r.at for r in rows), reverse=True) and len(rows) == 5
    topics = refusal_topics(rows)
    # Then the subject missing most often leads, with its counts, reasons, sources and newest stored question
    assert topics["refusals"] == 5 and topics["with_question"] == 2
    assert topics["reasons"] == {"key_terms_missing": 3, "no_evidence": 2}
    first, second = topics["terms"][:2]
    assert first == {"term": "saml", "refusals": 3, "missing": 3, "reasons": {"no_evidence": 2, "key_terms_missing": 1},
                     "sources": [NO_SOURCE, "auth"], "example": "saml question 1"}
    assert (second["term"], second["refusals"], second["missing"], second["sources"], second["example"]) == \
        ("kubernete", 2, 2, ["ops"], None)
    # a term the evidence held comes after every missing one, whatever its count
    assert [(t["term"], t["missing"]) for t in topics["terms"]] == \
        [("saml", 3), ("kubernete", 2), ("okta", 2), ("replica", 0), ("login", 0)]
    # and by source: nothing readable came back for 2, ops 2, auth 1; each with its most refused term first
    by_source = {s["source"]: (s["refusals"], s["terms"][0]) for s in topics["sources"]}
    assert by_source == {NO_SOURCE: (2, "okta"), "ops": (2, "kubernete"), "auth": (1, "login")}
    assert [s["source"] for s in topics["sources"]] == [NO_SOURCE, "ops", "auth"]
    # and --limit keeps the first groups, saying how many more there are
    small = refusal_topics(rows, limit=1)
    assert [t["term"] for t in small["terms"]] == ["saml"] and small["more_terms"] == 4 and small["more_sources"] == 2


def test_a_record_is_bounded_before_it_is_written(registry: Registry) -> None:
    # Given a refusal with too many and too long terms and sources, and a long question
    terms = tuple(f"term{i}" + "x" * 100 for i in range(40))
    sources = tuple(f"src{i}" for i in range(40))
    record = RefusalRecord(kb="docs", reason="key_terms_missing", terms=terms, missing=(terms[0], "not-a-term"),
                           sources=sources, question="q" * 10_000, at=T0).bounded(300)
    registry.record_refusal(record)
    [back] = registry.refusals("docs")
    # Then the row holds at most the bounds, a missing term only if it is a kept term
    assert len(back.terms) == MAX_TERMS and all(len(t) == 64 for t in back.terms)
    assert back.missing == (terms[0][:64],)
    assert back.sources == sources[:MAX_SOURCES] and back.question == "q" * 300 and back.at == T0


def test_rows_past_the_retention_are_deleted_when_the_next_of_their_kb_is_written(registry: Registry) -> None:
    retention = dt.timedelta(days=30)
    registry.record_refusal(_rec("docs", "no_evidence", ("old",), ("old",), (), T0))
    registry.record_refusal(_rec("other", "no_evidence", ("old",), ("old",), (), T0))
    # When a refusal is written within the interval, nothing is deleted
    now = T0 + retention - dt.timedelta(seconds=1)
    registry.record_refusal(_rec("docs", "no_evidence", ("mid",), ("mid",), (), now), keep_since=now - retention)
    assert [r.terms for r in registry.refusals("docs")] == [("mid",), ("old",)]
    # When the clock is past the interval, the next write deletes its knowledge base's older rows
    now = T0 + retention + dt.timedelta(seconds=1)
    registry.record_refusal(_rec("docs", "no_evidence", ("new",), ("new",), (), now), keep_since=now - retention)
    assert [r.terms for r in registry.refusals("docs")] == [("new",), ("mid",)]
    # and another knowledge base's rows wait for its own next write
    assert [r.terms for r in registry.refusals("other")] == [("old",)]
