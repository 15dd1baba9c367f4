"""Stage queues, distributed: parse, ocr and embed workers in separate processes, each on its own queue.

Given ``broker.stage_queues`` on, a Redis broker and a PostgreSQL registry,
three ``freshindex worker`` processes: one consuming ``sync,parse,build``,
one ``ocr`` and one ``embed``.  A sync of the sample knowledge base plus a
scanned PDF completes; the worker logs show the scanned PDF read by the ocr
worker only and every changed document embedded and staged by the embed
worker only; the scanned page's text is then retrievable.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from examples.fixtures.scans import scanned_pdf
from freshindex.workers.runner import sync_distributed
from tests.conftest import coordinator, distributed_env, worker_process

pytestmark = [pytest.mark.services, pytest.mark.slow]

STAGES = {"parse": "sync,parse,build", "ocr": "ocr", "embed": "embed"}


@pytest.fixture
def env(tmp_path: Path, pg_url: str, redis_url: str) -> dict[str, str]:
    return distributed_env(tmp_path, pg_url, redis_url, "fi-stages", FRESHINDEX_BROKER__STAGE_QUEUES="true",
                           FRESHINDEX_EMBEDDING__PROVIDER="hashing")


@pytest.fixture
def workers(env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, Path]]:
    logs = {stage: tmp_path / f"worker-{stage}.log" for stage in STAGES}
    with ExitStack() as stack:
        procs = {stage: stack.enter_context(worker_process(env, logs[stage], stage, "--queues", queues, "-c", "1"))
                 for stage, queues in STAGES.items()}
        yield logs
        for stage, proc in procs.items():
            assert proc.poll() is None, logs[stage].read_text()[-3000:]


def _succeeded(log: Path, task: str) -> dict[str, str]:
    """Document key -> result, of the ``task`` runs a worker logged as succeeded (Celery's trace line)."""
    pattern = (rf"Task freshindex\.{task}\[[^\]]+\] succeeded in [^:]+: '([^']*)' .*?"
               r"'args': \"\(\d+, \d+, 'docs', '([^']+)'")
    return {key: result for result, key in re.findall(pattern, log.read_text())}


def test_each_stage_runs_on_its_own_worker_and_the_run_completes(
    env: dict[str, str], workers: dict[str, Path], sample_kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the sample knowledge base and one scanned (image-only) PDF
    (sample_kb / "scans").mkdir()
    (sample_kb / "scans" / "claim.pdf").write_bytes(scanned_pdf())
    with coordinator(env, monkeypatch) as (svc, app):
        svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
        # When it is synced through the three workers
        report = sync_distributed(svc, app, "docs", timeout=120)
        # Then the run completes with every document added and built
        assert report.run.status == "succeeded" and report.build_status == "built", report.as_dict()
        assert report.run.summary["documents"]["added"] == 9
        # the parse worker handed the two scanned PDFs to OCR and every other document on to embedding
        scans = {"pdf/scanned-policy.pdf", "scans/claim.pdf"}  # the sample has a scan of its own
        parse = _succeeded(workers["parse"], "process_document")
        assert len(parse) == 9 and {k for k, r in parse.items() if r == "to_ocr"} == scans, parse
        assert {r for k, r in parse.items() if k not in scans} == {"to_embed"}, parse
        # the ocr worker read those two and handed their chunks on
        assert _succeeded(workers["ocr"], "ocr_document") == dict.fromkeys(scans, "to_embed")
        # the embed worker embedded and staged all nine; no other worker ran either stage
        assert _succeeded(workers["embed"], "embed_document") == dict.fromkeys(parse, "added")
        for stage in ("parse", "embed"):
            assert "freshindex.ocr_document[" not in workers[stage].read_text()
        for stage in ("parse", "ocr"):
            assert "freshindex.embed_document[" not in workers[stage].read_text()
        # and the scanned page's text is served from the new snapshot
        packet = svc.client.retrieve("What is the approved total for this travel claim?", kb="default")
        assert any(e.key == "scans/claim.pdf" and "1,250" in e.text for e in packet.evidence)


def test_with_stage_queues_off_a_worker_on_the_parse_queue_alone_completes_the_run(
    tmp_path: Path, pg_url: str, redis_url: str, sample_kb: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given stage queues off and one worker consuming sync, parse and build only (no ocr, no embed)
    env = distributed_env(tmp_path, pg_url, redis_url, "fi-stages-off", FRESHINDEX_BROKER__STAGE_QUEUES="false",
                          FRESHINDEX_EMBEDDING__PROVIDER="hashing")
    log = tmp_path / "worker.log"
    with coordinator(env, monkeypatch) as (svc, app):
        with worker_process(env, log, "parse", "--queues", "sync,parse,build", "-c", "1") as proc:
            svc.registry.add_source("docs", kind="folder", location=str(sample_kb), owner="t", kb="default")
            # When the sample (with its scanned PDF) is synced
            report = sync_distributed(svc, app, "docs", timeout=120)
            assert proc.poll() is None, log.read_text()[-3000:]
        # Then the run completes, every document processed whole by process_document
        assert report.run.status == "succeeded" and report.build_status == "built", report.as_dict()
        assert set(_succeeded(log, "process_document").values()) == {"added"}
        assert len(_succeeded(log, "process_document")) == report.run.summary["documents"]["added"] == 8
