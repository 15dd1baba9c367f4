"""Permission changes without re-embedding: `sources update`, sidecar edits, malformed sidecars, rollback.

Given an indexed folder source, when its ACL changes, then the registry's
ACL version moves at once (so the query path can deny the old points before
any rebuild), the next sync rewrites the points' payloads with vectors from
the cache (0 chunks embedded), and `snapshots verify` passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from freshindex.acl import Principal
from freshindex.core.ids import document_id
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.conftest import ROOT

DOCS = {
    "guides/rotate.md": "# Rotating the signing key\n\nRotate the signing key every ninety days with the vault "
                        "command, then restart the token service so it loads the new key.\n",
    "guides/backup.md": "# Database backups\n\nBackups of the orders database run nightly at two o'clock and are "
                        "kept for thirty days in the archive bucket.\n",
    "notes/lunch.md": "# Lunch menu\n\nThe cafeteria serves soup on Mondays and curry on Thursdays.\n",
}
QUESTION = "How do I rotate the signing key?"


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    for rel, text in DOCS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def svc(tmp_path: Path, onnx_embedder):
    services = Services(load_settings(data_dir=tmp_path / "data"), embedder=onnx_embedder)
    yield services
    services.close()


def _chunks(svc: Services, key: str) -> list[str]:
    return sorted(svc.registry.live_chunk_ids(document_id("docs", key)))


def _payloads(svc: Services, ids: list[str]) -> dict[str, dict]:
    snap = svc.registry.active_snapshot("default")
    return {p.id: p.payload for p in svc.store.retrieve(snap.collection, ids)}


def _all_chunks(svc: Services) -> list[str]:
    return sorted(c for key in DOCS for c in _chunks(svc, key))


def _sync_ok(svc: Services):
    report = sync_inline(svc, "docs")
    assert report.build_status == "built", report.build_reason
    verdict = svc.snapshots.verify(report.snapshot.id)
    assert verdict["ok"], verdict
    return report


def test_sources_update_revokes_at_once_and_the_next_sync_retags_without_embedding(svc: Services, kb: Path) -> None:
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    first = _sync_ok(svc)
    ids = _all_chunks(svc)
    before = svc.registry.chunk_status(ids)
    assert {s.acl for s in before.values()} == {("public",)}
    assert all(p["acl"] == ["public"] and p["acl_version"] == before[c].acl_version >= 1
               for c, p in _payloads(svc, ids).items())
    assert not svc.client.retrieve(QUESTION, kb="default", principal=Principal()).insufficient

    # When: public -> staff, through the command line.
    result = _cli(svc, "sources", "update", "docs", "--acl", "staff", "--json")
    out = json.loads(result.stdout)
    assert out["changed"]["acl"] == [["public"], ["staff"]]
    assert out["acl_version"] == 2 and out["documents_bumped"] == len(DOCS)
    assert out["chunks_retagged"] == len(ids) and out["documents_withheld"] == 0

    # Then: the registry says staff, with a newer ACL version than every point, before any rebuild.
    after = svc.registry.chunk_status(ids)
    assert {s.acl for s in after.values()} == {("staff",)}
    payloads = _payloads(svc, ids)
    assert all(payloads[c]["acl_version"] < after[c].acl_version for c in ids)
    assert all(after[c].document_id and after[c].source_id == "docs" for c in ids)
    assert svc.registry.active_snapshot("default").id == first.snapshot.id  # nothing was rebuilt
    assert svc.client.retrieve(QUESTION, kb="default", principal=Principal()).insufficient

    # The next sync re-tags: 0 embeds, payloads follow the registry, verify passes.
    second = _sync_ok(svc)
    assert second.run.summary["chunks_embedded"] == 0
    assert second.snapshot.id != first.snapshot.id
    payloads = _payloads(svc, ids)
    assert set(payloads) == set(ids)
    assert all(p["acl"] == ["staff"] and p["acl_version"] == after[c].acl_version for c, p in payloads.items())
    staff = Principal.of("sam", ["staff"])
    assert not svc.client.retrieve(QUESTION, kb="default", principal=staff).insufficient
    assert svc.client.retrieve(QUESTION, kb="default", principal=Principal()).insufficient

    # A rollback serves the old points again, but not the old ACL.
    svc.snapshots.rollback("default", actor="test", reason="test")
    assert svc.registry.active_snapshot("default").id == first.snapshot.id
    assert {s.acl for s in svc.registry.chunk_status(ids).values()} == {("staff",)}
    assert svc.client.retrieve(QUESTION, kb="default", principal=Principal()).insufficient
    third = _sync_ok(svc)  # the rolled-back documents are re-compared and their points re-tagged
    assert third.run.summary["chunks_embedded"] == 0
    assert all(p["acl"] == ["staff"] for p in _payloads(svc, ids).values())
    assert not svc.client.retrieve(QUESTION, kb="default", principal=staff).insufficient


def _cli(svc: Services, *args: str) -> subprocess.CompletedProcess:
    """The real command line, on this test's data directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRESHINDEX_")}
    env["FRESHINDEX_DATA_DIR"] = str(svc.settings.data_dir)
    proc = subprocess.run([sys.executable, "-m", "freshindex", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_sidecar_edit_retags_its_documents_on_the_next_sync_without_embedding(svc: Services, kb: Path) -> None:
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    _sync_ok(svc)
    guides = _chunks(svc, "guides/rotate.md") + _chunks(svc, "guides/backup.md")
    lunch = _chunks(svc, "notes/lunch.md")
    (kb / "guides" / ".freshindex-acl.json").write_text(json.dumps({"groups": ["eng"], "sensitivity": "confidential"}))
    (kb / "guides" / "rotate.md.acl.json").write_text(json.dumps({"users": ["ana"], "inherit": True}))

    report = _sync_ok(svc)
    assert report.run.summary["chunks_embedded"] == 0
    assert "guides/.freshindex-acl.json" not in svc.registry.documents_for_source("docs")  # never a document
    status = svc.registry.chunk_status(guides + lunch)
    payloads = _payloads(svc, guides + lunch)
    rotate = set(_chunks(svc, "guides/rotate.md"))
    for c in guides:
        want = ["eng", "user:ana"] if c in rotate else ["eng"]
        assert list(status[c].acl) == want and payloads[c]["acl"] == want
        assert payloads[c]["sensitivity"] == status[c].sensitivity == "confidential"
        assert payloads[c]["acl_version"] == status[c].acl_version
    assert all(payloads[c]["acl"] == ["public"] for c in lunch)
    assert svc.client.retrieve(QUESTION, kb="default", principal=Principal()).insufficient
    assert not svc.client.retrieve(QUESTION, kb="default", principal=Principal.of("ana")).insufficient

    # Editing the sidecar again (eng -> ops) moves the version again; removing it restores the default.
    versions = {c: status[c].acl_version for c in guides}
    (kb / "guides" / ".freshindex-acl.json").write_text(json.dumps({"groups": ["ops"]}))
    _sync_ok(svc)
    status = svc.registry.chunk_status(guides)
    assert all(status[c].acl_version > versions[c] for c in guides)
    (kb / "guides" / ".freshindex-acl.json").unlink()
    (kb / "guides" / "rotate.md.acl.json").unlink()
    report = _sync_ok(svc)
    assert report.run.summary["chunks_embedded"] == 0
    assert all(p["acl"] == ["public"] for p in _payloads(svc, guides).values())


def test_a_malformed_sidecar_is_recorded_and_never_serves_wider(svc: Services, kb: Path) -> None:
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default",
                            setup=SourceSetup(acl=["staff"]))
    _sync_ok(svc)
    rotate = _chunks(svc, "guides/rotate.md")
    (kb / "guides" / "rotate.md.acl.json").write_text('{"groups": ["public"')  # broken JSON
    (kb / "notes" / "new.md").write_text("# New\n\nA new note about the signing key rotation schedule.\n")
    (kb / "notes" / "new.md.acl.json").write_text(json.dumps({"groups": ["public"], "sensitivity": "bogus"}))

    report = sync_inline(svc, "docs")
    errors = {e.key: e.reason for e in report.errors}
    assert errors == {"guides/rotate.md": "acl_invalid", "notes/new.md": "acl_invalid"}
    assert svc.metrics.registry.get_sample_value(
        "freshindex_document_errors_total", {"source": "docs", "reason": "acl_invalid"}) == 2
    # The existing document keeps its previous ACL; the new one is not served at all.
    assert {s.acl for s in svc.registry.chunk_status(rotate).values()} == {("staff",)}
    assert all(p["acl"] == ["staff"] for p in _payloads(svc, rotate).values())
    assert svc.registry.live_chunk_ids(document_id("docs", "notes/new.md")) == set()
    anonymous = svc.client.retrieve("signing key rotation", kb="default", principal=Principal())
    assert anonymous.insufficient

    # Fixing the sidecars heals both on the next sync, with the fixed ACLs.
    (kb / "guides" / "rotate.md.acl.json").write_text(json.dumps({"groups": ["eng"]}))
    (kb / "notes" / "new.md.acl.json").write_text(json.dumps({"groups": ["eng"]}))
    report = _sync_ok(svc)
    assert report.errors == ()
    new = sorted(svc.registry.live_chunk_ids(document_id("docs", "notes/new.md")))
    assert new and all(p["acl"] == ["eng"] for p in _payloads(svc, rotate + new).values())
