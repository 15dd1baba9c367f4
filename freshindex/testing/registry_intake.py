"""The registry contract's intake and audit rows: webhook deliveries and tickets, and the refusal audit.

A batch of deliveries gets, per request, what each would have got alone.
Times are injected (``now=``, cut-offs), never slept through; each test
writes at its own fixed moment, so the sweeps that read every source
(``prune_deliveries``, ``claim_due_tickets``) see only its rows before it.
Checks, on whatever backend: a delivery id, or the same signed content under
another id, is refused and writes nothing, until the replay window has passed
or the ids were pruned; accepted deliveries coalesce into one queued ticket
whose paths are the union (a full listing wins); a claimed ticket is
dispatched once, a paused source's ticket waits, a ticket whose dispatcher
died is failed past its cut-off; refusals are bounded before they are
written, older rows go past the retention, and they group by topic.

What it does not check: signatures, the HTTP intake or its batching
(``tests/api``), or the dispatcher's timing.
"""

from __future__ import annotations

import datetime as dt

import pytest

from freshindex.core.errors import NotFoundError
from freshindex.core.webhooks import delivery_digest
from freshindex.registry import Registry
from freshindex.registry.refusals import MAX_SOURCES, MAX_TERMS, NO_SOURCE, RefusalRecord, refusal_topics
from freshindex.registry.webhooks import DeliveryRequest, DuplicateDelivery, ReplayedBody, TicketJoin
from freshindex.testing.registry_base import RegistrySuite

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


def refusal(kb: str, reason: str, terms: tuple[str, ...], missing: tuple[str, ...], sources: tuple[str, ...],
            at: dt.datetime, question: str | None = None) -> RefusalRecord:
    return RefusalRecord(kb=kb, reason=reason, terms=terms, missing=missing, sources=sources, at=at,
                         question=question).bounded(200)


class WebhookContract(RegistrySuite):
    """Webhook deliveries (deduplicated by id and by signed content) and the sync tickets they coalesce into."""

    def test_deliveries_coalesce_into_one_ticket_and_a_repeated_id_writes_nothing(self, reg: Registry) -> None:
        sid = self.source(reg).id
        t0 = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
        first = reg.accept_delivery(sid, "d1", ["b.md"], now=t0)
        second = reg.accept_delivery(sid, "d2", ["a.md", "b.md"], now=t0)
        assert (first.joined, second.joined, second.ticket_id) == (False, True, first.ticket_id)
        ticket = reg.get_ticket(first.ticket_id)
        assert (ticket.paths, ticket.events, ticket.status) == (("a.md", "b.md"), 2, "queued")
        with pytest.raises(DuplicateDelivery):
            reg.accept_delivery(sid, "d1", ["c.md"], now=t0)
        assert reg.get_ticket(first.ticket_id).events == 2  # the replay wrote nothing
        reg.accept_delivery(sid, "d3", None, now=t0)  # a full listing wins over any paths
        assert reg.get_ticket(first.ticket_id).paths is None
        with pytest.raises(NotFoundError):
            reg.accept_delivery(self.fresh("nosuch"), "d1", None, now=t0)

    def test_the_same_signed_content_is_a_replay_until_the_window_has_passed(self, reg: Registry) -> None:
        sid = self.source(reg).id
        t0, window = dt.datetime(2002, 1, 1, tzinfo=dt.UTC), 3600.0
        digest = delivery_digest("github", b'{"after": "abc"}')
        reg.accept_delivery(sid, "gh-1", None, digest=digest, now=t0, replay_window_s=window)
        # Within the window the same content under a new id, and the same id, are refused
        within = t0 + dt.timedelta(seconds=window - 1)
        with pytest.raises(ReplayedBody):
            reg.accept_delivery(sid, "gh-2", None, digest=digest, now=within, replay_window_s=window)
        with pytest.raises(DuplicateDelivery):
            reg.accept_delivery(sid, "gh-1", None, now=within, replay_window_s=window)
        # One second past it, both are taken again
        past = t0 + dt.timedelta(seconds=window + 1)
        assert isinstance(reg.accept_delivery(sid, "gh-3", None, digest=digest, now=past, replay_window_s=window),
                          TicketJoin)
        assert isinstance(reg.accept_delivery(sid, "gh-1", None, now=past, replay_window_s=window), TicketJoin)

    def test_a_batch_refuses_a_digest_it_holds_twice_and_pruning_forgets_ids_and_digests(self, reg: Registry) -> None:
        sid = self.source(reg).id
        digest = delivery_digest("github", b"{}")
        t0 = dt.datetime(1971, 1, 1, tzinfo=dt.UTC)  # before any other test's deliveries: the prune sees only these
        out = reg.accept_deliveries([DeliveryRequest(sid, "a", None, digest), DeliveryRequest(sid, "b", None, digest),
                                     DeliveryRequest(sid, "c", ["x.md"])], now=t0)
        assert isinstance(out[0], TicketJoin) and isinstance(out[2], TicketJoin)
        assert isinstance(out[1], ReplayedBody)
        with pytest.raises(ReplayedBody):
            reg.accept_delivery(sid, "d", None, digest=digest, now=t0)
        # When the dispatcher prunes past the window, Then the digest is forgotten with the ids
        assert reg.prune_deliveries(t0 + dt.timedelta(seconds=1)) == 3  # a, its digest, c
        assert isinstance(reg.accept_delivery(sid, "b", None, digest=digest, now=t0), TicketJoin)

    def test_a_ticket_is_claimed_once_a_paused_source_waits_and_a_lost_dispatch_fails(self, reg: Registry) -> None:
        t0 = dt.datetime(1980, 1, 1, tzinfo=dt.UTC)
        live, paused = self.source(reg, "live").id, self.source(reg, "paused").id
        ticket = reg.accept_delivery(live, "d1", ["a.md"], now=t0).ticket_id
        waiting = reg.accept_delivery(paused, "d1", ["a.md"], now=t0).ticket_id
        reg.set_source_paused(paused, True)
        # Not yet due before its time; then claimed once, and the paused source's ticket waits
        mine = (ticket, waiting)
        assert [t for t in reg.claim_due_tickets(t0 - dt.timedelta(seconds=1)) if t.id in mine] == []
        claimed = [t.id for t in reg.claim_due_tickets(t0 + dt.timedelta(seconds=1)) if t.id in mine]
        assert claimed == [ticket] and reg.get_ticket(ticket).status == "dispatched"
        assert [t.id for t in reg.claim_due_tickets(t0 + dt.timedelta(seconds=1)) if t.id == ticket] == []
        # An event arriving while it runs opens the one follow-up ticket, which waits for the dispatched one
        follow = reg.accept_delivery(live, "d2", ["b.md"], now=t0).ticket_id
        assert follow != ticket
        assert follow not in {t.id for t in reg.claim_due_tickets(t0 + dt.timedelta(seconds=1))}
        # Past the cut-off a dispatched ticket nobody finished is failed; a finished one is left alone
        assert reg.get_ticket(waiting).status == "queued"
        reg.fail_stuck_tickets(utcnow_plus(60))
        stuck = reg.get_ticket(ticket)
        assert (stuck.status, stuck.detail) == ("failed", "dispatcher lost")
        assert [t.id for t in reg.sync_tickets(live)] == [follow, ticket]


    def test_a_batch_gives_each_delivery_what_it_would_get_alone(self, reg: Registry) -> None:
        # Given a source with one delivery already received, and a removed source
        sid, gone = self.source(reg).id, self.source(reg, "gone").id
        reg.remove_source(gone)
        before = reg.accept_delivery(sid, "seen", ["a.md"])
        # When one batch holds a new one, the seen one, the new one again, an unknown and a removed source, and more
        batch = [DeliveryRequest(sid, "n1", ["b.md"]), DeliveryRequest(sid, "seen", ["c.md"]),
                 DeliveryRequest(sid, "n1", ["d.md"]), DeliveryRequest(self.fresh("nobody"), "n2", None),
                 DeliveryRequest(gone, "n3", None), DeliveryRequest(sid, "n4", ["e.md"])]
        out = reg.accept_deliveries(batch)
        # Then each outcome is the one it would have had in sequence
        assert out[0] == TicketJoin(before.ticket_id, True) and out[5] == TicketJoin(before.ticket_id, True)
        assert isinstance(out[1], DuplicateDelivery) and isinstance(out[2], DuplicateDelivery)
        assert isinstance(out[3], NotFoundError) and isinstance(out[4], NotFoundError)
        # And only the accepted ones are on the ticket: refused ones wrote nothing
        ticket = reg.get_ticket(before.ticket_id)
        assert ticket.events == 3 and ticket.paths == ("a.md", "b.md", "e.md")
        assert [t.id for t in reg.sync_tickets(sid)] == [before.ticket_id]
        with pytest.raises(DuplicateDelivery):
            reg.accept_delivery(sid, "n4", None)

    def test_a_batch_opening_a_ticket_opens_one_and_a_full_listing_wins(self, reg: Registry) -> None:
        sid = self.source(reg).id
        out = reg.accept_deliveries([DeliveryRequest(sid, f"d{i}", None if i == 2 else [f"{i}.md"]) for i in range(4)])
        assert [o.joined for o in out if isinstance(o, TicketJoin)] == [False, True, True, True]
        assert len({o.ticket_id for o in out if isinstance(o, TicketJoin)}) == 1
        [ticket] = reg.sync_tickets(sid)
        assert ticket.events == 4 and ticket.paths is None  # one event asked for a full listing

def utcnow_plus(seconds: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


class RefusalContract(RegistrySuite):
    """The refusal audit's rows: bounds, retention, grouping by topic."""

    def test_refusals_of_two_subjects_group_by_term_and_by_source(self, reg: Registry) -> None:
        kb, other = self.fresh("docs"), self.fresh("other")
        # Given refusals of two subjects (SAML sign-on: 3, nothing readable came back for two of them;
        # kubernetes: 2, searched the ops source), one of another knowledge base, one before the window
        saml = [refusal(kb, "no_evidence", ("saml", "okta"), ("saml", "okta"), (), T0 + dt.timedelta(minutes=i),
                        question=f"saml question {i}") for i in range(2)]
        saml.append(refusal(kb, "key_terms_missing", ("saml", "login"), ("saml",), ("auth",),
                            T0 + dt.timedelta(minutes=5)))
        kube = [refusal(kb, "key_terms_missing", ("kubernete", "replica"), ("kubernete",), ("ops",),
                        T0 + dt.timedelta(minutes=10 + i)) for i in range(2)]
        for r in [*saml, *kube, refusal(other, "no_evidence", ("saml",), ("saml",), (), T0),
                  refusal(kb, "no_evidence", ("helm",), ("helm",), (), T0 - dt.timedelta(days=1))]:
            reg.record_refusal(r)
        # When the window's rows are read (newest first) and grouped
        rows = reg.refusals(kb, since=T0)
        assert [r.at for r in rows] == sorted((r.at for r in rows), reverse=True) and len(rows) == 5
        topics = refusal_topics(rows)
        # Then the subject missing most often leads, with its counts, reasons, sources and newest stored question
        assert topics["refusals"] == 5 and topics["with_question"] == 2
        assert topics["reasons"] == {"key_terms_missing": 3, "no_evidence": 2}
        first, second = topics["terms"][:2]
        assert first == {"term": "saml", "refusals": 3, "missing": 3,
                         "reasons": {"no_evidence": 2, "key_terms_missing": 1},
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
        assert [t["term"] for t in small["terms"]] == ["saml"] and small["more_terms"] == 4
        assert small["more_sources"] == 2

    def test_a_record_is_bounded_before_it_is_written(self, reg: Registry) -> None:
        kb = self.fresh("docs")
        # Given a refusal with too many and too long terms and sources, and a long question
        terms = tuple(f"term{i}" + "x" * 100 for i in range(40))
        sources = tuple(f"src{i}" for i in range(40))
        record = RefusalRecord(kb=kb, reason="key_terms_missing", terms=terms, missing=(terms[0], "not-a-term"),
                               sources=sources, question="q" * 10_000, at=T0).bounded(300)
        reg.record_refusal(record)
        [back] = reg.refusals(kb)
        # Then the row holds at most the bounds, a missing term only if it is a kept term
        assert len(back.terms) == MAX_TERMS and all(len(t) == 64 for t in back.terms)
        assert back.missing == (terms[0][:64],)
        assert back.sources == sources[:MAX_SOURCES] and back.question == "q" * 300 and back.at == T0

    def test_rows_past_the_retention_are_deleted_when_the_next_of_their_kb_is_written(self, reg: Registry) -> None:
        kb, other = self.fresh("docs"), self.fresh("other")
        retention = dt.timedelta(days=30)
        reg.record_refusal(refusal(kb, "no_evidence", ("old",), ("old",), (), T0))
        reg.record_refusal(refusal(other, "no_evidence", ("old",), ("old",), (), T0))
        # When a refusal is written within the interval, nothing is deleted
        now = T0 + retention - dt.timedelta(seconds=1)
        reg.record_refusal(refusal(kb, "no_evidence", ("mid",), ("mid",), (), now), keep_since=now - retention)
        assert [r.terms for r in reg.refusals(kb)] == [("mid",), ("old",)]
        # When the clock is past the interval, the next write deletes its knowledge base's older rows
        now = T0 + retention + dt.timedelta(seconds=1)
        reg.record_refusal(refusal(kb, "no_evidence", ("new",), ("new",), (), now), keep_since=now - retention)
        assert [r.terms for r in reg.refusals(kb)] == [("new",), ("mid",)]
        # and another knowledge base's rows wait for its own next write
        assert [r.terms for r in reg.refusals(other)] == [("old",)]


__all__ = ["RefusalContract", "WebhookContract"]
