"""The document line's declared steps (workers/steps): a transform between parse and chunk, the worked example.

Given a folder whose pages hold e-mail addresses and phone numbers, synced
with ``pipeline.steps=["redact_pii"]``, then no address reaches a stored
chunk or title, whether the loop or the working-ahead thread parsed the
page; turning the step on for a folder synced without it re-processes every
document (its version moved) and re-chunks only those it changed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from freshindex.core.enums import BlockKind
from freshindex.core.errors import ConfigError
from freshindex.core.types import Block, ParsedDocument
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import ahead as ahead_module
from freshindex.workers import pipeline
from freshindex.workers.runner import sync_inline
from freshindex.workers.steps import TRANSFORMS, DocumentLine, transforms_named
from freshindex.workers.steps.redact import RedactPii, redact_text
from freshindex.workers.versions import PIPELINE_VERSION

ADDRESS = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|555[-. ]123|\+44 20")


def _tree(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "contacts.md").write_text(
        "# Support for ops@example.com\n\n## On call\n\nWrite to jane.doe@example.com or call (555) 123-4567.\n\n"
        "- escalation: +44 20 7946 0958\n- pager: 555-123-4567\n\n## Hours\n\nWeekdays from 2026-12-06 on.\n")
    for n in range(4):
        (root / f"plain{n}.md").write_text(f"# Plain {n}\n\n## Setup\n\nInstall the agent {n} and restart it.\n")
    (root / "mailto.html").write_text(
        "<html><head><title>Team</title></head><body><main><h1>Team</h1>"
        "<p>Ask <a href='mailto:bob@example.org'>bob@example.org</a> about the ledger.</p>"
        "<ul><li>desk 555.123.4567</li><li>room 12</li></ul></main></body></html>")


def _services(tmp_path: Path, *, steps: list[str], ahead: bool) -> Services:
    return Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                  sync={"parse_ahead": ahead}, pipeline={"steps": steps}))


def _stored(svc: Services) -> list[str]:
    """Every live chunk as the builder reads it: text, title, heading path and metadata."""
    rows = svc.registry.chunk_rows(svc.registry.live_chunk_ids_for_kb("kb"))
    return [repr((r.text, r.title, r.heading_path, r.meta)) for r in rows]


@pytest.mark.parametrize("ahead", [True, False], ids=["working-ahead", "loop"])
def test_redaction_on_keeps_every_address_out_of_the_stored_chunks(tmp_path: Path, ahead: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a folder with addresses and phone numbers, and the redaction step on
    root = tmp_path / "src"
    _tree(root)
    svc = _services(tmp_path, steps=["redact_pii"], ahead=ahead)
    svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="kb")
    prepared: list[Any] = []
    real_take = ahead_module.ParseAhead.take

    def spy(self: ahead_module.ParseAhead, key: str) -> Any:
        out = real_take(self, key)
        prepared.append(out)
        return out

    monkeypatch.setattr(ahead_module.ParseAhead, "take", spy)
    try:
        # When it is synced
        report = sync_inline(svc, "docs")
        # Then every document is indexed, and no address reached a stored chunk
        assert report.run.summary["documents"]["added"] == 6, report.as_dict()
        stored = _stored(svc)
        assert stored and not [s for s in stored if ADDRESS.search(s)]
        joined = "\n".join(stored)
        assert "[email]" in joined and "[phone]" in joined and "2026-12-06" in joined  # a date is no phone
        # And the documents' titles were redacted too
        titles = {r.title for r in svc.registry.chunk_rows(svc.registry.live_chunk_ids_for_kb("kb"))}
        assert "Support for [email]" in titles
        # And on the working-ahead path the thread's own parse was the one used, redacted there
        parsed_ahead = [p for p in prepared if p is not None and p.parsed is not None]
        if ahead:
            assert parsed_ahead and not [p for p in parsed_ahead if ADDRESS.search(repr(p.chunks))]
        else:
            assert prepared == []
    finally:
        svc.close()


def test_turning_redaction_on_re_processes_every_document_and_re_chunks_the_changed_ones(tmp_path: Path) -> None:
    # Given a folder synced without the step
    root = tmp_path / "src"
    _tree(root)
    plain = _services(tmp_path, steps=[], ahead=True)
    plain.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="kb")
    try:
        first = sync_inline(plain, "docs").run.summary
        assert [s for s in _stored(plain) if ADDRESS.search(s)]  # the addresses are there
        again = sync_inline(plain, "docs").run.summary
        assert again["documents"].get("unchanged") == 6  # nothing to do without a change
    finally:
        plain.close()
    # When the same registry is synced with the step on
    redacting = _services(tmp_path, steps=["redact_pii"], ahead=True)
    try:
        summary = sync_inline(redacting, "docs").run.summary
        # Then every document was processed again for its new version, ...
        assert summary["documents"].get("modified") == 6, summary
        assert summary["rechunked"] == {f"pipeline {PIPELINE_VERSION} -> {PIPELINE_VERSION}+redact_pii-1": 6}, summary
        # ... and only the two with addresses got new chunks (the plain ones kept every chunk they had)
        assert 0 < summary["chunks_embedded"] and not [s for s in _stored(redacting) if ADDRESS.search(s)]
        assert summary["chunks_embedded"] < first["chunks_embedded"]
        doc = redacting.registry.get_document(pipeline.document_id("docs", "plain0.md"))
        assert doc is not None and doc.parser_version.endswith("+redact_pii-1")
        # And a second sync with the step on changes nothing
        assert sync_inline(redacting, "docs").run.summary["documents"].get("unchanged") == 6
    finally:
        redacting.close()


def test_the_line_declares_its_steps_and_versions_them() -> None:
    svc_line = DocumentLine(parsers=pipeline.Parsers(), chunker=pipeline.Chunker())
    assert svc_line.steps == ("parse", "chunk")
    on = DocumentLine(parsers=pipeline.Parsers(), chunker=pipeline.Chunker(), transforms=transforms_named(["redact_pii"]))
    assert on.steps == ("parse", "redact_pii", "chunk")
    assert on.version_for("a.md") == svc_line.version_for("a.md") + "+redact_pii-1"
    assert "redact_pii" in TRANSFORMS
    with pytest.raises(ConfigError, match=r"unknown step.*nope"):
        transforms_named(["nope"])


def test_redact_reaches_the_texts_a_parser_carries_and_leaves_dates_and_hashes() -> None:
    doc = ParsedDocument(
        title="Mail a@b.io", parser="md", parser_version="1", meta={"content_hash": "5551234567" * 6},
        blocks=(Block(BlockKind.LIST, "call 555 123 4567", heading_path=("x@y.org",),
                      meta={"items": ["c@d.net", "v1.2.3"], "links": [{"text": "e", "href": "mailto:e@f.com"}]}),))
    out = RedactPii().run(doc)
    assert out.title == "Mail [email]"
    block = out.blocks[0]
    assert (block.text, block.heading_path) == ("call [phone]", ("[email]",))
    assert block.meta.items == ["[email]", "v1.2.3"] and block.meta.links == [{"text": "e", "href": "mailto:[email]"}]
    assert out.meta == doc.meta
    assert redact_text("on 2026-12-06 at 10:19, v1.2.3, 127.0.0.1, id 1234567890") == (
        "on 2026-12-06 at 10:19, v1.2.3, 127.0.0.1, id 1234567890")


def test_redaction_keeps_a_pdf_blocks_page_offsets_on_their_pages() -> None:
    # Given a PDF block spanning two pages with addresses on both, When it is redacted
    first, second = "Mail a@b.example or c@d.example now. ", "Call 555-123-4567 later, then x@y.example done."
    block = Block(BlockKind.PARAGRAPH, first + second, meta={"page_breaks": [(len(first), 2)]})
    doc = RedactPii().run(ParsedDocument(title="T", blocks=(block,), meta={}, parser="pdf", parser_version="1"))
    out = doc.blocks[0]
    # Then the second page still starts where its text does, and no address is left
    (offset, page), = out.meta.page_breaks
    assert page == 2 and out.text[offset:] == "Call [phone] later, then [email] done."
    assert "@" not in out.text
