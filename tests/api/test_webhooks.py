"""Signed webhooks over real HTTP (uvicorn in a thread), coalescing, and the plain functions beneath."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from fastapi import FastAPI

from freshindex.api.app import create_app
from freshindex.api.routes_webhooks import (
    Rejected,
    WebhookIntake,
    check_timestamp,
    sign_generic,
    sign_github,
)
from freshindex.api.routes_webhooks import router as webhook_router
from freshindex.cli import cli
from freshindex.dispatch import start_dispatcher
from freshindex.health.metrics import Metrics
from freshindex.registry import Registry
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.connectors.webhooks import push_paths, s3_paths
from tests.api.served import WebhookServer as Server
from tests.api.served import app_in_thread

SECRET = "wh-s3cret"
LIMIT = 4096


@pytest.fixture
def server(tmp_path: Path, sample_kb: Path) -> Iterator[Server]:
    data_dir = tmp_path / "data"
    # A query token is set: webhook routes must not need it (they have their own signatures).
    settings = load_settings(data_dir=data_dir, embedding={"provider": "hashing"}, api={"token": "query-t0ken"},
                             webhooks={"secrets": {"docs": SECRET, "ghost": SECRET}, "debounce_s": 0.5,
                                       "max_body_bytes": LIMIT})
    svc = Services(settings)
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    svc.registry.add_source("nosecret", kind="folder", location=str(sample_kb), owner="t", kb="default")
    dispatcher = start_dispatcher(svc)
    try:
        with app_in_thread(create_app(svc)) as url:
            yield Server(url, svc, data_dir, sample_kb)
    finally:
        dispatcher.stop()
        svc.close()


def generic_headers(body: bytes, *, delivery: str | None = None, ts: int | None = None,
                    secret: str = SECRET) -> dict[str, str]:
    stamp = str(int(time.time()) if ts is None else ts)
    return {"X-Freshindex-Timestamp": stamp, "X-Freshindex-Delivery": delivery or uuid.uuid4().hex,
            "X-Freshindex-Signature": sign_generic(secret, stamp, body), "Content-Type": "application/json"}


def post_generic(http: httpx.Client, paths: list[str] | None, **kw: Any) -> httpx.Response:
    # Each event carries its own id in the body, as a sender should: the same signed body twice is a replay.
    body = json.dumps({"event": uuid.uuid4().hex, **({} if paths is None else {"paths": paths})}).encode()
    return http.post("/v1/webhooks/generic/docs", content=body, headers=generic_headers(body, **kw))


# -- plain functions ------------------------------------------------------------------------


def test_signatures_and_payload_parsers() -> None:
    # Given a generic body signed at a timestamp, Then the signature is the HMAC of "ts.body"
    expected = hmac.new(SECRET.encode(), b"123.{}", hashlib.sha256).hexdigest()
    assert sign_generic(SECRET, "123", b"{}") == f"sha256={expected}"
    # An S3 notification's keys are form-encoded; other events are not syncs
    note = {"Records": [
        {"eventName": "ObjectCreated:Put", "s3": {"object": {"key": "docs/a+b%2Bc.md"}}},
        {"eventName": "ObjectRemoved:Delete", "s3": {"object": {"key": "old%20file.md"}}},
        {"eventName": "ObjectTagging:Put", "s3": {"object": {"key": "tagged.md"}}},
    ]}
    assert s3_paths(json.dumps(note).encode()) == ["docs/a b+c.md", "old file.md"]
    push = {"commits": [{"added": ["a.md"], "modified": ["b.md"], "removed": []}, {"removed": ["c.md"]}]}
    assert push_paths(json.dumps(push).encode()) == ["a.md", "b.md", "c.md"]
    assert push_paths(b"{}") is None  # no file lists: a full listing
    with pytest.raises(Rejected) as bad:
        s3_paths(b"not json")
    assert (bad.value.status, bad.value.reason) == (400, "malformed")
    with pytest.raises(Rejected) as stale:
        check_timestamp("1000", now=2000.0, max_skew_s=300)
    assert (stale.value.status, stale.value.reason) == (409, "stale_timestamp")
    check_timestamp("1900", now=2000.0, max_skew_s=300)


def test_intake_without_http_unions_paths_and_refuses_replays(tmp_path: Path) -> None:
    # Given a registry with one source and an intake holding its secret
    reg = Registry.open(f"sqlite:///{tmp_path / 'r.db'}")
    reg.add_source("docs", kind="folder", location=str(tmp_path), owner="t", kb="default")
    settings = load_settings(data_dir=tmp_path, webhooks={"secrets": {"docs": SECRET}}).webhooks
    svc = type("S", (), {"registry": reg, "metrics": Metrics()})()
    intake = WebhookIntake(settings, svc)
    # When three events arrive, one naming no paths
    a = b'{"paths": ["x.md"]}'
    first = intake.receive("generic", "docs", generic_headers(a, delivery="d1"), a)
    b = b'{"paths": ["y.md", "x.md"]}'
    second = intake.receive("generic", "docs", generic_headers(b, delivery="d2"), b)
    # Then they share one ticket holding the union
    assert first.ticket_id == second.ticket_id and second.joined
    assert reg.get_ticket(first.ticket_id).paths == ("x.md", "y.md")
    # When a delivery id comes again, Then it is a 409 and the ticket is unchanged
    with pytest.raises(Rejected) as replay:
        intake.receive("generic", "docs", generic_headers(b, delivery="d2"), b)
    assert replay.value.status == 409
    assert reg.get_ticket(first.ticket_id).events == 2
    full = intake.receive("generic", "docs", generic_headers(b"{}", delivery="d3"), b"{}")
    assert reg.get_ticket(full.ticket_id).paths is None  # one full-listing event makes the sync full
    # When the ticket is claimed, the next event opens a new (follow-up) ticket, which waits while it runs
    claimed = reg.claim_due_tickets(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    assert [t.id for t in claimed] == [first.ticket_id]
    # (signed a second later: the same signed body at the same timestamp would be a replay)
    nxt = intake.receive("generic", "docs", generic_headers(a, delivery="d4", ts=int(time.time()) + 1), a)
    assert nxt.ticket_id != first.ticket_id and not nxt.joined
    assert reg.claim_due_tickets(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)) == []
    reg.finish_ticket(first.ticket_id, run_id=None)
    assert [t.id for t in reg.claim_due_tickets(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))] == [nxt.ticket_id]
    reg.close()


# -- over HTTP ------------------------------------------------------------------------------


def test_a_burst_of_100_deliveries_is_one_sync_plus_at_most_one_followup(server: Server) -> None:
    # Given a source with a secret, When 100 signed deliveries arrive at once from 8 senders
    with httpx.Client(base_url=server.url, timeout=30) as http, ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: post_generic(http, [f"guides/{i % 7}.md"]).status_code, range(100)))
    assert codes == [202] * 100
    server.settle()
    # Then they made one sync run plus a follow-up (a second one only where the follow-up was claimed while
    # deliveries still arrived, on a loaded machine), and every event is on a ticket
    tickets = server.tickets()
    runs = server.runs()
    assert 1 <= len(runs) <= 3, runs
    assert len(tickets) == len(runs)
    assert sum(t.events for t in tickets) == 100
    assert all(t.status == "done" and t.run_id is not None for t in tickets)
    assert {r.trigger for r in runs} == {f"webhook:{t.id}" for t in tickets}
    assert set(tickets[-1].paths or ()) <= {f"guides/{i}.md" for i in range(7)}
    assert 'freshindex_webhook_events_total{outcome="accepted",provider="generic"} 100.0' in server.metrics()


def test_every_rejection_is_counted_and_enqueues_nothing(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        body = b'{"paths": ["a.md"]}'
        forged = generic_headers(body, secret="not-the-secret")
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=forged).status_code == 401
        unsigned = {k: v for k, v in generic_headers(body).items() if k != "X-Freshindex-Signature"}
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=unsigned).status_code == 401
        stale = generic_headers(body, ts=int(time.time()) - 3600)
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=stale).status_code == 409
        future = generic_headers(body, ts=int(time.time()) + 3600)
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=future).status_code == 409
        big = json.dumps({"paths": ["x" * LIMIT]}).encode()
        assert http.post("/v1/webhooks/generic/docs", content=big, headers=generic_headers(big)).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: the cap must hold on the bytes read
            for _ in range(64):
                yield b" " * 1024

        streamed = http.post("/v1/webhooks/generic/docs", content=chunks(), headers=generic_headers(b""))
        assert streamed.status_code == 413
        bad = b'{"paths": "not a list"}'
        assert http.post("/v1/webhooks/generic/docs", content=bad, headers=generic_headers(bad)).status_code == 400
        junk = b"{not json"
        assert http.post("/v1/webhooks/generic/docs", content=junk, headers=generic_headers(junk)).status_code == 400
        for path in ("/v1/webhooks/generic/nobody", "/v1/webhooks/generic/nosecret", "/v1/webhooks/generic/ghost",
                     "/v1/webhooks/bitbucket/docs"):
            assert http.post(path, content=body, headers=generic_headers(body)).status_code == 404
        # Then nothing was enqueued: no ticket, no run
        assert server.tickets() == [] and server.runs() == []
        # Given one accepted delivery, When it is replayed, Then 409 and still one ticket
        headers = generic_headers(body, delivery="once")
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=headers).status_code == 202
        assert http.post("/v1/webhooks/generic/docs", content=body, headers=headers).status_code == 409
        assert len(server.tickets()) == 1 and server.tickets()[0].events == 1
        metrics = http.get("/metrics").text
    for reason, n in (("bad_signature", 1), ("missing_signature", 1), ("stale_timestamp", 2), ("too_large", 2),
                      ("malformed", 2), ("unknown_source", 4), ("replayed", 1)):
        assert f'freshindex_webhook_rejections_total{{reason="{reason}"}} {n}.0' in metrics, reason
    assert SECRET not in metrics


def test_github_signature_is_checked_on_the_raw_bytes_and_gitlab_token(server: Server) -> None:
    raw = b'{"ref": "refs/heads/main",   "commits": [{"added": ["new.md"], "modified": [], "removed": []}]}'
    reserialised = json.dumps(json.loads(raw)).encode()
    assert reserialised != raw
    sig = sign_github(SECRET, raw)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        def gh(body: bytes, event: str = "push", delivery: str | None = None) -> httpx.Response:
            return http.post("/v1/webhooks/github/docs", content=body, headers={
                "X-Hub-Signature-256": sig, "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery or str(uuid.uuid4())})

        assert gh(reserialised).status_code == 401  # same JSON, other bytes: the signature fails
        assert server.tickets() == []
        ping = gh(raw, event="ping")
        assert ping.status_code == 200 and ping.json()["ticket"] is None and server.tickets() == []
        ok = gh(raw, delivery="gh-1")
        assert ok.status_code == 202
        assert server.svc.registry.get_ticket(ok.json()["ticket"]).paths == ("new.md",)
        assert gh(raw, delivery="gh-1").status_code == 409

        def gl(token: str, delivery: str) -> httpx.Response:
            return http.post("/v1/webhooks/gitlab/docs", content=raw, headers={
                "X-Gitlab-Token": token, "X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": delivery})

        assert gl("wrong", "gl-1").status_code == 401
        accepted = gl(SECRET, "gl-1")
        assert accepted.status_code == 202 and accepted.json()["ticket"] == ok.json()["ticket"]  # coalesced
        s3 = json.dumps({"Records": [{"eventName": "ObjectCreated:Put",
                                      "s3": {"object": {"key": "a%20b.md"}}}]}).encode()
        r = http.post("/v1/webhooks/s3/docs", content=s3, headers=generic_headers(s3))
        assert r.status_code == 202 and r.json()["ticket"] == ok.json()["ticket"]
    assert server.svc.registry.get_ticket(ok.json()["ticket"]).paths == ("a b.md", "new.md")


def test_the_first_request_loads_the_providers_off_the_event_loop(tmp_path: Path) -> None:
    # Given an app whose webhook providers come from a loader that records the thread it runs on
    loads: list[int] = []

    def loader() -> None:
        loads.append(threading.get_ident())
        return None  # the generic provider alone

    settings = load_settings(data_dir=tmp_path, webhooks={"secrets": {"docs": SECRET}}).webhooks
    svc = type("S", (), {"registry": None, "metrics": Metrics()})()
    app = FastAPI()
    app.include_router(webhook_router(WebhookIntake(settings, svc, providers=loader)))

    @app.get("/loop-thread")
    async def loop_thread() -> int:  # an async route runs on the event loop's thread
        return threading.get_ident()

    with app_in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        # When two webhook requests arrive for a provider nobody declared
        codes = [http.post("/v1/webhooks/nosuch/docs", content=b"{}").status_code for _ in range(2)]
        loop = http.get("/loop-thread").json()
    # Then both are refused, and the loader ran once, on a thread other than the event loop's
    assert codes == [404, 404]
    assert len(loads) == 1 and loads[0] != loop


def test_an_accepted_event_is_followed_to_done_and_its_document_is_found(server: Server) -> None:
    # Given a new document in the source, When a signed event names it
    (server.kb / "webhook-note.md").write_text("# Zanzibar ferry\n\nThe zanzibar ferry timetable changes weekly.\n")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = post_generic(http, ["webhook-note.md"])
    assert r.status_code == 202
    ticket = r.json()["ticket"]
    runner = CliRunner()
    env = {"FRESHINDEX_DATA_DIR": str(server.data_dir), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    # Then `freshindex syncs show` follows the ticket to done
    deadline = time.monotonic() + 60
    states = []
    while time.monotonic() < deadline:
        out = runner.invoke(cli, ["syncs", "show", str(ticket), "--json"], env=env)
        assert out.exit_code == 0, out.output
        data = json.loads(out.output)
        states.append(data["state"])
        if data["state"] in ("done", "failed"):
            break
        time.sleep(0.1)
    assert data["state"] == "done" and data["run_status"] == "succeeded", data
    assert data["paths"] == ["webhook-note.md"]
    human = runner.invoke(cli, ["syncs", "show", str(ticket)], env=env)
    assert f"ticket {ticket} (docs): done, run {data['run_id']}: succeeded" in human.output
    # And the changed document is found by a query
    packet = server.svc.client.retrieve("zanzibar ferry timetable", kb="default")
    assert any(e.key == "webhook-note.md" for e in packet.evidence), packet.as_dict()
    missing = runner.invoke(cli, ["syncs", "show", "999999"], env=env)
    assert missing.exit_code != 0


@pytest.mark.services
@pytest.mark.slow
def test_distributed_mode_enqueues_sync_source_through_celery(tmp_path: Path, pg_url: str, redis_url: str,
                                                              sample_kb: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a Celery worker on Redis, a PostgreSQL registry and serve's app with its dispatcher
    from fastapi.testclient import TestClient

    from tests.conftest import distributed_env, worker_process

    env = distributed_env(tmp_path, pg_url, redis_url, "fi-wh", FRESHINDEX_EMBEDDING__PROVIDER="hashing")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    # A debounce window two posts keep on a loaded machine, while the worker starts beside them
    svc = Services(load_settings(webhooks={"secrets": {"docs": SECRET}, "debounce_s": 5.0}))
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    with worker_process(env, tmp_path / "worker.log", "wh") as proc:
        dispatcher = start_dispatcher(svc)
        try:
            http = TestClient(create_app(svc))
            # When two events arrive within the debounce window
            for paths in (["guides/release.md"], ["faq.md"]):
                body = json.dumps({"paths": paths}).encode()
                r = http.post("/v1/webhooks/generic/docs", content=body, headers=generic_headers(body))
                assert r.status_code == 202
            ticket = r.json()["ticket"]
            deadline = time.monotonic() + 120
            while svc.registry.get_ticket(ticket).status not in ("done", "failed") and time.monotonic() < deadline:
                time.sleep(0.2)
            # Then one sync ran on the worker, triggered by the ticket
            t = svc.registry.get_ticket(ticket)
            assert t.status == "done" and t.events == 2, (t, (tmp_path / "worker.log").read_text()[-3000:])
            runs = svc.registry.sync_runs("docs")
            assert [r.trigger for r in runs] == [f"webhook:{ticket}"] and runs[0].status == "succeeded"
            assert proc.poll() is None
        finally:
            dispatcher.stop()
            svc.close()
