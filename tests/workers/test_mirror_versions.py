"""A mirror records the version the planner compares: two identical files settle after one sync.

Given a folder holding the same Markdown file under two keys, the first sync
indexes one and records the other as its mirror (registry/twins.py); the
mirror must record the parser and pipeline version a document read now
records, or the planner finds it out of date and the sync after fetches and
mirrors it again, every time.
"""

from __future__ import annotations

from pathlib import Path

from freshindex.services import Services
from freshindex.workers import pipeline
from freshindex.workers.runner import sync_inline
from tests.embedded_fixture import svc

__all__ = ["svc"]

TEXT = "# Ferry\n\nThe ferry leaves at noon from pier nine; tickets are refunded up to a day before.\n"


def test_a_mirrored_document_is_not_processed_again(svc: Services, tmp_path: Path) -> None:
    root = tmp_path / "src"
    for key in ("a/ferry.md", "b/ferry.md"):
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text(TEXT)
    svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="default")
    first = sync_inline(svc, "docs")
    assert first.run.status == "succeeded" and first.run.summary["documents"]["added"] == 2
    docs = svc.registry.documents_for_source("docs")
    # one canonical document with chunks, one mirror of it without
    assert sorted(bool(svc.registry.live_chunk_ids(d.id)) for d in docs.values()) == [False, True]
    expected = pipeline.document_version(svc.pipeline.parsers, "a/ferry.md")
    assert {k: d.parser_version for k, d in docs.items()} == {"a/ferry.md": expected, "b/ferry.md": expected}

    # When the unchanged folder is synced again, nothing is planned: both documents are as recorded
    again = sync_inline(svc, "docs")
    assert again.run.docs_planned == 0, again.run.summary
    assert again.run.summary["documents"].get("unchanged") == 2


def test_a_copy_read_before_redaction_was_switched_on_is_not_mirrored(tmp_path: Path) -> None:
    # Given two sources of one kb holding the same page with an e-mail address, the first synced without redaction
    from freshindex.settings import load_settings

    page = "# Contact\n\nWrite to the ferry office at office@ferry.example for refunds of tickets.\n"
    for name in ("old", "new"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "contact.md").write_text(page)
    plain = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    plain.registry.add_source("old", kind="folder", location=str(tmp_path / "old"), owner="t", kb="default")
    plain.registry.add_source("new", kind="folder", location=str(tmp_path / "new"), owner="t", kb="default")
    assert sync_inline(plain, "old").run.status == "succeeded"
    plain.close()
    # When redaction is switched on and the other source syncs first
    redacting = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                       pipeline={"steps": ["redact_pii"]}))
    try:
        assert sync_inline(redacting, "new").run.status == "succeeded"
        doc = redacting.registry.documents_for_source("new")["contact.md"]
        # Then its copy is read and chunked redacted, not made a mirror of the unredacted one
        ids = redacting.registry.live_chunk_ids(doc.id)
        assert ids, "the redacted copy was mirrored onto a copy read without redaction"
        texts = [r.text for r in redacting.registry.chunk_rows(ids)]
        assert all("office@ferry.example" not in t for t in texts) and any("[email]" in t for t in texts)
    finally:
        redacting.close()
