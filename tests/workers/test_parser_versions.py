"""A parser's version is its own: bumping one re-parses only that parser's documents.

Given a folder of Markdown, HTML and CSV files synced and built, when the
Markdown parser's version is bumped through the parser registry, then the
next sync parses only the Markdown files (counted), embeds nothing (the
vector cache keys on what the model sees, not on the parser's version),
rewrites only their points in an incremental build, and records the new
version on those documents only; the sync after that parses nothing.
Given a source that lists keys with a media type and no extension a parser
reads, the media type picks the parser, and the documents settle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from freshindex.core.errors import ConfigError, DocumentError
from freshindex.core.types import ObjectRef, ParsedDocument
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers import connectors
from freshindex.workers.chunking import CHUNKER_VERSION
from freshindex.workers.connectors import ConnectorSpec
from freshindex.workers.parsing import Parsers, registry
from freshindex.workers.parsing.registry import ParserSpec
from freshindex.workers.runner import sync_inline
from tests.embedded_fixture import svc

__all__ = ["svc"]

FILES = {
    "guide/install.md": "# Install\n\nRun the installer and accept the licence.\n\n## Upgrade\n\nStop the service first.\n",
    "guide/backup.md": "# Backup\n\nCopy the data folder to another disk every night.\n",
    "site/index.html": "<html><head><title>Home</title></head><body><h1>Home</h1>"
                       "<p>The ferry leaves at noon from pier nine.</p></body></html>",
    "site/faq.html": "<html><head><title>FAQ</title></head><body><h1>FAQ</h1>"
                     "<p>Tickets are refunded up to a day before sailing.</p></body></html>",
    "data/prices.csv": "route,price\nnorth,12\nsouth,15\n",
}


@pytest.fixture
def counted() -> Iterator[dict[str, list[str]]]:
    """Every built-in spec swapped for one that counts its parses (same version); restored after the test."""
    originals = registry.specs()
    calls: dict[str, list[str]] = {}

    def counting(spec: ParserSpec) -> Callable[..., ParsedDocument]:
        def parse(data: bytes, key: str, *options: Any) -> ParsedDocument:
            calls.setdefault(spec.name, []).append(key)
            return spec.parse(data, key, *options)
        parse.__name__ = spec.parse.__name__
        return parse

    for spec in originals:
        registry.register(dataclasses.replace(spec, parse=counting(spec)), replace=True)
    yield calls
    for spec in originals:
        registry.register(spec, replace=True)


def _bump(name: str, version: str) -> None:
    registry.register(dataclasses.replace(registry.spec_named(name), version=version), replace=True)  # type: ignore[arg-type]


def test_bumping_one_parser_re_parses_only_its_documents_and_embeds_nothing(
        svc: Services, tmp_path: Path, counted: dict[str, list[str]]) -> None:
    root = tmp_path / "src"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    svc.registry.add_source("docs", kind="folder", location=str(root), owner="t", kb="default")
    first = sync_inline(svc, "docs")
    assert first.run.status == "succeeded" and first.run.summary["documents"]["added"] == 5
    assert sorted(k for keys in counted.values() for k in keys) == sorted(FILES)
    md_points = sum(len(svc.registry.live_chunk_ids(d.id)) for k, d in svc.registry.documents_for_source("docs").items()
                    if k.endswith(".md"))
    counted.clear()

    # When the Markdown parser's version is bumped through the registry
    md = registry.spec_named("markdown")
    assert md is not None
    _bump("markdown", f"{md.version}-next")
    again = sync_inline(svc, "docs")

    # Then only the two Markdown files are parsed, nothing is embedded, and the build is incremental
    assert {k: sorted(v) for k, v in counted.items()} == {"markdown": ["guide/backup.md", "guide/install.md"]}
    summary = again.run.summary
    assert summary["documents"]["unchanged"] == 3 and summary["documents"]["modified"] == 2
    assert summary["rechunked"] == {f"parser {md.version} -> {md.version}-next": 2}
    assert summary["chunks_embedded"] == 0
    assert again.snapshot is not None and again.snapshot.strategy != "full"
    assert again.snapshot.upserts == md_points and again.snapshot.deletes == md_points  # their points rewritten
    assert again.snapshot.point_count == first.snapshot.point_count  # type: ignore[union-attr]
    versions = {k: d.parser_version for k, d in svc.registry.documents_for_source("docs").items()}
    assert versions == {"guide/install.md": f"{md.version}-next.{CHUNKER_VERSION}",
                        "guide/backup.md": f"{md.version}-next.{CHUNKER_VERSION}",
                        "site/index.html": f"{registry.spec_named('html').version}.{CHUNKER_VERSION}",  # type: ignore[union-attr]
                        "site/faq.html": f"{registry.spec_named('html').version}.{CHUNKER_VERSION}",  # type: ignore[union-attr]
                        "data/prices.csv": f"{registry.spec_named('table').version}.{CHUNKER_VERSION}"}  # type: ignore[union-attr]
    hits = svc.client.retrieve("When does the ferry leave?", kb="default", limit=1).evidence
    assert hits and hits[0].key == "site/index.html"

    # And the next sync parses nothing: the documents settled on the new version
    counted.clear()
    settled = sync_inline(svc, "docs")
    assert counted == {} and settled.run.summary["documents"]["unchanged"] == 5


#: The toy source: a listing of keys with media types (as an HTTP source's Content-Type would give them).
LISTED: dict[str, tuple[str | None, str]] = {
    "pages/ferry": ("text/html; charset=utf-8", FILES["site/index.html"]),  # no extension
    "export.php": ("text/html", FILES["site/faq.html"]),  # an extension no parser reads
    "notes/README": (None, "Read me: the ferry office opens at eight.\n"),  # no extension, no media type
    "exports/1234": ("text/markdown", FILES["guide/backup.md"]),
    "blob.bin": (None, "binary"),  # nothing reads it
}


class _Typed:
    def list(self) -> Iterator[ObjectRef]:
        for key, (media, text) in sorted(LISTED.items()):
            yield ObjectRef(key=key, etag=str(len(text)), size=len(text), media_type=media)

    def fetch(self, key: str) -> bytes:
        if key not in LISTED:  # e.g. an ACL sidecar it does not hold
            raise DocumentError(DocumentError.VANISHED, f"{key} is gone")
        return LISTED[key][1].encode()


@pytest.fixture
def typed_kind() -> Iterator[None]:
    connectors.register(ConnectorSpec(kind="typed", build=lambda source, env: _Typed(),  # type: ignore[arg-type,return-value]
                                      source_uri=lambda location, key: f"{location}/{key}"))
    yield
    connectors.unregister("typed")


@pytest.mark.parametrize("ahead", [False, True], ids=["one-by-one", "parse-ahead"])
def test_a_key_without_a_known_extension_is_parsed_by_its_media_type(tmp_path: Path, typed_kind: None,
                                                                     counted: dict[str, list[str]], ahead: bool) -> None:
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"},
                                 sync={"parse_ahead": ahead}))
    try:
        again = _media_typed_sync(svc, counted)
        assert again.run.status == "succeeded", again.as_dict()
    finally:
        svc.close()


def _media_typed_sync(svc: Services, counted: dict[str, list[str]]) -> Any:
    """Sync the typed source twice, checking each parse; the second sync's report."""
    svc.registry.add_source("typed", kind="typed", location="typed://x", owner="t", kb="default")
    first = sync_inline(svc, "typed")
    docs = svc.registry.documents_for_source("typed")
    read_by = {k: d.parser_version for k, d in docs.items() if d.state == "active"}
    assert read_by == {k: f"{registry.spec_named(name).version}.{CHUNKER_VERSION}"  # type: ignore[union-attr]
                       for k, name in (("pages/ferry", "html"), ("export.php", "html"), ("notes/README", "text"),
                                       ("exports/1234", "markdown"))}
    assert {k: sorted(v) for k, v in counted.items()} == {"html": ["export.php", "pages/ferry"],
                                                          "text": ["notes/README"], "markdown": ["exports/1234"]}
    assert {s.key: s.reason for s in first.skipped} == {"blob.bin": DocumentError.UNSUPPORTED}
    assert docs["blob.bin"].parser_version == f"none.{CHUNKER_VERSION}"
    hits = svc.client.retrieve("When does the ferry leave?", kb="default", limit=1).evidence
    assert hits and hits[0].key == "pages/ferry"
    # The next sync finds every version as recorded: nothing parsed, nothing retried
    counted.clear()
    again = sync_inline(svc, "typed")
    assert counted == {} and again.run.summary["documents"].get("unchanged") == 4
    return again


def test_a_parser_registered_for_a_skipped_format_tries_those_documents_again(
        svc: Services, typed_kind: None, counted: dict[str, list[str]]) -> None:
    svc.registry.add_source("typed", kind="typed", location="typed://x", owner="t", kb="default")
    sync_inline(svc, "typed")
    plain = registry.spec_named("text")
    assert plain is not None
    registry.register(ParserSpec("blob", "blob-1", plain.parse, (".bin",)))
    try:
        counted.clear()
        again = sync_inline(svc, "typed")
        assert again.run.summary["documents"]["added"] == 1 and counted == {"text": ["blob.bin"]}  # it alone
        assert svc.registry.documents_for_source("typed")["blob.bin"].parser_version == f"blob-1.{CHUNKER_VERSION}"
    finally:
        registry.unregister("blob")


def test_the_registry_refuses_a_second_claim_and_a_version_with_a_dot() -> None:
    html = registry.spec_named("html")
    assert html is not None
    with pytest.raises(ConfigError, match="already read"):
        registry.register(ParserSpec("web", "web-1", html.parse, (".htm",)))
    with pytest.raises(ConfigError, match="already read"):
        registry.register(ParserSpec("web", "web-1", html.parse, (), ("TEXT/HTML",)))
    with pytest.raises(ConfigError, match="no dot"):
        registry.register(ParserSpec("web", "1.2", html.parse, (".web",)))
    with pytest.raises(ConfigError, match="already registered"):
        registry.register(dataclasses.replace(html, version="html-99"))
    assert registry.spec_named("web") is None and registry.spec_named("html") is html
    parsers = Parsers()
    assert parsers.version_for("a/b.HTML") == html.version and parsers.version_for("a/b.doc") is None
    assert parsers.for_key("feed", "application/xhtml+xml; charset=utf-8").__name__ == "parse_html"
    with pytest.raises(DocumentError, match=r"no parser for \.doc"):
        parsers.for_key("old.doc", "application/msword")
