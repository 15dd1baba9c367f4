"""The query metrics count on every path: the library client, ``freshindex query`` and ``POST /v1/query``.

Latency (``freshindex_query_seconds{stage}``), empty recalls, insufficient
evidence by source, and (where answers are checked) invalid citations, all
read from the one process's ``/metrics`` exposition.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from freshindex import cli as cli_module
from freshindex.acl import Principal
from freshindex.api.app import create_app
from freshindex.services import Services
from tests.api.release_kb import release_kb

ANSWERABLE = "When are releases cut from the main branch?"
UNANSWERABLE = "Which quantum entanglement protocol does the zeppelin hangar use?"


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    with release_kb(tmp_path) as services:
        yield services


def _sample(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{want}}} " if want else f"{name} "
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def _insufficient(text: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("freshindex_insufficient_evidence_total{"))


def _counts(svc: Services) -> tuple[float, float, float]:
    text = svc.metrics.render().decode()
    return (_sample(text, "freshindex_query_seconds_count", stage="total"),
            _sample(text, "freshindex_empty_recalls_total"), _insufficient(text))


def test_the_library_path_counts_latency_empty_recalls_and_insufficient_evidence(svc: Services) -> None:
    assert not svc.client.retrieve(ANSWERABLE, kb="default").insufficient
    assert _counts(svc) == (1.0, 0.0, 0.0)
    assert svc.client.retrieve(UNANSWERABLE, kb="default").insufficient
    stranger = Principal(id="mallory", groups=frozenset({"nobody"}), tenant="elsewhere")
    assert svc.client.retrieve(ANSWERABLE, kb="default", principal=stranger).insufficient
    assert _counts(svc) == (3.0, 1.0, 2.0)
    assert svc.metrics.value("freshindex_insufficient_evidence_total", source="_none") >= 1.0


def test_the_http_path_counts_the_same_series(svc: Services) -> None:
    key = svc.registry.create_api_key("bob", ["eng"]).key
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(svc)) as http:
        assert http.post("/v1/query", json={"question": ANSWERABLE}, headers=auth).status_code == 200
        refused = http.post("/v1/query", json={"question": UNANSWERABLE}, headers=auth).json()
        assert refused["insufficient_evidence"] and refused["search"]["next_actions"]
        other = svc.registry.create_api_key("eve", ["eng"], tenant="elsewhere").key
        assert http.post("/v1/query", json={"question": ANSWERABLE},
                         headers={"Authorization": f"Bearer {other}"}).json()["insufficient_evidence"]
        text = http.get("/metrics").text
    assert _sample(text, "freshindex_query_seconds_count", stage="total") == 3.0
    assert _sample(text, "freshindex_query_seconds_count", stage="embed") == 3.0
    assert _sample(text, "freshindex_empty_recalls_total") == 1.0
    assert _insufficient(text) == 2.0 and _sample(text, "freshindex_insufficient_evidence_total", source="_none") >= 1
    assert 'freshindex_queries_total{kb="default",outcome="insufficient"} 2.0' in text


def test_the_cli_path_counts_the_same_series(svc: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI builds its services from configuration; hand it this process's, to read its metrics.
    import freshindex.services as services_module

    monkeypatch.setattr(services_module, "Services", lambda _settings, **_kw: svc)
    monkeypatch.setattr(svc, "close", lambda: None)
    config = tmp_path / "freshindex.toml"
    config.write_text(f'data_dir = "{tmp_path / "cli-data"}"\n')
    runner = CliRunner()
    for question, extra in ((ANSWERABLE, []), (UNANSWERABLE, []), (ANSWERABLE, ["--tenant", "elsewhere"])):
        r = runner.invoke(cli_module.cli, ["--config", str(config), "query", question, "--json", *extra])
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["search"]["kb"] == "default"
    assert _counts(svc) == (3.0, 1.0, 2.0)


def test_the_library_path_counts_queries_and_withheld_hits_too(svc: Services) -> None:
    # freshindex_queries_total used to be counted by the HTTP route alone
    svc.client.retrieve(ANSWERABLE, kb="default")
    svc.client.retrieve(UNANSWERABLE, kb="default")
    assert svc.metrics.value("freshindex_queries_total", kb="default", outcome="answered") == 1.0
    assert svc.metrics.value("freshindex_queries_total", kb="default", outcome="insufficient") == 1.0


def test_a_new_query_metric_is_one_observer_method_and_a_failing_one_fails_no_query(svc: Services) -> None:
    from freshindex.injection.observer import Observers, QueryObserver
    from freshindex.services import ServiceObserver

    # Given one method: the evidence items each answered question got (the newcomer's change)
    items: list[int] = []

    class EvidenceCount(ServiceObserver):
        def finished(self, kb: str, packet) -> None:
            super().finished(kb, packet)
            items.append(len(packet.evidence))

    class Broken(QueryObserver):
        def finished(self, kb: str, packet) -> None:
            raise RuntimeError("metrics backend down")

    svc.client.observer = Observers(EvidenceCount(svc), Broken())
    packet = svc.client.retrieve(ANSWERABLE, kb="default")
    # Then it hears the query, the service's own series still count, and the broken one cost nothing
    assert items == [len(packet.evidence)] and packet.evidence
    assert svc.metrics.value("freshindex_queries_total", kb="default", outcome="answered") == 1.0
