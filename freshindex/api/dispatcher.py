"""The webhook dispatcher: due sync tickets -> syncs, one at a time per source; and a ticket's state.

:mod:`api.routes_webhooks` records verified deliveries and joins each source's
queued ticket; :class:`Dispatcher` (run by ``freshindex serve``) claims the
tickets once they are due and runs each one's sync through a callable the
composition root gives it (``freshindex.dispatch.webhook_runner``:
inline or Celery), so this module imports nothing of the workers.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from freshindex.health.metrics import Metrics
    from freshindex.registry import Registry
    from freshindex.registry.webhooks import TicketInfo

log = logging.getLogger("freshindex.webhooks")

#: What a dispatcher calls for a claimed ticket: (source id, ticket id) -> (run id, joined another run).
RunSync = Callable[[str, int], tuple[int, bool]]


class Dispatcher:
    """Turn due tickets into syncs: a ticket is due once its first event is ``debounce_s`` old.

    A thread wakes every ``interval`` seconds, claims due tickets (a source
    whose previous ticket is still dispatched waits: its queued ticket is the
    one follow-up) and runs ``run_sync`` for each in a thread of its own, so
    one source never has two webhook syncs at once and a slow source does not
    hold up the others.  It also prunes delivery ids older than
    ``replay_window_s`` and fails tickets dispatched more than ``stuck_after_s``
    ago that never finished (their process died).  What it does not do:
    retry a failed sync (the next event, or the schedule, syncs again).
    """

    def __init__(self, registry: Registry, run_sync: RunSync, metrics: Metrics, *, debounce_s: float,
                 replay_window_s: float = 86400.0, stuck_after_s: float = 3600.0, interval: float = 0.2) -> None:
        self.registry, self.run_sync, self.metrics = registry, run_sync, metrics
        self.debounce_s, self.replay_window_s, self.stuck_after_s = debounce_s, replay_window_s, stuck_after_s
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._next_prune = 0.0

    def tick(self) -> list[TicketInfo]:
        """One pass: claim due tickets and start their syncs; returns the claimed tickets."""
        now = dt.datetime.now(dt.UTC)
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + 60.0
            self.registry.prune_deliveries(now - dt.timedelta(seconds=self.replay_window_s))
            self.registry.fail_stuck_tickets(now - dt.timedelta(seconds=self.stuck_after_s))
        claimed = self.registry.claim_due_tickets(now - dt.timedelta(seconds=self.debounce_s))
        for ticket in claimed:
            t = threading.Thread(target=self._work, args=(ticket,), name=f"webhook-sync-{ticket.id}", daemon=True)
            with self._lock:
                self._workers.add(t)
            t.start()
        return claimed

    def _work(self, ticket: TicketInfo) -> None:
        try:
            run_id, joined = self.run_sync(ticket.source_id, ticket.id)
            self.registry.finish_ticket(ticket.id, run_id=run_id, detail="joined a running sync" if joined else None)
            self.metrics.webhook_tickets.labels("done").inc()
        except Exception as exc:  # the ticket must close whatever the sync did, or its source stays busy
            log.warning("webhook sync of %s failed: %s", ticket.source_id, exc,
                        extra={"event": "webhook_sync_failed", "source": ticket.source_id, "ticket": ticket.id})
            try:
                self.registry.finish_ticket(ticket.id, run_id=None, failed=True, detail=f"{type(exc).__name__}: {exc}")
            except Exception:
                log.exception("cannot close ticket %s", ticket.id)
            self.metrics.webhook_tickets.labels("failed").inc()
        finally:
            with self._lock:
                self._workers.discard(threading.current_thread())

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as exc:  # the registry blinked: try again next tick
                log.warning("webhook dispatcher tick failed: %s", exc, extra={"event": "webhook_dispatch_failed"})

    def start(self) -> Dispatcher:
        self._thread = threading.Thread(target=self._loop, name="webhook-dispatcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop claiming; wait up to ``timeout`` for running syncs (a sync still going is left to its lease)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        deadline = time.monotonic() + timeout
        with self._lock:
            workers = list(self._workers)
        for t in workers:
            t.join(max(0.0, deadline - time.monotonic()))

    def idle(self) -> bool:
        with self._lock:
            return not self._workers


def ticket_state(registry: Registry, ticket_id: int) -> dict[str, Any]:
    """What ``freshindex syncs show`` prints: queued, running (run N), coalesced into run N, done, failed."""
    t = registry.get_ticket(ticket_id)
    run = None
    run_id = t.run_id
    if run_id is None and t.status == "dispatched":
        # The inline runner's run is known by its trigger before the sync returns.
        for r in registry.sync_runs(t.source_id, limit=5):
            if r.trigger == f"webhook:{t.id}":
                run_id = r.id
                break
    if run_id is not None:
        run = registry.get_sync_run(run_id)
    if t.status == "queued":
        state = "queued"
    elif t.status == "dispatched":
        state = f"running (run {run_id})" if run_id is not None else "dispatched"
    elif t.status == "failed":
        state = "failed"
    elif t.detail == "joined a running sync":
        state = f"coalesced into run {run_id}"
    else:
        state = "done"
    return {
        "ticket": t.id, "source": t.source_id, "state": state, "status": t.status, "events": t.events,
        "paths": None if t.paths is None else list(t.paths), "run_id": run_id,
        "run_status": run.status if run else None, "build_status": run.build_status if run else None,
        "created_at": t.created_at.isoformat(), "finished_at": t.finished_at.isoformat() if t.finished_at else None,
        "detail": t.detail,
    }


__all__ = ["Dispatcher", "RunSync", "ticket_state"]
