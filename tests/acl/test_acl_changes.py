"""ACL changes reach the very next query, over real credentials and the real pipeline.

Each test builds a small knowledge base through the real sync pipeline
(SQLite registry, Qdrant Edge, the hashing embedder: access control does
not depend on the model) and asks over the HTTP app with API keys.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from freshindex.acl import Principal
from freshindex.api.app import create_app
from freshindex.cli.acl import update_source
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

HR_TEXT = "Salary bands for staff engineers are reviewed each March by the compensation committee."
HR_QUESTION = "When are salary bands for staff engineers reviewed by the compensation committee?"
PUBLIC_TEXT = "Releases are cut every Tuesday from the main branch after the freeze."


def _services(data: Path) -> Services:
    return Services(load_settings(data_dir=data, embedding={"provider": "hashing"}, auth={"mode": "keys"}))


def _keys(body: dict[str, Any]) -> list[str]:
    return [e["key"] for e in body["evidence"]]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[tuple[Services, Path]]:
    docs = tmp_path / "docs"
    (docs / "hr").mkdir(parents=True)
    (docs / "release.md").write_text(f"# Releases\n\n{PUBLIC_TEXT}\n")
    (docs / "hr" / "salaries.md").write_text(f"# Compensation\n\n{HR_TEXT}\n")
    svc = _services(tmp_path / "data")
    svc.registry.add_source("docs", kind="folder", location=str(docs), owner="t", kb="default")
    assert sync_inline(svc, "docs").build_status == "built"
    try:
        yield svc, docs
    finally:
        svc.close()


def test_a_narrowed_source_is_denied_on_the_next_query_and_retagged_by_the_next_sync(kb: Any) -> None:
    svc, _docs = kb
    anon, staff = Principal.of(), Principal.of("sam", ["staff"])
    before = svc.client.retrieve(HR_QUESTION, kb="default", principal=anon)
    assert "hr/salaries.md" in [e.key for e in before.evidence]
    # When the source is narrowed from public to staff, before any rebuild
    started = time.perf_counter()
    change = update_source(svc.registry, "docs", groups="staff")
    after = svc.client.retrieve(HR_QUESTION, kb="default", principal=anon)
    delay = time.perf_counter() - started
    print(f"\nACL change to first denied query: {delay * 1000:.1f} ms (registry update + one query)")
    # Then the very next anonymous query finds nothing, though the points still say public
    assert change["acl_version"] == 2 and change["documents_bumped"] == 2
    assert after.insufficient and after.snapshot_id == before.snapshot_id
    point = svc.store.retrieve(svc.store.get_alias(svc.naming.alias("default")), [before.evidence[0].chunk_id])[0]
    assert point.payload["acl"] == ["public"]
    # and the caller cannot tell why, but the audit trail can
    assert after.dropped == {} and after.withheld.get("acl_version", 0) >= 1
    denials = svc.registry.denials("default")
    assert denials and {d["reason"] for d in denials} == {"acl_version"} and denials[0]["principal"] == "anonymous"
    assert denials[0]["policy_version"] >= 2
    assert svc.metrics.value("freshindex_acl_denials_total", reason="acl_version") >= 1
    # and staff still reads it from the old points
    assert svc.client.retrieve(HR_QUESTION, kb="default", principal=staff).evidence
    # When the next sync runs: it re-tags without embedding, and verify passes
    report = sync_inline(svc, "docs")
    assert report.as_dict()["chunks_embedded"] == 0 and report.build_status == "built"
    active = svc.registry.active_snapshot("default")
    assert svc.snapshots.verify(active.id)["ok"]
    point = svc.store.retrieve(active.collection, [before.evidence[0].chunk_id])[0]
    assert point.payload["acl"] == ["staff"] and point.payload["acl_version"] >= 2
    # When the old snapshot is rolled back to, the old ACL does not come back with it
    svc.snapshots.rollback("default", to=before.snapshot_id, actor="test", reason="rollback drill")
    assert svc.registry.active_snapshot("default").id == before.snapshot_id
    rolled = svc.client.retrieve(HR_QUESTION, kb="default", principal=anon)
    assert rolled.insufficient and rolled.snapshot_id == before.snapshot_id
    assert svc.client.retrieve(HR_QUESTION, kb="default", principal=staff).evidence


def _world(root: Path, *, with_hr: bool, rule: bool) -> Services:
    docs = root / "docs"
    (docs / "hr").mkdir(parents=True)
    (docs / "release.md").write_text(f"# Releases\n\n{PUBLIC_TEXT}\n")
    if with_hr:
        (docs / "hr" / "salaries.md").write_text(f"# Compensation\n\n{HR_TEXT}\n")
    svc = _services(root / "data")
    svc.registry.add_source("docs", kind="folder", location=str(docs), owner="t", kb="default")
    if rule:
        update_source(svc.registry, "docs", rules=["hr/*=hr"])
    assert sync_inline(svc, "docs").build_status == "built"
    return svc


def test_denied_and_not_found_answer_the_same_bytes_with_different_audit_records(tmp_path: Path) -> None:
    absent = _world(tmp_path / "absent", with_hr=False, rule=False)  # the HR page never existed
    filtered = _world(tmp_path / "filtered", with_hr=True, rule=True)  # it exists, hr only, since it was indexed
    stale = _world(tmp_path / "stale", with_hr=True, rule=False)  # indexed public, then narrowed: stale points
    update_source(stale.registry, "docs", rules=["hr/*=hr"])
    bodies, worlds = {}, {"absent": absent, "filtered": filtered, "stale": stale}
    try:
        for name, svc in worlds.items():
            key = svc.registry.create_api_key("bob", ["eng"]).key
            with TestClient(create_app(svc)) as http:
                r = http.post("/v1/query", json={"question": HR_QUESTION}, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200
                # The fence token is fresh random per call (injection.render), in every world alike: mask it.
                bodies[name] = re.sub(rb"DATA-[0-9a-f]{32}", b"DATA-<token>", r.content)
        # Then the caller gets byte-identical answers
        assert bodies["absent"] == bodies["filtered"] == bodies["stale"], {k: json.loads(v) for k, v in bodies.items()}
        assert b"salaries" not in bodies["stale"] and b"Compensation" not in bodies["stale"]
        # and only the audit trail tells them apart: the stale points were denied by ACL version
        assert absent.registry.denials() == [] and filtered.registry.denials() == []
        [denial] = stale.registry.denials()
        assert denial["reason"] == "acl_version" and denial["principal"] == "bob"
        # while hr itself reads it in both worlds where it exists
        for svc in (filtered, stale):
            hr = svc.client.retrieve(HR_QUESTION, kb="default", principal=Principal.of("hana", ["hr"]))
            assert [e.key for e in hr.evidence][:1] == ["hr/salaries.md"]
    finally:
        for svc in worlds.values():
            svc.close()


def test_tenants_never_see_each_other_even_for_identical_text(tmp_path: Path) -> None:
    svc = _services(tmp_path / "data")
    try:
        for tenant in ("acme", "globex"):
            folder = tmp_path / tenant
            folder.mkdir()
            (folder / "handbook.md").write_text(f"# Handbook\n\n{HR_TEXT}\n")  # the same bytes in both tenants
            svc.registry.add_source(tenant, kind="folder", location=str(folder), owner="t", kb="default")
            update_source(svc.registry, tenant, tenant=tenant)
        first = sync_inline(svc, "acme")
        second = sync_inline(svc, "globex")
        # The vector cache shares the vectors (the second tenant embeds nothing) ...
        assert first.as_dict()["chunks_embedded"] > 0 and second.as_dict()["chunks_embedded"] == 0
        keys = {t: svc.registry.create_api_key(f"u-{t}", [], tenant=t).key for t in ("acme", "globex")}
        anon_key = svc.registry.create_api_key("u-default", []).key
        with TestClient(create_app(svc)) as http:
            def ask(key: str) -> dict[str, Any]:
                r = http.post("/v1/query", json={"question": HR_QUESTION}, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200
                return r.json()

            # ... never the payloads: each tenant sees its own copy, and only its own
            for tenant, key in keys.items():
                body = ask(key)
                assert body["evidence"] and {e["source_id"] for e in body["evidence"]} == {tenant}
            # and a principal of the default tenant sees neither
            assert ask(anon_key)["insufficient_evidence"]
            # A body cannot move a key to another tenant: tenant is not a request field at all
            r = http.post("/v1/query", json={"question": HR_QUESTION, "tenant": "globex"},
                          headers={"Authorization": f"Bearer {keys['acme']}"})
            assert {e["source_id"] for e in r.json()["evidence"]} == {"acme"}
    finally:
        svc.close()


def test_audit_denials_cli_lists_what_the_query_path_denied(kb: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from freshindex.cli import cli

    svc, _docs = kb
    update_source(svc.registry, "docs", groups="staff")
    assert svc.client.retrieve(HR_QUESTION, kb="default", principal=Principal.of()).insufficient
    data_dir = str(svc.settings.data_dir)
    env = {"FRESHINDEX_DATA_DIR": data_dir, "FRESHINDEX_EMBEDDING__PROVIDER": "hashing"}
    out = CliRunner().invoke(cli, ["audit", "denials", "--kb", "default", "--json"], env=env)
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert rows and rows[0]["reason"] == "acl_version" and rows[0]["principal"] == "anonymous"
    none = CliRunner().invoke(cli, ["audit", "denials", "--principal", "nobody"], env=env)
    assert none.exit_code == 0 and "no denials recorded" in none.output
    shutil.rmtree(tmp_path / "unused", ignore_errors=True)
