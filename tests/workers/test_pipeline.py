"""The whole pipeline in-process on the sample knowledge base, with the real model."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from freshindex.acl import Principal
from freshindex.core.ids import document_id
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import pipeline, planner
from freshindex.workers.runner import EXIT_NOTHING_INDEXED, EXIT_OK, sync_inline
from tests.conftest import EXAMPLES


@pytest.fixture
def svc(tmp_path: Path, onnx_embedder):
    services = Services(load_settings(data_dir=tmp_path / "data"), embedder=onnx_embedder)  # one model for all tests
    yield services
    services.close()


def _apply_change_set(kb: Path) -> None:
    changes = EXAMPLES / "changes"
    shutil.copytree(changes / "edit", kb, dirs_exist_ok=True)
    shutil.copytree(changes / "add", kb, dirs_exist_ok=True)
    for line in (changes / "delete.txt").read_text().splitlines():
        (kb / line).unlink()


def _embedded_per_doc(svc: Services, run_id: int) -> dict[str, int]:
    from sqlalchemy import select

    from freshindex.registry.schema import DocumentResult

    with svc.registry.session() as s:
        rows = s.scalars(select(DocumentResult).where(DocumentResult.sync_run_id == run_id)).all()
        return {r.key: r.chunks_embedded for r in rows}


def test_second_sync_embeds_only_the_change_and_third_sync_nothing(svc: Services, sample_kb: Path) -> None:
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    first = sync_inline(svc, "docs")
    assert first.run.status == "succeeded" and first.build_status == "built"
    assert first.snapshot.id == "default-v1"
    total = first.run.summary["chunks_embedded"]
    assert total == first.snapshot.point_count > 10

    deleted_doc = document_id("docs", "notes/incident-2026-03.txt")
    deleted_chunks = svc.registry.live_chunk_ids(deleted_doc)
    _apply_change_set(sample_kb)
    second = sync_inline(svc, "docs")
    docs = second.run.summary["documents"]
    assert (docs["added"], docs["modified"], docs["deleted"], docs["failed"]) == (1, 1, 1, 0)
    per_doc = _embedded_per_doc(svc, second.run.id)
    assert set(k for k, v in per_doc.items() if v) == {"guides/release.md", "guides/faq.md"}
    assert per_doc["guides/release.md"] == 1  # one paragraph changed, one chunk re-embedded
    assert second.run.summary["chunks_embedded"] == sum(per_doc.values())
    assert second.run.summary["tombstones"] == len(deleted_chunks) + 1
    assert second.snapshot.id == "default-v2" and second.snapshot.strategy == "incremental"
    assert second.snapshot.point_count == svc.registry.count_live("default")

    third = sync_inline(svc, "docs")
    assert third.run.summary["chunks_embedded"] == 0
    assert third.run.summary["documents_changed"] == 0
    assert third.build_status == "unchanged" and third.snapshot.id == "default-v2"
    assert [s.id for s in svc.registry.list_snapshots("default")] == ["default-v2", "default-v1"]

    packet = svc.client.retrieve("Who approves refunds above 10,000 USD?", kb="default")
    assert packet.snapshot_id == "default-v2"
    assert packet.evidence[0].key == "guides/faq.md" and "CFO" in packet.evidence[0].text
    gone = svc.client.retrieve("broker ran out of disk, invoices delayed", kb="default", limit=10)
    assert all(e.key != "notes/incident-2026-03.txt" for e in gone.evidence)


def test_bad_input_is_recorded_per_document_and_the_rest_is_indexed(svc: Services, sample_kb: Path) -> None:
    (sample_kb / "bad").mkdir()
    (sample_kb / "bad" / "binary.md").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50)
    (sample_kb / "bad" / "latin1.txt").write_bytes("Caf\u00e9 au lait".encode("latin-1"))
    os.symlink(sample_kb / "bad" / "nowhere.md", sample_kb / "bad" / "unreadable.md")
    (sample_kb / "bad" / "broken.pdf").write_bytes(b"%PDF-1.4 truncated")
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    report = sync_inline(svc, "docs")
    reasons = {e.key: e.reason for e in report.errors}
    assert reasons == {
        "bad/binary.md": "binary_content",
        "bad/latin1.txt": "invalid_encoding",
        "bad/unreadable.md": "unreadable",
        "bad/broken.pdf": "parse_failed",
    }
    assert all(e.detail for e in report.errors)
    assert report.run.status == "partial" and report.exit_code == EXIT_OK
    assert report.run.summary["documents"]["added"] == 8
    assert svc.metrics.value("freshindex_document_errors_total", source="docs", reason="binary_content") == 1
    assert not svc.client.retrieve("release rollback", kb="default").insufficient
    # The same bad files, unchanged, are not retried (except transient reasons).
    again = sync_inline(svc, "docs")
    assert {e.key for e in again.errors} == {"bad/unreadable.md"}


def test_a_sync_where_nothing_can_be_indexed_fails(svc: Services, tmp_path: Path) -> None:
    kb = tmp_path / "allbad"
    kb.mkdir()
    (kb / "a.md").write_bytes(b"\x00\x01\x02\x03" * 100)
    svc.registry.add_source("bad", kind="folder", location=str(kb), owner="t", kb="default")
    report = sync_inline(svc, "bad")
    assert report.run.status == "failed" and report.exit_code == EXIT_NOTHING_INDEXED


def test_a_redelivered_document_task_changes_nothing(svc: Services, sample_kb: Path) -> None:
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    ctx = svc.pipeline
    plan = planner.plan_sync(ctx, "docs")
    doc = next(d for d in plan.documents if d.key == "guides/release.md")
    task = pipeline.DocumentTask(plan.run_id, plan.changeset_id, "docs", doc.key, doc.etag, doc.size)
    first = pipeline.process_document(ctx, task)
    again = pipeline.process_document(ctx, task)
    assert first.outcome == "added" and first.chunks_embedded > 0
    assert again.outcome == "unchanged" and again.chunks_embedded == 0
    ops = svc.registry.changeset_ops([plan.changeset_id])
    assert len(ops) == first.chunks_added
    assert svc.registry.run_progress(plan.run_id)[0] == 1


def test_acl_filters_inside_the_query(svc: Services, sample_kb: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "salaries.md").write_text("# Salary bands\n\nStaff engineer salary band is 200k to 260k USD.\n")
    svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
    svc.registry.add_source("hr", kind="folder", location=str(secret), owner="hr", kb="default",
                            setup=SourceSetup(acl=["hr"]))
    sync_inline(svc, "docs")
    sync_inline(svc, "hr")
    q = "What is the salary band of a staff engineer?"
    outsider = svc.client.retrieve(q, kb="default", principal=Principal.of("eve", ["eng"]))
    insider = svc.client.retrieve(q, kb="default", principal=Principal.of("hana", ["hr"]))
    assert all(e.source_id != "hr" for e in outsider.evidence)
    assert "acl" not in outsider.dropped  # never a candidate: filtered inside the query
    assert insider.evidence[0].source_id == "hr"


def test_an_s3_source_syncs_through_the_pipeline(tmp_path: Path, s3_server: str) -> None:
    from freshindex.workers.connectors.s3 import s3_client

    client = s3_client(endpoint_url=s3_server, region="us-east-1", access_key_id="k", secret_access_key="s")
    client.create_bucket(Bucket="kb-sync")
    client.put_object(Bucket="kb-sync", Key="handbook/leave.md", Body=b"# Leave\n\nEveryone gets 25 days of leave.")
    client.put_object(Bucket="kb-sync", Key="handbook/../escape.md", Body=b"# Escape\n\nshould never be indexed")
    settings = load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                             sources={"s3": {"endpoint_url": s3_server, "access_key_id": "k",
                                             "secret_access_key": "s"}})
    svc = Services(settings)
    try:
        svc.registry.add_source("hb", kind="s3", location="s3://kb-sync/handbook", owner="hr", kb="default")
        report = sync_inline(svc, "hb")
        assert report.run.summary["documents"]["added"] == 1
        assert {e.key: e.reason for e in report.errors} == {"../escape.md": "unsafe_key"}
        assert svc.client.retrieve("days of leave", kb="default").evidence[0].key == "leave.md"
        client.delete_object(Bucket="kb-sync", Key="handbook/leave.md")
        after = sync_inline(svc, "hb")
        assert after.run.summary["documents"]["deleted"] == 1 and after.run.summary["tombstones"] == 1
    finally:
        svc.close()


def test_a_kept_chunk_whose_lines_moved_gets_its_citation_rewritten_without_embedding(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    body = 'def settle(invoice):\n    """Mark an invoice as settled."""\n    return invoice.close()\n'
    (src / "billing.py").write_text(body)
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("code", kind="folder", location=str(src), owner="t", kb="default")
        sync_inline(svc, "code")
        hit = svc.client.retrieve("settle invoice", kb="default").evidence[0]
        assert hit.anchor == "L1-L3"
        (src / "billing.py").write_text('def audit(ledger):\n    return ledger.check()\n\n\n' + body)
        report = sync_inline(svc, "code")
        assert report.run.summary["chunks_embedded"] == 1  # only the new function
        moved = next(e for e in svc.client.retrieve("settle invoice", kb="default").evidence if "settle" in e.text)
        assert moved.chunk_id == hit.chunk_id and moved.anchor == "L5-L7"
    finally:
        svc.close()
