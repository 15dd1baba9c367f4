"""Tenants sharing a knowledge base read only their own figures in its health and snapshot listing.

Real syncs into one knowledge base ``shared`` (tenant acme: three pages and a
broken PDF; tenant beta: five pages) and one ``solo`` knowledge base of acme
alone; real API keys per tenant, one without a tenant (a single-tenant
operator) and one of acme in ``auth.admin_group``; real HTTP through
FastAPI's TestClient.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from freshindex.api.app import create_app
from freshindex.api.routes_kbs import KB_WIDE_HEALTH, KB_WIDE_SNAPSHOT
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

SOURCES = {"acme-docs": ("shared", "acme", 3), "beta-docs": ("shared", "beta", 5), "acme-solo": ("solo", "acme", 2)}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Services, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("tenants")
    svc = Services(load_settings(data_dir=root / "data", embedding={"provider": "hashing"},
                                 auth={"mode": "keys", "admin_group": "ops"}, api={"rate_limit_burst": 0}))
    for sid, (kb, tenant, pages) in SOURCES.items():
        folder = root / sid
        folder.mkdir()
        for i in range(pages):
            (folder / f"{sid}-{i}.md").write_text(f"# {sid} page {i}\n\nThe {sid} handbook, page {i}, for {tenant}.\n")
        svc.registry.add_source(sid, kind="folder", location=str(folder), owner="t", kb=kb,
                                setup=SourceSetup(tenant=tenant))
    (root / "acme-docs" / "broken.pdf").write_bytes(b"%PDF-1.7\nthis is not a pdf at all\n")
    for sid in SOURCES:
        sync_inline(svc, sid)
    keys = {name: {"Authorization": f"Bearer {svc.registry.create_api_key(name, groups, tenant=tenant).key}"}
            for name, groups, tenant in (("acme", ["eng"], "acme"), ("beta", ["eng"], "beta"),
                                         ("operator", ["eng"], None), ("admin", ["ops"], "acme"))}
    try:
        with TestClient(create_app(svc), raise_server_exceptions=False) as http:
            yield http, svc, keys
    finally:
        svc.close()


def _health(http: TestClient, keys: dict[str, Any], who: str, kb: str = "shared") -> dict[str, Any]:
    answer = http.get(f"/v1/kbs/{kb}/health", headers=keys[who])
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_each_tenant_reads_only_its_own_sources_figures_in_a_shared_health(served: Any) -> None:
    http, svc, keys = served
    whole, acme, beta = (_health(http, keys, who) for who in ("operator", "acme", "beta"))
    # Given the knowledge base's own figures (an operator's view): both tenants' chunks and acme's broken PDF
    assert whole["live_chunks"] == acme["live_chunks"] + beta["live_chunks"] and whole["documents_in_error"] == 1
    # Then each tenant counts its own chunks and errors only
    assert 0 < acme["live_chunks"] < beta["live_chunks"] < whole["live_chunks"]
    assert (acme["documents_in_error"], beta["documents_in_error"]) == (1, 0)
    assert beta["documents_in_error_by_reason"] == {} and acme["documents_in_error_by_reason"]
    # and its own last successful sync (acme's shared source synced before beta's)
    assert beta["last_successful_sync"] == svc.registry.last_successful_sync("beta-docs").isoformat()
    assert acme["last_successful_sync"] == svc.registry.last_successful_sync("acme-docs").isoformat()
    assert acme["last_successful_sync"] != beta["last_successful_sync"]
    assert set(acme["deletions_held_by_source"]) == {"acme-docs"} and "beta" not in str(acme)
    # and the figures a build computes over both tenants' sources are withheld, not someone else's
    for mine in (acme, beta):
        assert all(mine[field] is None for field in KB_WIDE_HEALTH)
        assert mine["active_snapshot"] == whole["active_snapshot"]  # every cited answer names it anyway
    assert whole["snapshots_by_status"] and whole["held_builds_by_check"] is not None


def test_a_tenant_alone_in_a_knowledge_base_reads_its_whole_figures(served: Any) -> None:
    http, _svc, keys = served
    acme, whole = _health(http, keys, "acme", "solo"), _health(http, keys, "operator", "solo")
    assert acme == whole and acme["snapshots_by_status"] == {"active": 1}
    assert http.get("/v1/kbs/solo/health", headers=keys["beta"]).status_code == 404


def test_snapshot_counts_of_a_shared_knowledge_base_are_withheld_from_tenants(served: Any) -> None:
    http, _svc, keys = served
    listed = {who: {s["id"]: s for s in http.get("/v1/snapshots", headers=keys[who]).json()}
              for who in ("acme", "beta", "operator", "admin")}
    shared = [sid for sid, s in listed["operator"].items() if s["kb"] == "shared"]
    solo = [sid for sid, s in listed["operator"].items() if s["kb"] == "solo"]
    # Given the operator's figures: the shared snapshots count both tenants' points
    assert shared and solo and all(listed["operator"][sid]["point_count"] > 0 for sid in shared)
    # Then a tenant sees the shared snapshots without their counts, and beta no solo snapshot at all
    for who in ("acme", "beta"):
        for sid in shared:
            assert all(listed[who][sid][field] is None for field in KB_WIDE_SNAPSHOT)
            assert listed[who][sid]["status"] == listed["operator"][sid]["status"]
    assert set(listed["beta"]) == set(shared)
    # and acme its own solo knowledge base whole
    assert all(listed["acme"][sid] == listed["operator"][sid] for sid in solo)
    # and a member of auth.admin_group, tenant or not, everything
    assert listed["admin"] == listed["operator"]


def test_an_admin_reads_every_figure(served: Any) -> None:
    http, _svc, keys = served
    assert _health(http, keys, "admin") == _health(http, keys, "operator")
