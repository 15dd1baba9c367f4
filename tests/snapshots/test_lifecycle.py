"""Swap, rollback, canaries, verify, prune, and archives to S3 restored elsewhere."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from freshindex.core.errors import ConfigError
from freshindex.core.ids import document_id
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.snapshots.conftest import ONE_STRATEGY


def _svc(data: Path, **overrides) -> Services:
    return Services(load_settings(data_dir=data, embedding={"provider": "hashing"}, **overrides))


@pytest.fixture
def svc(tmp_path: Path):
    s = _svc(tmp_path / "data")
    yield s
    s.close()


def _files(root: Path, files: dict[str, str | None]) -> None:
    root.mkdir(exist_ok=True)
    for name, text in files.items():
        if text is None:
            (root / name).unlink()
        else:
            (root / name).write_text(text)


def test_rollback_serves_the_previous_snapshot_and_the_next_sync_rechecks(svc: Services, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _files(src, {"a.md": "# A\n\nthe deploy window is tuesday", "b.md": "# B\n\nbeta facts"})
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    sync_inline(svc, "s")
    _files(src, {"a.md": "# A\n\nthe deploy window is friday", "b.md": None})
    assert sync_inline(svc, "s").snapshot.id == "kb1-v2"
    assert "friday" in svc.client.retrieve("deploy window", kb="kb1").evidence[0].text

    result = svc.snapshots.rollback("kb1", actor="test", reason="bad release")
    assert result["snapshot_id"] == "kb1-v1" and result["direction"] == "back"
    assert svc.store.get_alias("fi_kb1") == "fi_kb1-v1"
    packet = svc.client.retrieve("deploy window", kb="kb1")
    assert packet.snapshot_id == "kb1-v1" and "tuesday" in packet.evidence[0].text
    # b.md was deleted after kb1-v1 was built: the rollback does not bring it back.
    assert not any("beta" in e.text for e in svc.client.retrieve("beta facts", kb="kb1").evidence)
    assert result["chunks_withheld"] >= 1
    assert svc.registry.get_document(document_id("s", "a.md")).etag is None  # re-checked next sync
    assert svc.snapshots.verify("kb1-v1")["ok"]

    # The source still says friday: the next sync brings it back, incrementally.
    again = sync_inline(svc, "s")
    assert again.snapshot.id == "kb1-v3" and again.snapshot.parent_id == "kb1-v1"
    assert "friday" in svc.client.retrieve("deploy window", kb="kb1").evidence[0].text
    assert svc.snapshots.verify("kb1-v3")["ok"]
    events = svc.registry.alias_events("kb1")
    assert [(e["to"], e["actor"]) for e in events[:2]] == [("kb1-v3", "cli"), ("kb1-v1", "test")]
    assert events[1]["reason"] == "bad release"


def test_rollback_never_resurrects_a_deleted_document(svc: Services, tmp_path: Path) -> None:
    # Given a document indexed in v1, edited in v2 (its old chunk superseded), then deleted in v3
    src = tmp_path / "src"
    _files(src, {"keep.md": "# Keep\n\nthe keeper stays", "gone.md": "# Gone\n\nprivate salary table v1"})
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    sync_inline(svc, "s")
    _files(src, {"gone.md": "# Gone\n\nprivate salary table v2"})
    sync_inline(svc, "s")
    _files(src, {"gone.md": None})
    assert sync_inline(svc, "s").snapshot.id == "kb1-v3"
    gone = document_id("s", "gone.md")

    # When rolling back to v1, whose collection still holds gone.md's v1 text
    result = svc.snapshots.rollback("kb1", to="kb1-v1", actor="test", reason="bad release")
    assert result["snapshot_id"] == "kb1-v1" and result["chunks_withheld"] >= 1

    # Then the deleted document is not served, stays deleted, and keeps its tombstone
    def served() -> list[str]:
        return [e.text for e in svc.client.retrieve("private salary table", kb="kb1", limit=10).evidence]

    assert not any("salary" in t for t in served())
    assert svc.registry.get_document(gone).state == "deleted"
    assert svc.registry.tombstone_backlog("kb1") >= 1
    assert any("keeper" in e.text for e in svc.client.retrieve("keeper stays", kb="kb1").evidence)
    assert svc.snapshots.verify("kb1-v1")["ok"]

    # And the next build removes the points physically; a later sync does not bring it back either
    again = sync_inline(svc, "s")
    assert again.snapshot.id == "kb1-v4" and again.snapshot.parent_id == "kb1-v1"
    collection = svc.registry.get_snapshot("kb1-v4").collection
    ids = svc.registry.changeset_chunk_ids(svc.registry.get_snapshot("kb1-v4").changeset_ids)
    assert ids and not svc.store.retrieve(collection, sorted(ids))
    assert not any("salary" in t for t in served())
    assert svc.snapshots.verify("kb1-v4")["ok"]


def test_swap_forward_again_after_a_rollback(svc: Services, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _files(src, {"a.md": "# A\n\nalpha one"})
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    sync_inline(svc, "s")
    _files(src, {"a.md": "# A\n\nalpha two"})
    sync_inline(svc, "s")
    svc.snapshots.rollback("kb1", actor="t", reason="r")
    forward = svc.snapshots.swap("kb1", "kb1-v2", actor="t", reason="it was fine")
    assert forward["direction"] == "forward"
    assert "two" in svc.client.retrieve("alpha", kb="kb1").evidence[0].text
    assert svc.snapshots.verify("kb1-v2")["ok"]


def test_a_failing_canary_holds_the_swap(svc: Services, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _files(src, {"refunds.md": "# Refunds\n\nrefunds above 500 need the controller", "x.md": "# X\n\nother"})
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    svc.registry.add_canary("kb1", "who approves refunds", "refunds.md")
    assert sync_inline(svc, "s").build_status == "built"
    _files(src, {"refunds.md": None})
    held = sync_inline(svc, "s")
    assert held.build_status == "failed" and "canary" in (held.build_reason or "")
    assert svc.store.get_alias("fi_kb1") == "fi_kb1-v1"
    assert svc.metrics.value("freshindex_verification_failures_total", kb="kb1", check="canary") == 1


@ONE_STRATEGY  # one build, the first: full under either strategy
def test_verify_finds_an_orphan_point(svc: Services, tmp_path: Path) -> None:
    from freshindex.vectorstore import PointRecord

    src = tmp_path / "src"
    _files(src, {"a.md": "# A\n\nalpha"})
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    sync_inline(svc, "s")
    assert svc.snapshots.verify("kb1-v1")["ok"]
    svc.store.upsert("fi_kb1-v1", [PointRecord(str(uuid.uuid4()), [1.0] + [0.0] * 63, {"key": "ghost.md"})])
    report = svc.snapshots.verify("kb1-v1")
    assert not report["ok"] and report["check"] == "count"


def test_prune_never_drops_the_active_snapshot_or_its_parent(tmp_path: Path) -> None:
    svc = _svc(tmp_path / "data", snapshots={"keep_versions": 2})
    src = tmp_path / "src"
    _files(src, {"a.md": "# A\n\nv1"})
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    for n in range(2, 5):
        sync_inline(svc, "s")
        _files(src, {"a.md": f"# A\n\nversion {n}"})
    sync_inline(svc, "s")  # v4 active, keep 2: v3, v4
    svc.snapshots.swap("kb1", "kb1-v3", actor="t", reason="r")
    sync_inline(svc, "s")  # v5 from v3 (the source was re-checked)
    statuses = {s.id: s.status for s in svc.registry.list_snapshots("kb1")}
    assert statuses["kb1-v5"] == "active" and statuses["kb1-v3"] == "retired"
    assert statuses["kb1-v4"] == "pruned"
    assert "fi_kb1-v3" in svc.store.list_collections()
    svc.close()


@ONE_STRATEGY  # one build, the first (full); archive and restore build nothing
def test_archive_to_s3_and_restore_into_a_fresh_data_dir(tmp_path: Path, s3_server: str, onnx_embedder,
                                                         sample_kb: Path) -> None:
    import boto3

    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", aws_access_key_id="k",
                 aws_secret_access_key="s").create_bucket(Bucket="fi-archives")
    snapshots = {"archive_uri": "s3://fi-archives/prod", "s3": {"endpoint_url": s3_server, "access_key_id": "k",
                                                                 "secret_access_key": "s"}}
    questions = ["How do I roll back a database migration?", "price of the Team plan",
                 "hotel reimbursement per night", "token bucket rate limit", "who gets production access"]
    first = Services(load_settings(data_dir=tmp_path / "one", snapshots=snapshots), embedder=onnx_embedder)
    first.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    sync_inline(first, "docs")
    # deterministic: byte-stable blocks (the default fence token is fresh per call)
    before = [first.client.retrieve(q, kb="default", deterministic=True).as_dict() for q in questions]
    points = first.registry.get_snapshot("default-v1").point_count
    archived = first.snapshots.archive("default-v1")
    assert archived["uri"] == "s3://fi-archives/prod/default/default-v1.tar" and len(archived["sha256"]) == 64
    assert first.registry.get_snapshot("default-v1").archive_sha256 == archived["sha256"]
    first.close()

    fresh = Services(load_settings(data_dir=tmp_path / "two", snapshots=snapshots), embedder=onnx_embedder)
    restored = fresh.snapshots.restore("default-v1", actor="test")
    assert restored["status"] == "active" and restored["points"] == points
    after = [fresh.client.retrieve(q, kb="default", deterministic=True).as_dict() for q in questions]
    assert after == before
    assert fresh.snapshots.verify("default-v1")["ok"]
    assert fresh.registry.cache_size(onnx_embedder.model_id) >= restored["points"] - 1
    with pytest.raises(ConfigError, match="fresh data directory"):
        fresh.snapshots.restore("default-v1", actor="test")
    fresh.close()


@ONE_STRATEGY  # one build, the first (full); archive and restore build nothing
def test_a_corrupt_archive_is_refused(tmp_path: Path) -> None:
    from freshindex.core.errors import StoreError

    archives = tmp_path / "archives"
    svc = _svc(tmp_path / "data", snapshots={"archive_uri": str(archives)})
    src = tmp_path / "src"
    _files(src, {"a.md": "# A\n\nalpha"})
    svc.registry.add_source("s", kind="folder", location=str(src), owner="t", kb="kb1")
    sync_inline(svc, "s")
    svc.snapshots.archive("kb1-v1")
    svc.close()
    tar = archives / "kb1" / "kb1-v1.tar"
    data = bytearray(tar.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tar.write_bytes(bytes(data))
    fresh = _svc(tmp_path / "fresh", snapshots={"archive_uri": str(archives)})
    with pytest.raises(StoreError, match="corrupt"):
        fresh.snapshots.restore("kb1-v1", actor="t")
    assert fresh.registry.list_snapshots("kb1") == []
    fresh.close()
