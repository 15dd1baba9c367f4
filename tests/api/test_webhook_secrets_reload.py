"""Webhook secrets from ``webhooks.secrets_file`` are followed while serving: added and revoked without a restart.

Real parts: uvicorn on 127.0.0.1 in a thread, a SQLite registry file, the
secrets file on disk replaced as an operator would (write, rename over it).
The interval between checks runs on an injected clock; nothing sleeps.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from freshindex.api import routes_webhooks
from freshindex.api.app import create_app
from freshindex.api.routes_webhooks import WebhookIntake, sign_generic
from freshindex.api.webhook_secrets import WebhookSecrets
from freshindex.core.errors import ConfigError
from freshindex.health.metrics import Metrics
from freshindex.registry import Registry
from freshindex.services import Services
from freshindex.settings import load_settings
from tests.api.served import app_in_thread

SECRET = "added-after-start"


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write_secrets(path: Path, secrets: dict[str, str]) -> None:
    """Replace the file the way the docs ask: a new file renamed over the old one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(secrets))
    os.replace(tmp, path)


def post(http: httpx.Client, secret: str) -> httpx.Response:
    body = json.dumps({"event": uuid.uuid4().hex, "paths": ["a.md"]}).encode()
    stamp = str(int(time.time()))
    return http.post("/v1/webhooks/generic/docs", content=body, headers={
        "X-Freshindex-Timestamp": stamp, "X-Freshindex-Delivery": uuid.uuid4().hex,
        "X-Freshindex-Signature": sign_generic(secret, stamp, body), "Content-Type": "application/json"})


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    reg = Registry.open(f"sqlite:///{tmp_path / 'r.db'}")
    reg.add_source("docs", kind="folder", location=str(tmp_path), owner="t", kb="default")
    try:
        yield reg
    finally:
        reg.close()


def test_a_secret_added_to_the_file_is_accepted_and_one_removed_refused_within_the_interval(
    tmp_path: Path, registry: Registry
) -> None:
    # Given a server whose secrets file names another source only, checked every 5 s of the injected clock
    secrets = tmp_path / "webhook-secrets.json"
    write_secrets(secrets, {"other": "x"})
    settings = load_settings(data_dir=tmp_path, webhooks={"secrets_file": str(secrets),
                                                          "secrets_file_check_s": 5}).webhooks
    clock = Clock()
    svc = type("S", (), {"registry": registry, "metrics": Metrics()})()
    app = FastAPI()
    app.include_router(routes_webhooks.router(WebhookIntake(settings, svc, secrets_clock=clock)))
    with app_in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        assert post(http, SECRET).status_code == 404  # no secret for docs: it takes no webhooks
        # When the operator adds the source's secret to the file
        write_secrets(secrets, {"other": "x", "docs": SECRET})
        # Then it is not read before the interval has passed, and is in force once it has
        assert post(http, SECRET).status_code == 404
        clock.now += 5
        accepted = post(http, SECRET)
        assert accepted.status_code == 202, accepted.text
        assert post(http, "a-guess").status_code == 401
        # When the secret is rotated, Then the old one is refused and the new one taken
        write_secrets(secrets, {"other": "x", "docs": "rotated"})
        clock.now += 5
        assert post(http, SECRET).status_code == 401
        assert post(http, "rotated").status_code == 202
        # When it is removed, Then the source takes no webhooks again
        write_secrets(secrets, {"other": "x"})
        clock.now += 5
        refused = post(http, "rotated")
        assert refused.status_code == 404 and refused.json()["error"] == "unknown_source"
    assert len(registry.sync_tickets("docs", limit=10)) == 1  # the two accepted deliveries joined one ticket


def test_serve_follows_the_file_on_every_request_with_the_check_at_zero(tmp_path: Path) -> None:
    # Given the HTTP app `freshindex serve` runs (create_app), its secrets file checked on every request
    secrets = tmp_path / "webhook-secrets.toml"
    secrets.write_text('other = "x"\n')
    settings = load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                             webhooks={"secrets_file": str(secrets), "secrets_file_check_s": 0})
    svc = Services(settings)
    svc.registry.add_source("docs", kind="folder", location=str(tmp_path), owner="t", kb="default")
    try:
        with app_in_thread(create_app(svc)) as url, httpx.Client(base_url=url, timeout=10) as http:
            assert post(http, SECRET).status_code == 404
            # When a secret is added to the file after start, Then the next request is accepted
            tmp = secrets.with_suffix(".new")
            tmp.write_text(f'other = "x"\ndocs = "{SECRET}"\n')
            os.replace(tmp, secrets)
            assert post(http, SECRET).status_code == 202
            # When it is removed again, Then the next request is refused
            tmp.write_text('other = "x"\n')
            os.replace(tmp, secrets)
            assert post(http, SECRET).status_code == 404
    finally:
        svc.close()


def test_the_event_loops_fast_path_never_reads_the_file(tmp_path: Path) -> None:
    # Given secrets from a file, checked every 5 s
    secrets = tmp_path / "s.json"
    write_secrets(secrets, {"docs": "one"})
    settings = load_settings(data_dir=tmp_path, webhooks={"secrets_file": str(secrets),
                                                          "secrets_file_check_s": 5}).webhooks
    clock = Clock()
    held = WebhookSecrets(settings, clock=clock)
    # Within the interval the cached secret answers; the file is replaced meanwhile and not read
    write_secrets(secrets, {"docs": "two"})
    assert held.cached("docs") == "one"
    # Past the interval a check is due: the fast path answers nothing (the route takes a thread), and the
    # check itself, made there, reads the new file
    clock.now += 5
    assert held.cached("docs") is None
    assert held.get("docs") == "two" and held.cached("docs") == "two"


def test_a_broken_file_keeps_the_last_good_secrets_and_a_removed_file_takes_them_away(tmp_path: Path) -> None:
    # Given secrets from a file and one inline (inline wins and stays whatever the file does)
    secrets = tmp_path / "s.json"
    write_secrets(secrets, {"docs": "one", "web": "w"})
    settings = load_settings(data_dir=tmp_path, webhooks={"secrets_file": str(secrets), "secrets_file_check_s": 1,
                                                          "secrets": {"web": "inline"}}).webhooks
    clock = Clock()
    held = WebhookSecrets(settings, clock=clock)
    assert (held.get("docs"), held.get("web")) == ("one", "inline")
    # When the file is rewritten half done, Then the last good secrets stay in force
    secrets.write_text('{"docs": "tw')
    clock.now += 1
    assert held.get("docs") == "one"
    # and once it is whole again, it is read
    write_secrets(secrets, {"docs": "two"})
    clock.now += 1
    assert held.get("docs") == "two"
    # When the file is deleted, Then its secrets are no longer accepted (the inline one is)
    secrets.unlink()
    clock.now += 1
    assert (held.get("docs"), held.get("web")) == (None, "inline")
    # A file missing at start is a configuration error: serve does not start without its secrets
    with pytest.raises(ConfigError):
        WebhookSecrets(settings, clock=clock)
