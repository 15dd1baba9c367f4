"""The committed OpenAPI document (docs/openapi.json) is the app's, typed and secured.

Regenerate it with ``freshindex api openapi > docs/openapi.json``. A client generated from it is
checked against a real serve in tests/integrations/test_generated_client.py.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from freshindex.api.openapi import openapi_document
from freshindex.cli import cli
from tests.conftest import ROOT

COMMITTED = ROOT / "docs" / "openapi.json"
REGENERATE = "stale: run `freshindex api openapi > docs/openapi.json`"


def test_the_committed_document_is_the_apps() -> None:
    assert json.loads(COMMITTED.read_text()) == openapi_document(), REGENERATE


def test_the_command_prints_the_committed_document_byte_for_byte() -> None:
    out = CliRunner().invoke(cli, ["api", "openapi"])
    assert out.exit_code == 0, out.output
    assert out.output == COMMITTED.read_text(), REGENERATE


def test_every_operation_has_a_typed_answer_and_its_credentials() -> None:
    spec = openapi_document()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["apiKey"]["scheme"] == schemes["jwt"]["scheme"] == "bearer" and schemes["jwt"]["bearerFormat"] == "JWT"
    operations = [(path, method, op) for path, item in spec["paths"].items() for method, op in item.items()]
    assert len(operations) >= 15
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        success = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert success, where
        for status, answer in success.items():
            (media, content), = answer["content"].items()
            if path == "/metrics":
                assert media == "text/plain"
                continue
            schema = content["schema"]
            assert "$ref" in schema or "$ref" in schema.get("items", {}), (where, status, schema)
        # the query and operator routes take an API key or a JWT; probes and webhooks (signed) take neither
        open_route = path in ("/healthz", "/readyz", "/metrics") or path.startswith("/v1/webhooks/")
        assert op.get("security") == (None if open_route else [{"apiKey": []}, {"jwt": []}]), where
        if not open_route:
            assert {"401", "429"} <= set(op["responses"]), where
    body = spec["paths"]["/v1/citations/check"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["answer", "packet"]
    packet = spec["components"]["schemas"]["ContextPacketBody"]
    assert {"evidence", "insufficient_evidence", "reason", "context", "snapshot_id"} <= set(packet["required"])
