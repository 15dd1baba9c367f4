"""A source kind brings its own webhook endpoint: declared by its spec, served by ``freshindex serve``.

Given a toy kind (objects held in memory) registered from this test with a
provider of its own (``/v1/webhooks/shelf/<source>``, a body HMAC in
``X-Shelf-Signature``) and a ref option (``branch``), and nothing edited in
``freshindex.api``: ``freshindex serve`` (its ``uvicorn.run`` replaced by a
function that talks to the app it was handed) takes a signed event for a
source of that kind and its dispatcher syncs the source; a forged event is
401, an event for a source of another kind 404, a push to another branch
200 with nothing queued.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner

from freshindex.cli import cli
from freshindex.core.errors import ConfigError, DocumentError
from freshindex.core.ids import document_id
from freshindex.core.types import ObjectRef
from freshindex.core.webhooks import Rejected, WebhookEvent, check_signature, delivery_digest, pushed_ref
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.connectors import ConnectorSpec, kinds, register, unregister

SECRET = "shelf-s3cret"
SHELF = {"leave.md": "# Leave\n\nAsk your manager two weeks ahead for any leave over three days.\n"}


class ShelfConnector:
    def list(self) -> Iterator[ObjectRef]:
        for key, text in sorted(SHELF.items()):
            yield ObjectRef(key=key, etag=str(hash(text)), size=len(text.encode()))

    def fetch(self, key: str) -> bytes:
        if key not in SHELF:  # (the sync asks for an ACL sidecar too)
            raise DocumentError(DocumentError.VANISHED, f"{key} is gone")
        return SHELF[key].encode()


def shelf_signature(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class ShelfEvents:
    """``{"keys": [...], "ref": ...}`` signed with an HMAC of the body, for memory sources only."""

    name: str = "shelf"
    kinds: frozenset[str] | None = frozenset({"memshelf"})

    def read(self, secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
             max_skew_s: float) -> WebhookEvent:
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        check_signature(expected, headers.get("x-shelf-signature"))
        keys = json.loads(body).get("keys")
        if not isinstance(keys, list):
            raise Rejected(400, "malformed", "keys must be a list")
        return WebhookEvent(headers.get("x-shelf-delivery"), delivery_digest(self.name, body), sorted(keys) or None,
                            pushed_ref(body))


SPEC = ConnectorSpec(kind="memshelf", build=lambda source, env: ShelfConnector(),
                     source_uri=lambda location, key: f"{location}/{key}", webhook_providers=(ShelfEvents(),),
                     ref_option="branch")


@pytest.fixture
def shelf_kind() -> Iterator[ConnectorSpec]:
    register(SPEC)
    yield SPEC
    unregister("memshelf")


def _post(http: Any, source: str, body: dict[str, Any], delivery: str, *, forged: bool = False) -> Any:
    raw = json.dumps(body).encode()
    return http.post(f"/v1/webhooks/shelf/{source}", content=raw, headers={
        "X-Shelf-Delivery": delivery, "X-Shelf-Signature": shelf_signature(raw + (b"x" if forged else b""))})


def test_a_kind_registered_with_its_own_provider_gets_a_signed_webhook_through_serve(shelf_kind: ConnectorSpec,
                                                                                     tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = load_settings(data_dir=data, embedding={"provider": "hashing"})
    svc = Services(settings)
    try:
        svc.registry.add_source("hb", kind="memshelf", location="mem://hb", owner="t", kb="default",
                                setup=SourceSetup(options={"branch": "main"}))
        svc.registry.add_source("docs", kind="folder", location=str(tmp_path), owner="t", kb="default")
    finally:
        svc.close()
    seen: dict[str, Any] = {}

    def run(app: Any, **_: Any) -> None:  # what serve hands uvicorn, talked to in-process
        from fastapi.testclient import TestClient

        with TestClient(app) as http:
            seen["forged"] = _post(http, "hb", {"keys": ["leave.md"]}, "d0", forged=True).status_code
            seen["other_kind"] = _post(http, "docs", {"keys": ["a.md"]}, "d1").status_code
            other = _post(http, "hb", {"keys": ["leave.md"], "ref": "refs/heads/draft"}, "d2")
            seen["other_branch"] = (other.status_code, other.json()["detail"])
            taken = _post(http, "hb", {"keys": ["leave.md"], "ref": "refs/heads/main"}, "d3")
            seen["taken"] = taken.status_code
            seen["runs"], seen["errors"] = _wait_for_webhook_sync(data)

    env = {"FRESHINDEX_DATA_DIR": str(data), "FRESHINDEX_EMBEDDING__PROVIDER": "hashing",
           "FRESHINDEX_WEBHOOKS__SECRETS": json.dumps({"hb": SECRET, "docs": SECRET}),
           "FRESHINDEX_WEBHOOKS__DEBOUNCE_S": "0.1"}
    with mock.patch("uvicorn.run", run):
        out = CliRunner().invoke(cli, ["serve"], env=env)
    assert out.exit_code == 0, (out.output, out.exception)
    assert seen["forged"] == 401
    assert seen["other_kind"] == 404  # the provider takes memshelf sources only
    assert seen["other_branch"][0] == 200 and "follows main" in seen["other_branch"][1]
    assert seen["taken"] == 202
    assert [(r.trigger.split(":")[0], r.status) for r in seen["runs"]] == [("webhook", "succeeded")], seen["errors"]
    svc = Services(settings)
    try:
        assert svc.registry.document_provenance(document_id("hb", "leave.md"))["source_uri"] == "mem://hb/leave.md"
    finally:
        svc.close()


def _wait_for_webhook_sync(data: Path) -> tuple[list[Any], list[Any]]:
    """The source's finished runs once the dispatcher has run one (a deadline only against a hang)."""
    svc = Services(load_settings(data_dir=data, embedding={"provider": "hashing"}))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = [r for r in svc.registry.sync_runs("hb") if r.status != "running"]
            if runs:
                return runs, [(e.key, e.reason, e.detail) for e in svc.registry.document_errors(source_id="hb")]
            time.sleep(0.1)
        raise AssertionError("the webhook did not sync the source")
    finally:
        svc.close()


def test_a_kind_cannot_declare_the_apis_own_generic_provider() -> None:
    # Given a kind whose provider calls itself "generic", When it is registered, Then it is refused there
    impostor = dataclasses.replace(ShelfEvents(), name="generic")
    spec = dataclasses.replace(SPEC, kind="impostor", webhook_providers=(impostor,))
    with pytest.raises(ConfigError, match="'generic' is the API's own"):
        register(spec)
    assert "impostor" not in kinds()
