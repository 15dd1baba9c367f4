"""The API's limits and answers on hostile input: body caps before authentication, requests in flight,
rate per credential, lone surrogates, tenant scoping of health and snapshots, one answer for every bad key.

The body, in-flight and rate tests run a real ``freshindex serve`` process (keys made by ``freshindex keys
create``); the others use FastAPI's TestClient over a real registry.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from freshindex.api.app import create_app
from freshindex.api.limits import RateLimited, RateLimits
from freshindex.registry import NewSnapshot
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from tests.api.served import Served, cli, create_key, serve_env, serving

MB = 1 << 20


# -- a real serve process ----------------------------------------------------------------------------------------


def _post_raw(url: str, path: str, size: int, *, chunked: bool, headers: str = "") -> tuple[int, int]:
    """POST ``size`` bytes to ``path`` (declared, or chunked), stop sending once an answer arrives.

    Returns (status, bytes of body sent before the answer was seen).
    """
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{framing}\r\n{headers}\r\n"
                 .encode())
    block = b"a" * MB
    frame = f"{len(block):x}\r\n".encode() + block + b"\r\n" if chunked else block
    sent, pending = 0, b""
    sock.setblocking(False)
    try:
        while sent < size or pending:
            readable, writable, _ = select.select([sock], [sock], [], 60)
            if readable:
                break
            if not writable:
                raise AssertionError(f"{path}: no answer and no progress for 60 s")
            if not pending:
                pending = frame
                sent += len(block)
            try:
                pending = pending[sock.send(pending):]
            except (BrokenPipeError, ConnectionResetError):
                break
        if sent >= size and not pending and chunked:
            sock.sendall(b"0\r\n\r\n")
        sock.setblocking(True)
        data = b""
        while b"\r\n" not in data:
            more = sock.recv(4096)
            if not more:
                break
            data += more
    finally:
        sock.close()
    assert data.startswith(b"HTTP/1.1 "), (path, data[:200])
    return int(data.split()[1]), sent


@pytest.fixture(scope="module")
def limits_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("limits")
    (tmp / "kb").mkdir()
    (tmp / "kb" / "a.md").write_text("# A\n\nAlpha.\n")
    env = serve_env(tmp, FRESHINDEX_API__RATE_LIMIT_BURST="3", FRESHINDEX_API__RATE_LIMIT_PER_S="3",
                    FRESHINDEX_API__MAX_IN_FLIGHT="6", FRESHINDEX_AUTH__ADMIN_GROUP="ops",
                    FRESHINDEX_WEBHOOKS__SECRETS='{"docs": "s3cret"}')
    cli(env, "sources", "add", "docs", "--kind", "folder", "--location", str(tmp / "kb"))
    keys = {"alice": create_key(env, "alice", "ops"), "bob": create_key(env, "bob", "eng")}
    with serving(env, tmp) as served:
        yield served, keys


def test_100_mb_bodies_without_a_credential_are_refused_unread_and_serve_stays_small(limits_server: Any) -> None:
    served, _keys = limits_server
    before = served.status("VmHWM")
    # Given 100 MB bodies, declared and chunked, to the query route and three others, four at a time
    routes = ["/v1/query", "/v1/citations/check", "/v1/sources/docs/sync", "/v1/webhooks/generic/docs"]
    jobs = [(path, chunked) for path in routes for chunked in (False, True)]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda job: _post_raw(served.url, job[0], 100 * MB, chunked=job[1]), jobs))
    # Then the process is alive, answering, and its peak resident set stayed under 300 MB
    assert served.proc.poll() is None
    assert httpx.get(served.url + "/healthz", timeout=10).status_code == 200
    peak = served.status("VmHWM")
    print(f"serve VmHWM before {before / 1024:.0f} MB, after 8 x 100 MB bodies {peak / 1024:.0f} MB, "
          f"VmRSS {served.status('VmRSS') / 1024:.0f} MB")
    assert peak < 300 * 1024, f"peak RSS {peak} kB"
    # And each is answered 413 (or 401 by a route that refuses before it reads), long before its end was sent
    for (path, chunked), (status, sent) in zip(jobs, answers, strict=True):
        assert status in (413, 401), (path, chunked, status)
        assert sent < 50 * MB, (path, chunked, sent)
    assert [s for s, _ in answers].count(413) >= 6
    # And the query route's bodies are 413: the cap is before the credential
    assert answers[0][0] == 413 and answers[1][0] == 413
    metrics = httpx.get(served.url + "/metrics", timeout=10).text
    assert 'freshindex_api_limited_total{reason="too_large"}' in metrics
    # (the webhook's 413s are still webhook rejections too)
    assert 'freshindex_webhook_rejections_total{reason="too_large"}' in metrics


def test_a_query_over_its_cap_is_413_and_a_small_one_is_not(limits_server: Any) -> None:
    served, keys = limits_server
    auth = {"Authorization": f"Bearer {keys['bob']}"}
    with httpx.Client(base_url=served.url, timeout=30) as http:
        big = http.post("/v1/query", content=json.dumps({"question": "x" * (65 * 1024)}), headers=auth)
        assert big.status_code == 413 and big.json() == {"error": "too_large", "detail": "body over 65536 bytes"}
        time.sleep(1.1)  # past this key's one-second rate window (the test below counts its burst from zero)
        assert http.post("/v1/query", json={"question": "alpha?"}, headers=auth).status_code == 200


def test_a_credential_past_its_burst_is_429_with_retry_after_and_another_is_served(limits_server: Any) -> None:
    served, keys = limits_server
    alice, bob = ({"Authorization": f"Bearer {keys[k]}"} for k in ("alice", "bob"))
    time.sleep(1.1)  # a fresh window for both keys (burst 3 over 1 s)
    with httpx.Client(base_url=served.url, timeout=30) as http:
        assert [http.get("/v1/snapshots", headers=alice).status_code for _ in range(3)] == [200, 200, 200]
        refused = http.get("/v1/snapshots", headers=alice)
        assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
        retry_after = int(refused.headers["Retry-After"])
        assert 1 <= retry_after <= 1
        # another credential is still served
        assert http.get("/v1/snapshots", headers=bob).status_code == 200
        # and past Retry-After the first is served again
        time.sleep(retry_after + 0.1)
        assert http.get("/v1/snapshots", headers=alice).status_code == 200
        metrics = http.get("/metrics").text
    assert 'freshindex_api_limited_total{reason="rate_credential"} 1.0' in metrics


def test_more_requests_in_flight_than_allowed_is_503_with_retry_after(limits_server: Any) -> None:
    served, keys = limits_server
    parts = urlsplit(served.url)
    # Given six requests (api.max_in_flight) holding their slots: a chunked body that is never finished
    held = []
    for _ in range(6):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(b"POST /v1/query HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"que\r\n")
        held.append(sock)
    try:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            deadline = time.monotonic() + 30
            busy = http.get("/v1/snapshots", headers={"Authorization": f"Bearer {keys['bob']}"})
            while busy.status_code != 503 and time.monotonic() < deadline:  # until the server has taken all six
                time.sleep(0.05)
                busy = http.get("/v1/snapshots", headers={"Authorization": f"Bearer {keys['bob']}"})
            # Then one more is 503 with Retry-After, and the probes still answer
            assert busy.status_code == 503 and busy.headers["Retry-After"] == "1" and busy.json()["error"] == "busy"
            assert http.get("/healthz").status_code == 200
            assert http.get("/metrics").status_code == 200
    finally:
        for sock in held:
            sock.close()
    # And once they are gone, requests are served again
    with httpx.Client(base_url=served.url, timeout=30) as http:
        deadline = time.monotonic() + 30
        while (r := http.get("/v1/snapshots", headers={"Authorization": f"Bearer {keys['alice']}"})).status_code \
                in (503, 429) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.status_code == 200


# -- the rate window past its interval, with an injected clock ---------------------------------------------------


def test_the_rate_window_refills_past_its_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    import limits.storage.memory as memory

    now = [1_000_000.0]
    monkeypatch.setattr(memory, "time", SimpleNamespace(time=lambda: now[0]))  # the clock the storage reads
    rates = RateLimits(5, 0.1, clock=lambda: now[0])  # 5 requests over a 50 s window
    for _ in range(5):
        rates.hit("key:a", "rate_credential")
    with pytest.raises(RateLimited) as refused:
        rates.hit("key:a", "rate_credential")
    assert refused.value.retry_after == 50 and refused.value.reason == "rate_credential"
    rates.hit("key:b", "rate_credential")  # another key has its own window
    now[0] += 49.0
    with pytest.raises(RateLimited) as still:
        rates.hit("key:a", "rate_credential")
    assert still.value.retry_after == 1
    now[0] += 1.5  # past the window
    rates.hit("key:a", "rate_credential")


# -- in-process: answers -----------------------------------------------------------------------------------------


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[tuple[TestClient, Services, dict[str, dict[str, str]]]]:
    """Keys mode; kb alpha is acme's, kb beta-kb is beta's, kb shared has a source of each."""
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 auth={"mode": "keys"}, api={"rate_limit_burst": 0}))
    for sid, kb, tenant in (("acme-docs", "alpha", "acme"), ("beta-docs", "beta-kb", "beta"),
                            ("s-acme", "shared", "acme"), ("s-beta", "shared", "beta")):
        (tmp_path / sid).mkdir()
        svc.registry.add_source(sid, kind="folder", location=str(tmp_path / sid), owner="t", kb=kb,
                                setup=SourceSetup(tenant=tenant))
    for kb in ("alpha", "beta-kb", "shared"):
        svc.registry.create_snapshot(NewSnapshot(
            snapshot_id=f"{kb}-v1", kb=kb, version=1, parent_id=None, collection=f"c-{kb}", strategy="full",
            embedding_model="m", parser_version="p", changeset_ids=[], upserts=0, deletes=0))
    keys = {name: {"Authorization": f"Bearer {svc.registry.create_api_key(name, ['eng'], tenant=tenant).key}"}
            for name, tenant in (("acme", "acme"), ("beta", "beta"), ("single", None))}
    try:
        with TestClient(create_app(svc), raise_server_exceptions=False) as client:
            yield client, svc, keys
    finally:
        svc.close()


def test_health_and_snapshots_show_a_tenant_only_its_own_sources(tenants: Any) -> None:
    http, _svc, keys = tenants
    # Given a tenant-beta key: another tenant's knowledge base is answered as an unknown one
    theirs = http.get("/v1/kbs/alpha/health", headers=keys["beta"])
    unknown = http.get("/v1/kbs/nothing-here/health", headers=keys["beta"])
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["error"] == unknown.json()["error"] and "acme" not in theirs.text
    # and a shared one shows only beta's sources
    shared = http.get("/v1/kbs/shared/health", headers=keys["beta"])
    assert shared.status_code == 200 and set(shared.json()["deletions_held_by_source"]) == {"s-beta"}
    assert set(shared.json()["stale_sources"]) <= {"s-beta"} and "acme" not in shared.text
    # and the snapshot listing only beta's knowledge bases
    listed = http.get("/v1/snapshots", headers=keys["beta"])
    assert listed.status_code == 200 and {s["kb"] for s in listed.json()} == {"beta-kb", "shared"}
    assert http.get("/v1/snapshots", params={"kb": "alpha"}, headers=keys["beta"]).json() == []
    assert http.get("/v1/snapshots", params={"kb": "nothing-here"}, headers=keys["beta"]).json() == []
    # Given a key without a tenant (a single-tenant deploy): everything, as before
    everything = http.get("/v1/snapshots", headers=keys["single"]).json()
    assert {s["kb"] for s in everything} == {"alpha", "beta-kb", "shared"}
    both = http.get("/v1/kbs/shared/health", headers=keys["single"]).json()
    assert set(both["deletions_held_by_source"]) == {"s-acme", "s-beta"}
    assert http.get("/v1/kbs/alpha/health", headers=keys["acme"]).status_code == 200


def test_every_bad_key_gets_the_same_answer_and_the_reason_only_in_the_metric(tenants: Any) -> None:
    http, svc, keys = tenants
    real = keys["acme"]["Authorization"].removeprefix("Bearer ")
    revoked = svc.registry.create_api_key("gone", ["eng"])
    svc.registry.revoke_api_key(revoked.info.key_id)
    bad = {"wrong_secret": real[: real.rindex("_") + 1] + "x" * 43, "unknown_key": "fik_0123456789abcdef_" + "x" * 43,
           "malformed_key": "fik_garbage", "revoked_key": revoked.key}
    answers = {reason: http.get("/v1/snapshots", headers={"Authorization": f"Bearer {key}"})
               for reason, key in bad.items()}
    first = answers["wrong_secret"]
    assert first.status_code == 401
    for reason, r in answers.items():
        assert (r.status_code, r.content, dict(r.headers)) == (first.status_code, first.content, dict(first.headers))
        assert reason not in r.text and reason not in str(r.headers)
        assert svc.metrics.value("freshindex_auth_failures_total", reason=reason) == 1, reason


@pytest.mark.parametrize("body", [
    b'{"question": "\\ud800"}',
    b'{"question": "why \\udfff?", "limit": 0}',
    b'{"question": "ok", "groups": ["\\ud800"]}',
])
def test_a_lone_surrogate_is_a_400_that_says_so(tenants: Any, body: bytes) -> None:
    http, _svc, keys = tenants
    r = http.post("/v1/query", content=body, headers={**keys["single"], "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "bad_unicode" and "surrogate" in r.json()["detail"]


def test_a_validation_error_echoing_undecodable_input_is_still_a_422(tenants: Any) -> None:
    http, _svc, keys = tenants
    # a surrogate in a field that fails for another reason: the echoed input must still encode
    r = http.post("/v1/query", content=b'{"question": "x", "groups": "\\ud800", "limit": ["\\udfff"]}',
                  headers={**keys["single"], "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]] == [["body", "groups"], ["body", "limit"]]
    assert r.json()["detail"][0]["input"] == "\\ud800"  # the escape as text


def test_the_body_cap_holds_for_a_body_streamed_to_the_in_process_app(tenants: Any) -> None:
    http, svc, keys = tenants

    def chunks() -> Iterator[bytes]:
        yield b'{"question": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}'

    r = http.post("/v1/query", content=chunks(), headers={**keys["single"], "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"] == "too_large"
    assert svc.metrics.value("freshindex_api_limited_total", reason="too_large") == 1

