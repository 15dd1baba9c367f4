"""Webhook deliveries and sync tickets: replay detection and coalescing, in the registry.

A delivery is recorded and joined to its source's one ``queued`` ticket (or
opens it) in one transaction, so a refused replay changes nothing and two
concurrent events never open two tickets (the source row is locked first,
as :meth:`registry.runs.RunsStore.open_or_join_run` does).  Dispatchers in
several processes may claim tickets: a claim is a conditional update, so one
ticket is dispatched once.

A delivery is remembered by its delivery id and, when the intake gives one,
by the digest of what its signature covers (a row ``sha256:<hex>`` beside
the id's row, in the same table): the sender's id header is not signed, so
a captured body sent again under a fresh id is refused by its digest
(:class:`ReplayedBody`).  Both are forgotten ``replay_window_s`` after they
were received (at the next use of the key, or when pruned).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, insert, select, tuple_, update
from sqlalchemy.orm import Session

from freshindex.core.errors import NotFoundError, PermanentError
from freshindex.registry.base import _Base
from freshindex.registry.db import affected_rows
from freshindex.registry.schema import Source, SyncTicket, WebhookDelivery, utcnow

#: A ticket naming more paths than this becomes a full listing (paths=None): the
#: union must stay a small JSON value, and a listing diff is cheap anyway.
MAX_TICKET_PATHS = 10_000

QUEUED, DISPATCHED, DONE, FAILED = "queued", "dispatched", "done", "failed"


#: How a signed-content digest is kept in ``webhook_deliveries.delivery_id``; the intake refuses delivery id
#: headers that start with it, so a sender's id can never stand for (or block) a digest.
DIGEST_PREFIX = "sha256:"


class DuplicateDelivery(PermanentError):
    """This delivery id was already received for this source (a replay)."""


class ReplayedBody(DuplicateDelivery):
    """What this delivery's signature covers was already received for this source, under another delivery id."""


@dataclass(frozen=True)
class DeliveryRequest:
    """One verified delivery to record: ``paths`` None asks for a full listing.

    ``digest`` (hex sha256 of what the signature covers) makes the same
    signed content a replay whatever its ``delivery_id``; None (API and SQS
    triggers, whose ids the service or SQS assigns) checks the id alone.
    """

    source_id: str
    delivery_id: str
    paths: list[str] | None
    digest: str | None = None

    def keys(self) -> list[tuple[str, str]]:
        """The ``(source_id, delivery_id)`` rows this delivery writes: its id, and its digest when given."""
        out = [(self.source_id, self.delivery_id)]
        if self.digest is not None:
            out.append((self.source_id, DIGEST_PREFIX + self.digest))
        return out


def _duplicate(d: DeliveryRequest, *, by_id: bool = True) -> DuplicateDelivery:
    if by_id:
        return DuplicateDelivery(f"delivery {d.delivery_id!r} of source {d.source_id!r} was already received")
    return ReplayedBody(f"the signed content of delivery {d.delivery_id!r} of source {d.source_id!r} was already "
                        "received under another delivery id")


@dataclass(frozen=True)
class TicketInfo:
    id: int
    source_id: str
    created_at: dt.datetime
    paths: tuple[str, ...] | None
    run_id: int | None
    status: str
    events: int
    dispatched_at: dt.datetime | None
    finished_at: dt.datetime | None
    detail: str | None


@dataclass(frozen=True)
class TicketJoin:
    """What one accepted delivery did: joined ticket ``ticket_id`` or opened it."""

    ticket_id: int
    joined: bool


def _ticket_info(t: SyncTicket) -> TicketInfo:
    return TicketInfo(
        id=t.id, source_id=t.source_id, created_at=t.created_at,
        paths=None if t.paths is None else tuple(t.paths), run_id=t.run_id, status=t.status, events=t.events,
        dispatched_at=t.dispatched_at, finished_at=t.finished_at, detail=t.detail,
    )


def _union(old: list[str] | None, new: list[str] | None) -> list[str] | None:
    if old is None or new is None:
        return None  # one event asked for a full listing: the sync lists everything
    merged = sorted(set(old) | set(new))
    return None if len(merged) > MAX_TICKET_PATHS else merged


class WebhookStore(_Base):
    """Record deliveries, coalesce them into tickets, claim and close tickets."""

    def accept_delivery(self, source_id: str, delivery_id: str, paths: list[str] | None, *,
                        now: dt.datetime | None = None, digest: str | None = None,
                        replay_window_s: float | None = None) -> TicketJoin:
        """Record ``delivery_id`` and join (or open) the source's queued ticket.

        ``paths`` None asks for a full listing.  Raises
        :class:`DuplicateDelivery` when the id was seen (within the pruning
        window), :class:`ReplayedBody` when ``digest`` was, and
        :class:`NotFoundError` for an unknown or removed source; either way
        nothing is written.
        """
        outcome = self.accept_deliveries([DeliveryRequest(source_id, delivery_id, paths, digest)], now=now,
                                         replay_window_s=replay_window_s)[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def accept_deliveries(self, batch: Sequence[DeliveryRequest], *, now: dt.datetime | None = None,
                          replay_window_s: float | None = None,
                          ) -> list[TicketJoin | DuplicateDelivery | NotFoundError]:
        """:meth:`accept_delivery` for many deliveries in one transaction (a group commit).

        One outcome per request, in order, exactly what the requests one after
        another would have given: a :class:`TicketJoin`, or the
        :class:`DuplicateDelivery` / :class:`NotFoundError` that request would
        have raised (a refused request writes nothing; the others still
        commit).  Why: a commit is most of an accepted webhook's cost, and a
        burst of concurrent deliveries then pays for one.  The replay rows are
        committed before this returns, so a restarted server still refuses
        them.  Any other error (the registry is unreachable) fails the batch.

        With ``replay_window_s``, an id or digest received longer ago than
        that (by ``now``) is forgotten when it comes again, even before the
        dispatcher prunes it.
        """
        now = now or utcnow()
        outcomes: list[TicketJoin | DuplicateDelivery | NotFoundError | None] = [None] * len(batch)
        with self.session() as s:
            self._write_lock(s)
            q = (select(Source.id).where(Source.id.in_(sorted({d.source_id for d in batch})),
                                         Source.removed_at.is_(None)).order_by(Source.id))
            q = self._for_update(q)  # sorted: two batches lock sources in one order
            known = set(s.scalars(q))
            claimed: dict[tuple[str, str], int] = {}  # every key of the batch's candidates -> its request
            candidates: list[int] = []
            for i, d in enumerate(batch):
                keys = d.keys()
                if d.source_id not in known:
                    outcomes[i] = NotFoundError(f"no source {d.source_id!r}")
                elif any(k in claimed for k in keys):  # an earlier request of this batch holds its id or digest
                    outcomes[i] = _duplicate(d, by_id=keys[0] in claimed)
                else:
                    claimed.update(dict.fromkeys(keys, i))
                    candidates.append(i)
            inserted = self._insert_deliveries(s, list(claimed), now)
            refused = [i for i in candidates if not all(k in inserted for k in batch[i].keys())]
            if refused and replay_window_s is not None:
                seen = [k for i in refused for k in batch[i].keys() if k not in inserted]
                if self._forget(s, seen, now - dt.timedelta(seconds=replay_window_s)):
                    inserted |= self._insert_deliveries(s, seen, now)
                    refused = [i for i in refused if not all(k in inserted for k in batch[i].keys())]
            if refused:  # rare (a replay): take back the rows a refused request did write, so it writes nothing
                self._forget(s, [k for i in refused for k in batch[i].keys() if k in inserted], None)
            for i in refused:
                outcomes[i] = _duplicate(batch[i], by_id=batch[i].keys()[0] not in inserted)
            accepted: dict[str, list[int]] = {}
            no = set(refused)
            for i in candidates:
                if i not in no:
                    accepted.setdefault(batch[i].source_id, []).append(i)
            for source_id, indices in accepted.items():
                for i, join in zip(indices, self._join_ticket(s, source_id, [batch[i].paths for i in indices], now),
                                   strict=True):
                    outcomes[i] = join
        assert all(o is not None for o in outcomes)
        return outcomes  # type: ignore[return-value]

    def _insert_deliveries(self, s: Session, keys: list[tuple[str, str]], now: dt.datetime) -> set[tuple[str, str]]:
        """Insert the (source, delivery id) rows not already there, in one statement; returns those inserted."""
        if not keys:
            return set()
        table = WebhookDelivery.__table__
        # Parameters, not literal VALUES: the statement is compiled once and cached (SQLAlchemy's
        # "insertmanyvalues" still sends one multi-row INSERT ... RETURNING per batch).
        stmt = (self._insert(table).on_conflict_do_nothing(index_elements=["source_id", "delivery_id"])
                .returning(table.c.source_id, table.c.delivery_id))
        rows = s.execute(stmt, [{"source_id": src, "delivery_id": did, "received_at": now} for src, did in keys])
        return {(row[0], row[1]) for row in rows}

    def _forget(self, s: Session, keys: list[tuple[str, str]], received_before: dt.datetime | None) -> int:
        """Delete these delivery rows (only those received before ``received_before``, when given)."""
        if not keys:
            return 0
        c = WebhookDelivery.__table__.c
        stmt = delete(WebhookDelivery).where(tuple_(c.source_id, c.delivery_id).in_(keys))
        if received_before is not None:
            stmt = stmt.where(c.received_at < received_before)
        return affected_rows(s.execute(stmt))

    def _join_ticket(self, s: Session, source_id: str, wanted: list[list[str] | None],
                     now: dt.datetime) -> list[TicketJoin]:
        """Join these accepted events, in order, to the source's queued ticket (opening it for the first).

        Core statements, not ORM objects: this runs once per accepted batch on the intake's hot path.
        """
        t = SyncTicket.__table__
        row = s.execute(
            select(t.c.id, t.c.paths).where(t.c.source_id == source_id, t.c.status == QUEUED)
            .order_by(t.c.id).limit(1)
        ).first()
        asked = [None if p is None else sorted(set(p)) for p in wanted]
        if row is None:
            paths = asked[0]
            if paths is not None and len(paths) > MAX_TICKET_PATHS:
                paths = None
            for more in asked[1:]:
                paths = _union(paths, more)
            ticket_id: int = s.execute(
                insert(t).values(source_id=source_id, created_at=now, paths=paths, status=QUEUED, events=len(asked))
                .returning(t.c.id)
            ).scalar_one()
            return [TicketJoin(ticket_id, i > 0) for i in range(len(asked))]
        paths = row.paths
        for more in asked:
            paths = _union(paths, more)
        s.execute(update(t).where(t.c.id == row.id).values(paths=paths, events=t.c.events + len(asked)))
        return [TicketJoin(row.id, True) for _ in asked]

    def claim_due_tickets(self, older_than: dt.datetime, *, limit: int = 100) -> list[TicketInfo]:
        """Mark dispatched, and return, queued tickets created before ``older_than``.

        A source with a ticket still ``dispatched`` is skipped: its queued
        ticket is the one follow-up, collecting every event that arrives
        while the sync runs.  What it does not do: notice a dispatched
        ticket whose dispatcher died (see :meth:`fail_stuck_tickets`).
        """
        with self.session() as s:
            self._write_lock(s)
            busy = select(SyncTicket.source_id).where(SyncTicket.status == DISPATCHED)
            paused = select(Source.id).where(Source.paused.is_(True))  # their tickets wait for a resume
            due = s.scalars(
                select(SyncTicket).where(SyncTicket.status == QUEUED, SyncTicket.created_at <= older_than,
                                         SyncTicket.source_id.not_in(busy), SyncTicket.source_id.not_in(paused))
                .order_by(SyncTicket.id).limit(limit)
            ).all()
            claimed: list[TicketInfo] = []
            now = utcnow()
            for t in due:
                done = affected_rows(s.execute(
                    update(SyncTicket).where(SyncTicket.id == t.id, SyncTicket.status == QUEUED)
                    .values(status=DISPATCHED, dispatched_at=now)
                ))
                if done:  # another dispatcher (PostgreSQL) may have taken it meanwhile
                    s.refresh(t)
                    claimed.append(_ticket_info(t))
            return claimed

    def bind_ticket_run(self, ticket_id: int, run_id: int) -> None:
        with self.session() as s:
            s.execute(update(SyncTicket).where(SyncTicket.id == ticket_id).values(run_id=run_id))

    def finish_ticket(self, ticket_id: int, *, run_id: int | None, failed: bool = False,
                      detail: str | None = None) -> None:
        """Close a dispatched ticket as done (its run's status says how the sync went) or failed."""
        with self.session() as s:
            s.execute(
                update(SyncTicket).where(SyncTicket.id == ticket_id)
                .values(status=FAILED if failed else DONE, run_id=run_id, finished_at=utcnow(), detail=detail)
            )

    def get_ticket(self, ticket_id: int) -> TicketInfo:
        with self.session() as s:
            t = s.get(SyncTicket, ticket_id)
            if t is None:
                raise NotFoundError(f"no sync ticket {ticket_id}")
            return _ticket_info(t)

    def sync_tickets(self, source_id: str | None = None, limit: int = 20) -> list[TicketInfo]:
        with self.session() as s:
            q = select(SyncTicket).order_by(SyncTicket.id.desc()).limit(limit)
            if source_id is not None:
                q = q.where(SyncTicket.source_id == source_id)
            return [_ticket_info(t) for t in s.scalars(q)]

    def fail_stuck_tickets(self, dispatched_before: dt.datetime) -> int:
        """Close tickets dispatched before the cutoff and never finished (their dispatcher died)."""
        with self.session() as s:
            return affected_rows(s.execute(
                update(SyncTicket).where(SyncTicket.status == DISPATCHED, SyncTicket.dispatched_at < dispatched_before)
                .values(status=FAILED, finished_at=utcnow(), detail="dispatcher lost")
            ))

    def prune_deliveries(self, received_before: dt.datetime) -> int:
        """Forget delivery ids older than the replay window; returns how many."""
        with self.session() as s:
            return affected_rows(s.execute(delete(WebhookDelivery).where(WebhookDelivery.received_at < received_before)))


__all__ = ["DIGEST_PREFIX", "MAX_TICKET_PATHS", "DeliveryRequest", "DuplicateDelivery", "ReplayedBody", "TicketInfo",
           "TicketJoin", "WebhookStore"]
