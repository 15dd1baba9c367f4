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


def test_the_run_resolver_is_made_again_when_the_connector_the_source_acl_or_the_location_changes() -> None:
    batch = RunBatch(None, 1, 1, "docs", [])  # type: ignore[arg-type]
    batch.sidecars = ("/src", frozenset({"a/.freshindex-acl.json"}))
    made: list[frozenset[str] | None] = []

    def make(keys: frozenset[str] | None) -> AclResolver:
        made.append(keys)
        return AclResolver(SourceAcl("docs", ("public",)), read=lambda _k: None, sidecar_keys=keys)

    one, two = object(), object()
    first = batch.acl_resolver(one, SourceAcl("docs", ("public",)), "/src", make)
    assert batch.acl_resolver(one, SourceAcl("docs", ("public",)), "/src", make) is first
    assert batch.acl_resolver(two, SourceAcl("docs", ("public",)), "/src", make) is not first
    assert batch.acl_resolver(two, SourceAcl("docs", ("staff",)), "/src", make) is not first
    assert made == [frozenset({"a/.freshindex-acl.json"})] * 3
    # The source moved during the run: the sidecars listed at the old location say nothing there
    batch.acl_resolver(two, SourceAcl("docs", ("staff",)), "/elsewhere", make)
    assert made[-1] is None


def test_a_sidecar_outage_fails_its_document_not_the_run_and_a_kept_error_is_raised_anew() -> None:
    from freshindex.acl.resolution import UNAVAILABLE_PAUSE_S, UNAVAILABLE_READS, AclSourceError
    from freshindex.core.errors import SourceError

    reads: list[str] = []
    broken = {"ok": False}

    def read(key: str) -> bytes | None:
        reads.append(key)
        if key == ".freshindex-acl.json" and not broken["ok"]:
            raise SourceError("503 SlowDown")
        return b'{"groups": ["ops"]}' if key == ".freshindex-acl.json" else None

    resolver = AclResolver(SourceAcl("docs", ("public",), kinds=frozenset({"sidecar"})), read=read,
                           sidecar_keys={".freshindex-acl.json"})
    with pytest.raises(AclSourceError) as first:
        resolver.resolve("a.md")
    assert first.value.reason == AclSourceError.UNAVAILABLE
    broken["ok"] = True  # the outage passes: the next document reads the sidecar again
    assert list(resolver.resolve("b.md").tokens) == ["ops"]
    # An outage that goes on is read UNAVAILABLE_READS times in a row, then paused (a clock that stands still)
    broken["ok"] = False
    now = [0.0]
    again = AclResolver(SourceAcl("docs", ("public",), kinds=frozenset({"sidecar"})), read=read,
                        sidecar_keys={".freshindex-acl.json"}, clock=lambda: now[0])
    reads.clear()
    errors = []
    for n in range(UNAVAILABLE_READS + 3):
        with pytest.raises(AclSourceError) as raised:
            again.resolve(f"p{n}.md")
        errors.append(raised.value)
    assert reads == [".freshindex-acl.json"] * UNAVAILABLE_READS
    assert all(e.reason == AclSourceError.UNAVAILABLE for e in errors)
    # Each document gets an error of its own (one kept and raised again would chain every caller's frames)
    assert len({id(e) for e in errors}) == len(errors)
    # Past the pause it is read again, and once it answers the rest of the run reads what it says
    now[0] += UNAVAILABLE_PAUSE_S - 0.1
    with pytest.raises(AclSourceError):
        again.resolve("still-paused.md")
    assert len(reads) == UNAVAILABLE_READS
    now[0] += 0.2
    broken["ok"] = True
    assert list(again.resolve("after.md").tokens) == ["ops"] and len(reads) == UNAVAILABLE_READS + 1


def test_without_a_known_listing_every_candidate_sidecar_is_read() -> None:
    """A partial listing (or a document task) knows no sidecars: the resolver reads every candidate."""
    asked: list[str] = []

    def read(key: str) -> bytes | None:
        asked.append(key)
        return None

    AclResolver(SourceAcl("docs", ("public",)), read=read, sidecar_keys=None).resolve("a/b/page.md")
    assert asked == [".freshindex-acl.json", "a/.freshindex-acl.json", "a/b/.freshindex-acl.json",
                     "a/b/page.md.acl.json"]


def test_a_git_sources_revisions_of_one_commit_share_the_run_resolver() -> None:
    """A git source hands each document its own ``GitRevision`` of the planned commit: one resolver still serves."""
    from types import SimpleNamespace

    from freshindex.workers.connectors.git import GitRevision

    repo, other = object(), object()

    def rev(owner: object, commit: str) -> GitRevision:
        return GitRevision(owner, SimpleNamespace(commit=commit))  # type: ignore[arg-type]

    assert rev(repo, "c1") == rev(repo, "c1") and hash(rev(repo, "c1")) == hash(rev(repo, "c1"))
    assert rev(repo, "c1") != rev(repo, "c2") and rev(repo, "c1") != rev(other, "c1")
    batch = RunBatch(None, 1, 1, "docs", [])  # type: ignore[arg-type]
    made: list[object] = []

    def make(keys: frozenset[str] | None) -> AclResolver:
        made.append(keys)
        return AclResolver(SourceAcl("docs", ("public",)), read=lambda _k: None, sidecar_keys=keys)

    for _ in range(3):
        batch.acl_resolver(rev(repo, "c1"), SourceAcl("docs", ("public",)), "/repo", make)
    assert len(made) == 1
