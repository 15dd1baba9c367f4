"""The HTTP service over a real socket (uvicorn in a thread)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from freshindex.api.app import create_app
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.api.served import app_in_thread


@pytest.fixture
def server(tmp_path: Path, onnx_embedder, sample_kb: Path) -> Iterator[str]:
    svc = Services(load_settings(data_dir=tmp_path / "data", api={"token": "t0ken"}), embedder=onnx_embedder)
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    try:
        with app_in_thread(create_app(svc)) as url:
            yield url
    finally:
        svc.close()


def test_health_readiness_metrics_and_query(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        ready = http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["kbs"] == {"default": "serving default-v1"}
        assert http.post("/v1/query", json={"question": "rollback"}).status_code == 401
        auth = {"Authorization": "Bearer t0ken"}
        r = http.post("/v1/query", json={"question": "How do I roll back a database migration?"}, headers=auth)
        body = r.json()
        assert r.status_code == 200 and body["snapshot_id"] == "default-v1"
        assert body["evidence"][0]["key"] == "guides/release.md"
        # The hashing embedder ties the page's deployment and migration sections (first dense vs first lexical).
        assert any("guides/release.md#database-migration" in e["citation"] for e in body["evidence"][:2])
        unknown = http.post("/v1/query", json={"question": "x", "kb": "nothing-here"}, headers=auth)
        assert unknown.status_code == 404
        metrics = http.get("/metrics").text
        assert 'freshindex_queries_total{kb="default",outcome="answered"} 1.0' in metrics
        assert 'freshindex_live_chunks{kb="default"}' in metrics
        assert 'freshindex_snapshots{kb="default",status="active"} 1.0' in metrics
        health = http.get("/v1/kbs/default/health", headers=auth).json()
        assert health["active_snapshot"] == "default-v1" and health["tombstone_backlog"] == 0
        assert http.post("/v1/query", json={"question": ""}, headers=auth).status_code == 422
