"""The inline loop resolves ACLs with one resolver a run: each sidecar read once, absent ones never.

A document task (Celery) still makes its own resolver: its process may have
listed another run, so the sidecars it knows of are not this run's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from freshindex.acl.resolution import AclResolver, SourceAcl
from freshindex.core.ids import document_id
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.batch import RunBatch
from freshindex.workers.connectors.folder import FolderConnector
from freshindex.workers.runner import sync_inline

PAGES = 12


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    for i in range(PAGES):
        page = root / "team" / ("ops" if i % 2 else "dev") / "deep" / f"page{i}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"# Page {i}\n\nRunbook step {i}: restart the queue consumer number {i} after a deploy.\n")
    (root / "team" / "ops" / ".freshindex-acl.json").write_text(json.dumps({"groups": ["ops"]}))
    (root / "team" / "ops" / "deep" / "page1.md.acl.json").write_text(json.dumps({"users": ["ana"], "inherit": True}))
    return root


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    fetch = FolderConnector.fetch

    def counted(self: FolderConnector, key: str) -> bytes:
        if key.endswith((".freshindex-acl.json", ".acl.json")):
            reads.append(key)
        return fetch(self, key)

    monkeypatch.setattr(FolderConnector, "fetch", counted)
    return reads


def test_an_inline_sync_reads_each_sidecar_once_and_no_absent_one(tmp_path: Path, kb: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
        reads = _reads(monkeypatch)
        report = sync_inline(svc, "docs")
        assert report.build_status == "built", report.build_reason
        assert sorted(reads) == ["team/ops/.freshindex-acl.json", "team/ops/deep/page1.md.acl.json"]
        for i in range(PAGES):
            doc = svc.registry.get_document(document_id("docs", f"team/{'ops' if i % 2 else 'dev'}/deep/page{i}.md"))
            want = (["ops", "user:ana"] if i == 1 else ["ops"]) if i % 2 else ["public"]
            assert doc is not None and doc.acl is not None and list(doc.acl) == want, (i, doc)

        # A sidecar edited between syncs is read again by the next run (the resolver lives one run).
        (kb / "team" / "ops" / ".freshindex-acl.json").write_text(json.dumps({"groups": ["sre"]}))
        (kb / "team" / "dev" / "deep" / "page0.md").write_text("# Page 0\n\nRestart the consumer twice.\n")
        reads.clear()
        assert sync_inline(svc, "docs").build_status == "built"
        assert "team/ops/.freshindex-acl.json" in reads
        assert not [r for r in reads if r.startswith("team/dev/")]
        ops = svc.registry.get_document(document_id("docs", "team/ops/deep/page3.md"))
        assert ops is not None and ops.acl is not None and list(ops.acl) == ["sre"]
    finally:
        svc.close()


def test_the_run_resolver_is_made_again_when_the_connector_or_the_source_acl_changes() -> None:
    batch = RunBatch(None, 1, 1, "docs", [])  # type: ignore[arg-type]
    batch.sidecar_keys = frozenset({"a/.freshindex-acl.json"})
    made: list[frozenset[str] | None] = []

    def make(keys: frozenset[str] | None) -> AclResolver:
        made.append(keys)
        return AclResolver(SourceAcl("docs", ("public",)), read=lambda _k: None, sidecar_keys=keys)

    one, two = object(), object()
    first = batch.acl_resolver(one, SourceAcl("docs", ("public",)), make)
    assert batch.acl_resolver(one, SourceAcl("docs", ("public",)), make) is first
    assert batch.acl_resolver(two, SourceAcl("docs", ("public",)), make) is not first
    assert batch.acl_resolver(two, SourceAcl("docs", ("staff",)), make) is not first
    assert made == [frozenset({"a/.freshindex-acl.json"})] * 3


def test_without_a_known_listing_every_candidate_sidecar_is_read() -> None:
    """A partial listing (or a document task) knows no sidecars: the resolver reads every candidate."""
    asked: list[str] = []

    def read(key: str) -> bytes | None:
        asked.append(key)
        return None

    AclResolver(SourceAcl("docs", ("public",)), read=read, sidecar_keys=None).resolve("a/b/page.md")
    assert asked == [".freshindex-acl.json", "a/.freshindex-acl.json", "a/b/.freshindex-acl.json",
                     "a/b/page.md.acl.json"]
