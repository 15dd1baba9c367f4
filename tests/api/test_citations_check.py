"""``POST /v1/citations/check``, the thin client's ``check_citations`` and ``freshindex check-citations``.

A real knowledge base (folder source, SQLite, Qdrant Edge, hashing embedder)
behind the real app with API keys; the answer is checked against the source
list of a packet the same service returned.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from freshindex import cli as cli_module
from freshindex.api.app import create_app
from freshindex.injection.citations import MAX_SOURCES
from freshindex.injection.http import BadRequest, FreshIndexClient
from freshindex.services import Services
from tests.api.release_kb import RELEASE, release_kb

QUESTION = "When are releases cut from the main branch?"
GOOD = "Releases are cut every Tuesday from the main branch [1]."
BAD = "Releases are cut every Tuesday from the main branch [1]. Deploys need two approvals [7]. Bananas are yellow [1]."


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    with release_kb(tmp_path, api={"max_check_bytes": 64 * 1024}) as services:
        yield services


@pytest.fixture
def http(svc: Services) -> Iterator[tuple[TestClient, dict[str, str]]]:
    key = svc.registry.create_api_key("bob", ["eng"]).key
    with TestClient(create_app(svc)) as client:
        yield client, {"Authorization": f"Bearer {key}"}


def _invalid(svc: Services, kind: str) -> float:
    return svc.metrics.value("freshindex_invalid_citations_total", kind=kind)


def test_an_answer_is_checked_against_the_packet_it_was_written_from(svc: Services, http: Any) -> None:
    client, auth = http
    packet = client.post("/v1/query", json={"question": QUESTION}, headers=auth).json()
    assert not packet["insufficient_evidence"] and packet["evidence"][0]["n"] == 1
    ok = client.post("/v1/citations/check", json={"answer": GOOD, "packet": packet}, headers=auth)
    assert ok.status_code == 200 and ok.json()["ok"] is True and ok.json()["cited"] == [1]
    assert _invalid(svc, "missing") == 0 and _invalid(svc, "unsupported") == 0
    bad = client.post("/v1/citations/check", json={"answer": BAD, "packet": packet}, headers=auth).json()
    assert bad["ok"] is False and bad["missing"] == [7] and bad["unsupported"] == []  # [1] has one supported sentence
    assert _invalid(svc, "missing") == 1.0
    wrong = client.post("/v1/citations/check", json={"answer": "Bananas are yellow and ripe [1].", "packet": packet},
                        headers=auth).json()
    assert wrong["unsupported"] == [1] and _invalid(svc, "unsupported") == 1.0
    assert 'freshindex_invalid_citations_total{kind="missing"} 1.0' in client.get("/metrics").text


def test_the_endpoint_needs_a_credential(http: Any) -> None:
    client, _auth = http
    r = client.post("/v1/citations/check", json={"answer": GOOD, "packet": {"evidence": []}})
    assert r.status_code == 401


def _evidence(n: Any = 1, text: Any = RELEASE) -> dict[str, Any]:
    return {"n": n, "chunk_id": "c", "score": 0.5, "text": text, "title": "Releases", "key": "release.md",
            "snapshot_id": "default-v1"}


@pytest.mark.parametrize(("body", "fragment"), [
    ({"answer": GOOD}, "JSON object"),
    ({"answer": GOOD, "packet": []}, "JSON object"),
    ({"answer": GOOD, "packet": {"evidence": "all of them"}}, "no evidence list"),
    ({"answer": GOOD, "packet": {"evidence": [_evidence(), _evidence()]}}, "appear once"),
    ({"answer": GOOD, "packet": {"evidence": [_evidence(n="1")]}}, "not an integer"),
    ({"answer": GOOD, "packet": {"evidence": [_evidence(n=0)]}}, "start at 1"),
    ({"answer": GOOD, "packet": {"evidence": [_evidence(text=None)]}}, "text"),
    ({"answer": GOOD, "packet": {"evidence": [{"n": 1, "text": "x"}]}}, "not evidence"),
    ({"answer": GOOD, "packet": {"evidence": [_evidence(n=i + 1) for i in range(MAX_SOURCES + 1)]}}, "at most"),
    ({"answer": "", "packet": {"evidence": [_evidence()]}}, "non-empty"),
    ({"answer": ["[1]"], "packet": {"evidence": [_evidence()]}}, "non-empty"),
    (["not", "an", "object"], "answer"),
])
def test_forged_input_answers_400_and_counts_nothing(svc: Services, http: Any, body: Any, fragment: str) -> None:
    client, auth = http
    r = client.post("/v1/citations/check", json=body, headers=auth)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["detail"] and r.json()["error"] == "CitationInputError"
    assert _invalid(svc, "missing") == 0 and _invalid(svc, "unsupported") == 0


def test_a_body_that_is_not_json_or_too_large_is_refused(http: Any) -> None:
    client, auth = http
    r = client.post("/v1/citations/check", content=b"{not json", headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "bad_json"
    huge = {"answer": GOOD, "packet": {"evidence": [_evidence(text="x" * (70 * 1024))]}}
    r = client.post("/v1/citations/check", json=huge, headers=auth)
    assert r.status_code == 413 and r.json()["error"] == "too_large"
    # A body with no Content-Length (chunked) is capped by the bytes read
    chunks = (b'{"answer": "x", "packet": {"evidence": [], "pad": "' + b"y" * 8192 for _ in range(10))
    r = client.post("/v1/citations/check", content=chunks, headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 413


def test_the_thin_client_checks_citations_over_http(svc: Services, http: Any) -> None:
    client, auth = http
    remote = FreshIndexClient("http://testserver", token=auth["Authorization"].split()[1], http=client)
    packet = remote.retrieve(QUESTION, kb="default")
    assert packet.search is not None and packet.search.sources == ("docs",)
    report = remote.check_citations(BAD, packet)
    assert report["missing"] == [7] and report["ok"] is False
    assert _invalid(svc, "missing") == 1.0
    with pytest.raises(BadRequest):
        remote.check_citations("", packet)


def test_query_json_carries_the_report_and_check_citations_reads_it(svc: Services, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI builds its services from configuration; hand it this process's, to read its metrics.
    import freshindex.services as services_module

    monkeypatch.setattr(services_module, "Services", lambda _settings, **_kw: svc)
    monkeypatch.setattr(svc, "close", lambda: None)
    runner = CliRunner()
    config = ["--config", str(_config(tmp_path))]
    q = runner.invoke(cli_module.cli, [*config, "query", "Which zeppelin hangar protocol?", "--json"])
    assert q.exit_code == 0, q.output
    refused = json.loads(q.output)
    assert refused["insufficient_evidence"] and refused["search"]["next_actions"][0]["owner"] == "docs-team"
    assert refused["search"]["sources"] == ["docs"] and "docs-team" in refused["context"]
    q = runner.invoke(cli_module.cli, [*config, "query", QUESTION, "--json"])
    packet_file = tmp_path / "packet.json"
    packet_file.write_text(q.output)
    answer_file = tmp_path / "answer.txt"
    answer_file.write_text(GOOD)
    ok = runner.invoke(cli_module.cli, [*config, "check-citations", str(answer_file), "--packet", str(packet_file),
                                        "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["ok"] is True
    bad = runner.invoke(cli_module.cli, [*config, "check-citations", "-", "--packet", str(packet_file)], input=BAD)
    assert bad.exit_code == 3 and "not in the source list: [7]" in bad.output
    assert _invalid(svc, "missing") == 0.0  # the CLI counts nothing: its process is never scraped
    packet_file.write_text(json.dumps({"evidence": [_evidence(), _evidence()]}))
    forged = runner.invoke(cli_module.cli, [*config, "check-citations", str(answer_file), "--packet",
                                            str(packet_file)])
    assert forged.exit_code == 2 and "appear once" in forged.output
    assert _invalid(svc, "missing") == 0.0


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "freshindex.toml"
    path.write_text(f'data_dir = "{tmp_path / "cli-data"}"\n')
    return path
