"""Structure-aware parsing and chunking seen through the real pipeline.

Given fixture documents in a folder source, synced with ``sync_inline``;
then a question answered by one table row retrieves that row (real model),
hostile or slow documents fail alone with a reason and a metric, a parser
or chunker upgrade re-chunks deliberately and says why, and a reordered
document re-embeds nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pymupdf
import pytest

from examples.fixtures.scans import scanned_pdf
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline
from tests.conftest import EXAMPLES

FIXTURES = EXAMPLES / "fixtures"


def _services(tmp_path: Path, components: dict | None = None, **sources) -> Services:
    settings = load_settings(data_dir=tmp_path / "data", sources=sources) if sources else \
        load_settings(data_dir=tmp_path / "data")
    return Services(settings, **(components or {}))


@pytest.fixture
def svc(tmp_path: Path, onnx_embedder) -> Iterator[Services]:
    services = _services(tmp_path, {"embedder": onnx_embedder})
    yield services
    services.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for rel in ("tables/regions.csv", "tables/support-sla.md", "guides/schema-rollback.md", "code/ledger.go"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / rel, root / rel)
    return root


@pytest.mark.parametrize(
    ("question", "row"),
    [
        ("What is the egress price per GB in Singapore?", "| ap-southeast-1 | Singapore | 0.025 | 0.12 | 47 |"),
        ("How much does storage cost per GB-month in Frankfurt?", "| eu-central-1 | Frankfurt | 0.0245 | 0.09 |"),
        ("What is the p99 read latency of the Tokyo region?", "| ap-northeast-1 | Tokyo | 0.025 | 0.114 | 43 |"),
    ],
)
def test_a_question_answered_by_one_row_retrieves_that_row_with_its_headers(
        svc: Services, folder: Path, question: str, row: str) -> None:
    svc.registry.add_source("docs", kind="folder", location=str(folder), owner="t", kb="default")
    report = sync_inline(svc, "docs")
    assert report.run.status == "succeeded", report.errors
    packet = svc.client.retrieve(question, kb="default", limit=3)
    top = packet.evidence[0]
    assert top.key == "tables/regions.csv" and row in top.text
    assert top.text.startswith("| region | city | storage price (USD per GB-month) | egress price (USD per GB) | "
                               "p99 read latency (ms) |")
    chunk = svc.registry.chunk_rows([top.chunk_id])[0]
    assert chunk.meta["units"]["egress price (USD per GB)"] == "USD per GB"


@pytest.fixture
def hashing_svc(tmp_path: Path) -> Iterator[Services]:
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    yield services
    services.close()


@pytest.fixture
def strict_svc(tmp_path: Path) -> Iterator[Services]:
    """A source given 3 s a document (OCR of a twelve-page scan takes about 8 s): only for the test of what a
    parse past its limit does. On a loaded machine an ordinary document can take a second (tesseract beside it
    takes every core), so no other test runs under a limit."""
    services = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                      sources={"parse_time_limit_s": 3.0, "max_nesting_depth": 64}))
    yield services
    services.close()


def test_slow_and_hostile_documents_fail_alone_with_a_reason_and_a_metric(strict_svc: Services,
                                                                        folder: Path) -> None:
    svc = strict_svc
    # OCR of twelve scanned pages (about 0.7 s each) takes longer than the 3 s limit this source is given.
    (folder / "scans").mkdir()
    scan = pymupdf.open()
    for _ in range(12):
        scan.insert_pdf(pymupdf.open("pdf", scanned_pdf()))
    (folder / "scans" / "claim.pdf").write_bytes(scan.tobytes())
    (folder / "deep.html").write_bytes(b"<html><body>" + b"<div>" * 500 + b"x" + b"</div>" * 500 + b"</body></html>")
    (folder / "table.csv").write_bytes(b"\xff\xfe\x00\xd8broken utf-16")
    svc.registry.add_source("docs", kind="folder", location=str(folder), owner="t", kb="default")
    report = sync_inline(svc, "docs")
    reasons = {e.key: e.reason for e in report.errors}
    assert reasons == {"scans/claim.pdf": "timed_out", "deep.html": "too_complex", "table.csv": "invalid_encoding"}
    assert all(e.detail for e in report.errors)
    assert report.run.status == "partial" and report.run.summary["documents"]["added"] == 4
    for reason in ("timed_out", "too_complex"):
        assert svc.metrics.value("freshindex_document_errors_total", source="docs", reason=reason) == 1


def test_a_chunker_upgrade_re_chunks_deliberately_and_says_why(hashing_svc: Services, folder: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from freshindex.workers import chunking, pipeline

    svc = hashing_svc
    svc.registry.add_source("docs", kind="folder", location=str(folder), owner="t", kb="default")
    first = sync_inline(svc, "docs")
    assert first.run.status == "succeeded", first.errors
    old = pipeline.PIPELINE_VERSION
    monkeypatch.setattr(chunking, "CHUNKER_VERSION", "c-next")
    monkeypatch.setattr(pipeline, "PIPELINE_VERSION", f"{old}-next")
    again = sync_inline(svc, "docs")
    assert again.run.summary["rechunked"] == {f"pipeline {old} -> {old}-next": 4}  # every format: the chunker's
    assert again.run.summary["chunks_embedded"] == first.run.summary["chunks_embedded"]


def test_reordered_sections_keep_their_ids_and_re_embed_nothing(hashing_svc: Services, folder: Path) -> None:
    svc = hashing_svc
    svc.registry.add_source("docs", kind="folder", location=str(folder), owner="t", kb="default")
    sync_inline(svc, "docs")
    guide = folder / "guides" / "schema-rollback.md"
    text = guide.read_text()
    head, rollback = text.split("## Rollback", 1)
    rollback, restore = rollback.split("## Restoring from the snapshot", 1)
    guide.write_text(head + "## Restoring from the snapshot" + restore.rstrip() + "\n\n## Rollback" + rollback)
    again = sync_inline(svc, "docs")
    assert again.run.summary["documents_changed"] == 1
    assert again.run.summary["chunks_embedded"] == 0 and again.run.summary["tombstones"] == 0
