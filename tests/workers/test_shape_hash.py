"""A page whose bytes changed only in its furniture costs a hash, not a parse (workers/parsing/html.py shape_html).

The HTML parser hashes what its walk reads (the cleaned element and the
page's title) into ``meta["shape_hash"]``; the registry keeps it with the
document (migration 0015); the next sync hashes the new bytes the same way
and, when equal, touches the document without walking it.  A different
shape hash decides nothing: the page is parsed and its content hash decides.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.parsing import Parsers
from freshindex.workers.parsing.html import parse_html, shape_html
from freshindex.workers.runner import sync_inline


def _page(body: str, *, release: str = "15.18", nav: str = "Next: Chapter 2") -> bytes:
    return (f"<html><head><title>Backup and Restore</title></head><body>"
            f"<div class='navheader'><a href='a.html'>Prev</a> PostgreSQL {release} Documentation "
            f"<a href='b.html'>{nav}</a></div>"
            f"<main><h1>Backup and Restore</h1><p>{body}</p>"
            f"<p>Run pg_dump against a standby when the primary is busy.</p></main>"
            f"<footer>Copyright 1996-2026, release {release}</footer></body></html>").encode()


def test_furniture_changes_keep_the_shape_and_content_changes_do_not() -> None:
    text = "Use pg_basebackup for a base backup of the whole cluster."
    old = _page(text)
    assert shape_html(old) == parse_html(old, "backup.html").meta["shape_hash"]
    # Another release number in the header and footer, another link label: same shape, same parse.
    moved = _page(text, release="15.20", nav="Next: Chapter 3")
    assert moved != old and shape_html(moved) == shape_html(old)
    assert parse_html(moved, "backup.html").meta["content_hash"] == parse_html(old, "backup.html").meta["content_hash"]
    # One word of the text: another shape.
    assert shape_html(_page(text.replace("whole", "entire"))) != shape_html(old)
    # The title is read too.
    assert shape_html(old.replace(b"<title>Backup and Restore", b"<title>Backups")) != shape_html(old)


def test_parsers_give_a_shape_only_for_html() -> None:
    parsers = Parsers()
    assert parsers.shape(_page("x"), "docs/a.html") == shape_html(_page("x"))
    assert parsers.shape(b"# Title\n\ntext\n", "a.md") is None
    assert parsers.shape(b"<html><body>" + b"<div>" * 5000, "deep.html") is None  # refused: the parse says why


class _Counting:
    """The source's parsers, counting full parses."""

    def __init__(self, real: Parsers) -> None:
        self.real, self.parsed = real, []  # type: ignore[var-annotated]

    def for_source(self, options: Any) -> _Counting:
        return self

    def version_for(self, key: str, media_type: str | None = None) -> str | None:
        return self.real.version_for(key, media_type)

    def shape(self, data: bytes, key: str, media_type: str | None = None) -> str | None:
        return self.real.shape(data, key, media_type)

    def parse(self, data: bytes, key: str, media_type: str | None = None) -> Any:
        self.parsed.append(key)
        return self.real.parse(data, key, media_type)


@pytest.mark.parametrize("ahead", [False, True], ids=["one-by-one", "parse-ahead"])
def test_a_release_that_moved_only_furniture_is_touched_without_a_parse(tmp_path: Path, ahead: bool) -> None:
    # Given three indexed pages (synced one by one, or with the next pages read in threads: workers/ahead.py)
    root = tmp_path / "src"
    root.mkdir()
    texts = {f"p{n}.html": f"Chapter {n}: use pg_basebackup {n} times for a base backup." for n in range(3)}
    for key, text in texts.items():
        (root / key).write_bytes(_page(text))
    svc = Services(load_settings(data_dir=tmp_path / "d", embedding={"provider": "hashing"},
                                 sync={"parse_ahead": ahead}))
    try:
        svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="kb")
        first = sync_inline(svc, "docs")
        assert first.run.summary["documents"]["added"] == 3
        assert all(d.shape_hash for d in svc.registry.documents_for_source("docs").values())
        counting = _Counting(svc.pipeline.parsers)
        svc.pipeline = dataclasses.replace(svc.pipeline, parsers=counting)
        # When a release changes every page's header and footer, and the text of p2
        for key, text in texts.items():
            (root / key).write_bytes(_page(text.replace("base backup", "physical backup") if key == "p2.html" else text,
                                           release="15.20"))
        second = sync_inline(svc, "docs")
        # Then p0 and p1 are unchanged without a parse; p2 is parsed, modified and re-embedded
        docs = second.run.summary["documents"]
        assert (docs["unchanged"], docs["modified"]) == (2, 1)
        assert counting.parsed == ["p2.html"]
        assert second.run.summary["chunks_embedded"] >= 1
        # And the next release again costs no parse of any page (p2's new shape was stored)
        for key, text in texts.items():
            (root / key).write_bytes(_page(text.replace("base backup", "physical backup") if key == "p2.html" else text,
                                           release="15.21"))
        third = sync_inline(svc, "docs")
        assert third.run.summary["documents"]["unchanged"] == 3 and counting.parsed == ["p2.html"]
    finally:
        svc.close()
