"""The poison-pill rule (pipeline.begin_attempt) and its metric, in one process on a real registry.

A process that dies on a document leaves its attempt open; here the attempts
are begun and left open as a killed process leaves them (the real SIGKILLs
are in tests/e2e/test_poison_pill.py, whose metrics live in the dead processes).
"""

from __future__ import annotations

from pathlib import Path

from freshindex.core.enums import DocumentOutcomeKind
from freshindex.core.ids import document_id
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import pipeline


def test_past_the_crash_retries_the_document_is_recorded_and_each_crash_is_counted(
    tmp_path: Path, monkeypatch
) -> None:
    # Given a registry, a run and the default sync.document_crash_retries (2)
    monkeypatch.setenv("FRESHINDEX_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FRESHINDEX_EMBEDDING__PROVIDER", "hashing")
    svc = Services(load_settings())
    try:
        svc.registry.add_source("docs", kind="folder", location=str(tmp_path), owner="t", kb="default")
        run, cs = svc.registry.start_sync_run("docs", "test")
        ctx = svc.pipeline
        retries = ctx.sync.document_crash_retries
        # When three attempts begin on the document and their processes die (nothing ends them)
        begun = [pipeline.begin_attempt(ctx, run, cs, "docs", "bad.md", "e1", 10) for _ in range(retries + 1)]
        # Then each was let through, the later ones counting the crash before them
        assert begun == [None] * (retries + 1)
        assert svc.metrics.value("freshindex_worker_crashes_total", source="docs") == retries
        # When the next attempt begins
        outcome = pipeline.begin_attempt(ctx, run, cs, "docs", "bad.md", "e1", 10)
        # Then the document is recorded worker_crashed against this run, counted, and its counter reset
        assert outcome is not None and outcome.outcome == DocumentOutcomeKind.FAILED
        assert outcome.error_reason == "worker_crashed"
        assert svc.metrics.value("freshindex_worker_crashes_total", source="docs") == retries + 1
        assert svc.metrics.value("freshindex_document_errors_total", source="docs", reason="worker_crashed") == 1
        assert [(e.key, e.reason) for e in svc.registry.document_errors(run_id=run)] == [("bad.md", "worker_crashed")]
        assert svc.registry.document_crashes(document_id("docs", "bad.md")) == 0
        # And an attempt that ends alive (a retried error) is no crash
        assert pipeline.begin_attempt(ctx, run, cs, "docs", "ok.md", "e1", 10) is None
        svc.registry.end_document_attempt(document_id("docs", "ok.md"), outcome=False)
        assert pipeline.begin_attempt(ctx, run, cs, "docs", "ok.md", "e1", 10) is None
        assert svc.metrics.value("freshindex_worker_crashes_total", source="docs") == retries + 1
    finally:
        svc.close()
