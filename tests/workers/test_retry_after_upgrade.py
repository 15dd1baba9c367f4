"""A document the pipeline failed on is tried again, once, when the pipeline changes.

An unchanged bad file is not retried on every sync (that is what its kept
etag is for); but a failure may be the pipeline's own fault (CPython 3.11's
footnote pages crashed the HTML parser), and an upgrade that fixes it must
not leave those documents failed until someone edits them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshindex.services import Services
from freshindex.workers import pipeline
from freshindex.workers.runner import sync_inline
from tests.embedded_fixture import svc

__all__ = ["svc"]


def _errors(svc: Services) -> dict[str, str]:
    return {e.key: e.reason for e in svc.registry.document_errors(source_id="docs")}


def test_a_failed_document_is_retried_once_after_a_pipeline_change(svc: Services, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a source with a good page and a corrupt PDF, synced once: the PDF is an error
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "good.md").write_text("# Good\n\nThe ferry leaves at noon from pier nine.\n")
    (kb / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj <<>> garbage")
    svc.registry.add_source("docs", kind="folder", location=str(kb), owner="t", kb="default")
    sync_inline(svc, "docs")
    assert set(_errors(svc)) == {"broken.pdf"}

    # When nothing changes, the next sync does not try it again
    again = sync_inline(svc, "docs")
    assert [e for e in svc.registry.document_errors(run_id=again.run.id)] == []

    # When the pipeline changes (an upgrade), the failed document is tried once more, and only it
    monkeypatch.setattr(pipeline, "PIPELINE_VERSION", pipeline.PIPELINE_VERSION + "-upgraded")
    upgraded = sync_inline(svc, "docs")
    retried = [e.key for e in svc.registry.document_errors(run_id=upgraded.run.id)]
    assert retried == ["broken.pdf"]

    # And a sync after that leaves it alone again
    after = sync_inline(svc, "docs")
    assert [e for e in svc.registry.document_errors(run_id=after.run.id)] == []
