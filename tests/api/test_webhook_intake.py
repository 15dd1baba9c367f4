"""The fast webhook intake: group commit of verified deliveries, the cached source check, durable replays.

Everything here runs on a real SQLite registry file (no HTTP): the
behaviour the HTTP tests in test_webhooks.py rely on, under concurrency.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from freshindex.api.routes_webhooks import DeliveryBatcher, Rejected, WebhookIntake, sign_generic
from freshindex.core.errors import RetryableError
from freshindex.health.metrics import Metrics
from freshindex.registry import Registry
from freshindex.registry.webhooks import DeliveryRequest, TicketJoin
from freshindex.settings import load_settings

SECRET = "intake-s3cret"


def _registry(path: Path) -> Registry:
    reg = Registry.open(f"sqlite:///{path / 'r.db'}")
    if not any(s.id == "docs" for s in reg.list_sources()):
        reg.add_source("docs", kind="folder", location=str(path), owner="t", kb="default")
    return reg


def _intake(path: Path, reg: Registry) -> tuple[WebhookIntake, Metrics]:
    settings = load_settings(data_dir=path, webhooks={"secrets": {"docs": SECRET, "gone": SECRET}}).webhooks
    metrics = Metrics()
    svc = type("S", (), {"registry": reg, "metrics": metrics})()
    return WebhookIntake(settings, svc), metrics


def _headers(body: bytes, delivery: str) -> dict[str, str]:
    ts = str(int(time.time()))
    return {"X-Freshindex-Timestamp": ts, "X-Freshindex-Delivery": delivery,
            "X-Freshindex-Signature": sign_generic(SECRET, ts, body)}


def test_concurrent_deliveries_share_commits_and_each_is_answered(tmp_path: Path) -> None:
    # Given an intake on a file registry, When 200 signed deliveries arrive from 16 threads (10 replayed)
    reg = _registry(tmp_path)
    intake, metrics = _intake(tmp_path, reg)
    ids = [uuid.uuid4().hex for _ in range(190)] + [f"r{i}" for i in range(5)] * 2

    def send(delivery: str) -> int:
        body = b'{"paths": ["x.md"], "event": "%s"}' % delivery.encode()  # one body per event, as senders send
        try:
            intake.receive("generic", "docs", _headers(body, delivery), body)
            return 202
        except Rejected as exc:
            return exc.status

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(send, ids))
    # Then every new id is accepted once, every repeat refused, all on one ticket
    assert codes.count(202) == 195 and codes.count(409) == 5
    tickets = reg.sync_tickets()
    assert len(tickets) == 1 and tickets[0].events == 195
    assert metrics.value("freshindex_webhook_rejections_total", reason="replayed") == 5
    # And commits were shared: fewer batches than deliveries written, each delivery in exactly one batch
    batches = metrics.value("freshindex_webhook_batch_size_count")
    assert metrics.value("freshindex_webhook_batch_size_sum") == 200
    assert 1 <= batches <= 200
    reg.close()


def _behind_a_held_write(outcome: Callable[[list[DeliveryRequest]], list[Any]],
                         rest: list[str]) -> tuple[list[list[str]], dict[str, Any]]:
    """Submit "first", hold its write until every id of ``rest`` waits behind it, then release it.

    Returns the delivery ids of each write, and each delivery's result (or the exception it raised)."""
    release = threading.Event()
    writes: list[list[str]] = []

    def write(batch: list[DeliveryRequest]) -> list[Any]:
        writes.append([b.delivery_id for b in batch])
        if len(writes) == 1:
            release.wait(30)
        return outcome(batch)

    batcher = DeliveryBatcher(write)
    results: dict[str, Any] = {}
    with ThreadPoolExecutor(len(rest) + 1) as pool:
        futures = {"first": pool.submit(batcher.submit, DeliveryRequest("s", "first", None))}
        while not writes:
            time.sleep(0.01)
        futures.update({d: pool.submit(batcher.submit, DeliveryRequest("s", d, None)) for d in rest})
        while len(batcher._pending) < len(rest):
            time.sleep(0.01)
        release.set()
        for d, f in futures.items():
            try:
                results[d] = f.result(30)
            except Exception as exc:
                results[d] = exc
    return writes, results


def test_batcher_groups_waiting_callers_into_one_write() -> None:
    # Given a write that blocks until released, When five callers submit while the first write is held
    rest = [f"d{i}" for i in range(5)]
    writes, results = _behind_a_held_write(lambda batch: [TicketJoin(1, True) for _ in batch], rest)
    # Then every caller got its ticket, and the five waiting deliveries went in one second write
    assert all(r == TicketJoin(1, True) for r in results.values()) and len(results) == 6
    assert writes == [["first"], rest]


def test_a_failed_batch_fails_every_caller_and_the_next_batch_still_runs() -> None:
    calls = 0

    def write(batch: list[DeliveryRequest]) -> list[Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RetryableError("registry unavailable: disk I/O error")
        return [TicketJoin(7, False) for _ in batch]

    batcher = DeliveryBatcher(write)
    with pytest.raises(RetryableError):
        batcher.submit(DeliveryRequest("s", "a", None))
    assert batcher.submit(DeliveryRequest("s", "b", None)) == TicketJoin(7, False)


def test_one_bad_delivery_in_a_batch_fails_alone() -> None:
    # Given a write that refuses any batch holding the delivery "bad" (a value the database rejects)
    def outcome(batch: list[DeliveryRequest]) -> list[Any]:
        if any(b.delivery_id == "bad" for b in batch):
            raise ValueError("invalid byte sequence for encoding UTF8: 0x00")
        return [TicketJoin(3, True) for _ in batch]

    # When "good" and "bad" wait behind a held write and then go in one batch that fails
    writes, results = _behind_a_held_write(outcome, ["good", "bad"])
    # Then the batch is written again one delivery at a time: only "bad" fails
    assert results["first"] == TicketJoin(3, True) and results["good"] == TicketJoin(3, True)
    assert isinstance(results["bad"], ValueError)
    assert sorted(writes[1]) == ["bad", "good"] and sorted(map(tuple, writes[2:])) == [("bad",), ("good",)]


def test_an_interrupted_writer_releases_its_waiters_and_the_role() -> None:
    # Given a write interrupted by a BaseException (not an Exception)
    calls = 0

    def write(batch: list[DeliveryRequest]) -> list[Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyboardInterrupt
        return [TicketJoin(9, False) for _ in batch]

    batcher = DeliveryBatcher(write)
    with pytest.raises(KeyboardInterrupt):
        batcher.submit(DeliveryRequest("s", "a", None))
    # Then the writer's role was handed back: the next delivery is written, not stalled
    assert not batcher._writing
    assert batcher.submit(DeliveryRequest("s", "b", None)) == TicketJoin(9, False)


def test_replays_are_refused_after_a_restart(tmp_path: Path) -> None:
    # Given a delivery accepted by one intake, When the process is gone and a new one opens the same file
    reg = _registry(tmp_path)
    intake, _ = _intake(tmp_path, reg)
    body = b'{"paths": ["a.md"]}'
    accepted = intake.receive("generic", "docs", _headers(body, "once"), body)
    reg.close()
    reg2 = _registry(tmp_path)
    intake2, metrics2 = _intake(tmp_path, reg2)
    # Then the same delivery id is a 409 and the ticket still counts one event
    with pytest.raises(Rejected) as replay:
        intake2.receive("generic", "docs", _headers(body, "once"), body)
    assert (replay.value.status, replay.value.reason) == (409, "replayed")
    assert reg2.get_ticket(accepted.ticket_id).events == 1
    assert metrics2.value("freshindex_webhook_rejections_total", reason="replayed") == 1
    reg2.close()


def test_a_source_removed_after_it_was_cached_takes_no_more_deliveries(tmp_path: Path) -> None:
    # Given an intake that has just checked the source (its presence is cached)
    reg = _registry(tmp_path)
    intake, _ = _intake(tmp_path, reg)
    body = b'{"paths": ["a.md"]}'
    first = intake.receive("generic", "docs", _headers(body, "d1"), body)
    assert intake.source_checked("docs")
    reg.finish_ticket(first.ticket_id, run_id=None)  # no queued ticket left
    # When the source is removed, Then a valid delivery is a 404 anyway, and no ticket is opened
    reg.remove_source("docs")
    with pytest.raises(Rejected) as gone:
        intake.receive("generic", "docs", _headers(body, "d2"), body)
    assert (gone.value.status, gone.value.reason) == (404, "unknown_source")
    assert [t.id for t in reg.sync_tickets("docs")] == [first.ticket_id]
    # And a fresh intake (nothing cached) refuses it before any write
    fresh, _ = _intake(tmp_path, reg)
    with pytest.raises(Rejected) as unknown:
        fresh.secret_for("docs")
    assert unknown.value.status == 404
    reg.close()


def test_a_registry_failure_is_counted_and_records_nothing(tmp_path: Path) -> None:
    # Given an intake whose registry write fails (the database went away mid-request)
    reg = _registry(tmp_path)

    class Failing:
        def __getattr__(self, name: str) -> Any:
            return getattr(reg, name)

        def accept_deliveries(self, batch: Any, **_kw: Any) -> Any:
            raise RetryableError("registry unavailable: database is locked")

    settings = load_settings(data_dir=tmp_path, webhooks={"secrets": {"docs": SECRET}}).webhooks
    metrics = Metrics()
    intake = WebhookIntake(settings, type("S", (), {"registry": Failing(), "metrics": metrics})())
    body = b'{"paths": ["a.md"]}'
    # When a valid delivery arrives, Then the error reaches the caller (503 in the app), counted as failed
    with pytest.raises(RetryableError):
        intake.receive("generic", "docs", _headers(body, "d1"), body)
    assert metrics.value("freshindex_webhook_events_total", provider="generic", outcome="failed") == 1
    assert metrics.value("freshindex_webhook_events_total", provider="generic", outcome="accepted") == 0
    # And nothing was recorded: the same delivery is accepted once the registry is back
    assert reg.sync_tickets() == []
    ok, _ = _intake(tmp_path, reg)
    assert ok.receive("generic", "docs", _headers(body, "d1"), body).ticket_id is not None
    reg.close()
