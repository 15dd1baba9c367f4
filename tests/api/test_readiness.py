"""Readiness is per process, and request input never becomes a metric label.

Given a real HTTP server (uvicorn in a thread, as in test_http.py) over a
registry where one knowledge base serves and another was just registered.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from freshindex.api.app import create_app
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.api.served import app_in_thread
from tests.conftest import free_port


@pytest.fixture
def served(tmp_path: Path, onnx_embedder, sample_kb: Path) -> Iterator[tuple[Services, str]]:
    svc = Services(load_settings(data_dir=tmp_path / "data"), embedder=onnx_embedder)
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    try:
        with app_in_thread(create_app(svc)) as url:
            yield svc, url
    finally:
        svc.close()


def test_new_kb_without_snapshot_is_reported_not_fatal(served: tuple[Services, str], tmp_path: Path) -> None:
    svc, url = served
    # When a new team's source is registered but never synced
    (tmp_path / "newteam").mkdir()
    svc.registry.add_source("newteam-docs", kind="folder", location=str(tmp_path / "newteam"), owner="new",
                            kb="newteam")
    with httpx.Client(base_url=url, timeout=30) as http:
        ready = http.get("/readyz")
        # Then the process stays ready and names each kb's state
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"ready": True, "kbs": {"default": "serving default-v1", "newteam": "no snapshot yet"}}
        # and the existing kb keeps answering while the new one says why it cannot
        answered = http.post("/v1/query", json={"question": "How do I roll back a database migration?"})
        assert answered.status_code == 200 and answered.json()["evidence"]
        pending = http.post("/v1/query", json={"question": "anything", "kb": "newteam"})
        assert pending.status_code == 200 and pending.json()["insufficient_evidence"] is True


def test_unready_when_registry_unreachable(tmp_path: Path) -> None:
    # Given a registry URL nothing listens on (PostgreSQL on a closed port)
    from freshindex.registry import Registry, db

    port = free_port()
    # Registry.open would refuse at once; an unopened engine lets only the probe touch it
    svc = Services(load_settings(data_dir=tmp_path / "data"),
                   registry=Registry(db.make_engine(f"postgresql+psycopg://u@127.0.0.1:{port}/x")))
    try:
        with app_in_thread(create_app(svc)) as url, httpx.Client(base_url=url, timeout=30) as http:
            assert http.get("/healthz").status_code == 200
            ready = http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["ready"] is False and ready.json()["dependency"] == "registry"
        assert svc.metrics.value("freshindex_readiness_failures_total", dependency="registry") == 1
    finally:
        svc.close()


def test_unknown_kbs_are_404_and_create_no_series(served: tuple[Services, str]) -> None:
    _svc, url = served
    rng = random.Random(7)
    names = ["".join(rng.choices(string.ascii_lowercase + string.digits, k=12)) for _ in range(50)]
    with httpx.Client(base_url=url, timeout=30) as http:
        codes = [http.post("/v1/query", json={"question": "x", "kb": n}).status_code for n in names]
        health = http.get(f"/v1/kbs/{names[0]}/health")
        metrics = http.get("/metrics").text
    assert codes == [404] * 50
    assert health.status_code == 404
    leaked = [n for n in names if n in metrics]
    assert leaked == []
    assert 'freshindex_unknown_kb_requests_total{endpoint="query"} 50.0' in metrics
    kb_labels = {line.split('kb="', 1)[1].split('"', 1)[0] for line in metrics.splitlines()
                 if 'kb="' in line and not line.startswith("#")}
    assert kb_labels <= {"default"}
