"""A captured signed webhook sent again under a fresh delivery id is a replay (the id header is not signed).

Over real HTTP (uvicorn in a thread, serve's app and its dispatcher) for the
refusal and the sync it must not start; on the registry (SQLite and
PostgreSQL) with an injected clock for the replay window.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from freshindex.api.app import create_app
from freshindex.api.routes_webhooks import Rejected, WebhookIntake, sign_generic, sign_github
from freshindex.dispatch import start_dispatcher
from freshindex.health.metrics import Metrics
from freshindex.registry import Registry
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.connectors.registry import webhook_providers
from tests.api.served import WebhookServer as Server
from tests.api.served import app_in_thread

SECRET = "replay-s3cret"
DEBOUNCE_S = 0.3


@pytest.fixture
def server(tmp_path: Path, sample_kb: Path) -> Iterator[Server]:
    settings = load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                             webhooks={"secrets": {"docs": SECRET}, "debounce_s": DEBOUNCE_S})
    svc = Services(settings)
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    dispatcher = start_dispatcher(svc)
    try:
        with app_in_thread(create_app(svc)) as url:
            yield Server(url, svc)
    finally:
        dispatcher.stop()
        svc.close()


def signed_generic(body: bytes, delivery: str, ts: int | None = None) -> dict[str, str]:
    stamp = str(int(time.time()) if ts is None else ts)
    return {"X-Freshindex-Timestamp": stamp, "X-Freshindex-Delivery": delivery,
            "X-Freshindex-Signature": sign_generic(SECRET, stamp, body), "Content-Type": "application/json"}


def github(body: bytes, delivery: str) -> dict[str, str]:
    return {"X-Hub-Signature-256": sign_github(SECRET, body), "X-GitHub-Event": "push",
            "X-GitHub-Delivery": delivery}


def quiet_past_debounce(server: Server) -> None:
    """Long enough for a queued ticket to be claimed and run (the dispatcher ticks every 0.2 s)."""
    time.sleep(DEBOUNCE_S + 1.0)
    server.settle()


def test_a_captured_generic_body_under_a_new_id_is_a_replay_and_starts_no_sync(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        # Given one accepted signed event whose sync has run
        body = b'{"paths": ["faq.md"]}'
        captured = signed_generic(body, "d-1")
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=captured).status_code == 202
        server.settle()
        assert len(server.runs()) == 1
        # When an attacker sends the captured bytes, timestamp and signature under fresh delivery ids
        for fresh in ("d-2", "attacker-3"):
            replay = http.post("/v1/webhooks/generic/docs", content=body, headers={**captured,
                                                                                    "X-Freshindex-Delivery": fresh})
            # Then each is answered as a duplicate delivery is (409), named, and counted as a replay
            assert replay.status_code == 409, replay.text
            assert replay.json()["error"] == "replayed_body"
        # And the same id again is still the old duplicate
        again = http.post("/v1/webhooks/generic/docs", content=body, headers=captured)
        assert again.status_code == 409 and again.json()["error"] == "replayed"
        quiet_past_debounce(server)
        # And no second sync: one ticket with one event, one run
        assert [t.events for t in server.tickets()] == [1] and len(server.runs()) == 1
        # When a different body comes (or the same body signed at another second), Then it is taken and synced
        other = b'{"paths": ["guides/release.md"]}'
        assert http.post("/v1/webhooks/generic/docs", content=other,
                         headers=signed_generic(other, "d-4")).status_code == 202
        later = signed_generic(body, "d-5", ts=int(captured["X-Freshindex-Timestamp"]) + 1)
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=later).status_code == 202
        server.settle()
        # (one ticket for both, or a follow-up when the first was claimed between them: no event lost either way)
        tickets = server.tickets()
        assert sum(t.events for t in tickets) == 3 and len(server.runs()) == len(tickets) in (2, 3), tickets
    assert server.rejections("replayed_body") == 2 and server.rejections("replayed") == 1


def test_a_signed_s3_notification_replayed_to_the_generic_endpoint_is_refused(server: Server) -> None:
    # Given an S3 notification signed for the s3 endpoint (generic and S3 share one signing scheme)
    note = json.dumps({"Records": [{"eventName": "ObjectCreated:Put",
                                    "s3": {"object": {"key": "faq.md"}}}]}).encode()
    headers = signed_generic(note, "s3-1")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.post("/v1/webhooks/s3/docs", content=note, headers=headers).status_code == 202
        # When the same signed bytes go to the generic endpoint (where they would ask for a full listing)
        r = http.post("/v1/webhooks/generic/docs", content=note, headers={**headers, "X-Freshindex-Delivery": "g-1"})
    # Then it is the same delivery: refused, one ticket with one event
    assert r.status_code == 409 and r.json()["error"] == "replayed_body"
    server.settle()
    assert [t.events for t in server.tickets()] == [1]


def test_a_github_push_is_a_replay_at_any_time_under_any_id(server: Server) -> None:
    raw = b'{"ref": "refs/heads/main", "after": "abc", "commits": [{"added": ["faq.md"]}]}'
    with httpx.Client(base_url=server.url, timeout=30) as http:
        # Given one push accepted and synced
        assert http.post("/v1/webhooks/github/docs", content=raw, headers=github(raw, "gh-1")).status_code == 202
        server.settle()
        # When it is resent under a new GitHub delivery id (GitHub signs no timestamp)
        r = http.post("/v1/webhooks/github/docs", content=raw, headers=github(raw, "gh-2"))
        assert r.status_code == 409 and r.json()["error"] == "replayed_body"
        # A delivery id may not pose as a digest
        forged_id = http.post("/v1/webhooks/github/docs", content=raw, headers=github(raw, "sha256:" + "0" * 64))
        assert forged_id.status_code == 400
        # And the next push (another body) is taken
        nxt = raw.replace(b"abc", b"def")
        assert http.post("/v1/webhooks/github/docs", content=nxt, headers=github(nxt, "gh-3")).status_code == 202
        server.settle()
    tickets = server.tickets()
    assert len(tickets) == 2 and all(t.events == 1 for t in tickets) and len(server.runs()) == 2


# -- the window, with an injected clock, on SQLite and PostgreSQL ---------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def _intake(registry: Registry, tmp_path: Path, clock: Clock, window_s: float) -> tuple[WebhookIntake, Metrics]:
    registry.add_source("docs", kind="folder", location=str(tmp_path), owner="t", kb="default")
    settings = load_settings(data_dir=tmp_path, webhooks={"secrets": {"docs": SECRET},
                                                          "replay_window_s": window_s}).webhooks
    metrics = Metrics()
    # (github is the git spec's provider: given as the composition root gives it)
    svc = type("S", (), {"registry": registry, "metrics": metrics})()
    return WebhookIntake(settings, svc, clock=clock, providers=webhook_providers), metrics


def _refused(intake: WebhookIntake, provider: str, headers: dict[str, str], body: bytes) -> str:
    with pytest.raises(Rejected) as exc:
        intake.receive(provider, "docs", headers, body)
    assert exc.value.status == 409
    return exc.value.reason


def test_a_github_replay_is_refused_until_the_window_passes(registry: Registry, tmp_path: Path) -> None:
    # Given an intake whose replay window is an hour, on the clock the test moves
    clock = Clock()
    intake, metrics = _intake(registry, tmp_path, clock, 3600.0)
    raw = b'{"after": "abc", "commits": [{"modified": ["a.md"]}]}'
    first = intake.receive("github", "docs", github(raw, "gh-1"), raw)
    # When the same push comes again under new ids within the window, Then each is a replay that writes nothing
    clock.now += 1800
    assert _refused(intake, "github", github(raw, "gh-2"), raw) == "replayed_body"
    clock.now += 1799
    assert _refused(intake, "github", github(raw, "gh-3"), raw) == "replayed_body"
    other = b'{"after": "def", "commits": [{"modified": ["b.md"]}]}'
    assert intake.receive("github", "docs", github(other, "gh-2"), other).ticket_id == first.ticket_id  # gh-2 unused
    assert registry.get_ticket(first.ticket_id).events == 2
    # When the window has passed since the first was received, Then the same body is taken again
    clock.now += 2
    again = intake.receive("github", "docs", github(raw, "gh-4"), raw)
    assert again.ticket_id == first.ticket_id and registry.get_ticket(first.ticket_id).events == 3
    # And its id too is forgotten past the window (a sender may reuse it), but not within it
    assert _refused(intake, "github", github(b'{"after": "x"}', "gh-4"), b'{"after": "x"}') == "replayed"
    clock.now += 3601
    assert intake.receive("github", "docs", github(b'{"after": "y"}', "gh-1"), b'{"after": "y"}').ticket_id
    assert metrics.value("freshindex_webhook_rejections_total", reason="replayed_body") == 2
    assert metrics.value("freshindex_webhook_rejections_total", reason="replayed") == 1


def test_a_generic_replay_within_the_skew_is_refused(registry: Registry, tmp_path: Path) -> None:
    # Given a generic event accepted at its signed timestamp
    clock = Clock()
    intake, _metrics = _intake(registry, tmp_path, clock, 3600.0)
    body = b'{"paths": ["a.md"]}'
    headers = signed_generic(body, "g-1", ts=int(clock.now))
    intake.receive("generic", "docs", headers, body)
    # When it is resent 299 s later under another id, Then it is a replay; at 301 s the timestamp is stale
    clock.now += 299
    assert _refused(intake, "generic", {**headers, "X-Freshindex-Delivery": "g-2"}, body) == "replayed_body"
    clock.now += 2
    assert _refused(intake, "generic", {**headers, "X-Freshindex-Delivery": "g-3"}, body) == "stale_timestamp"


