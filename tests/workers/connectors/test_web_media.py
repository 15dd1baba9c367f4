"""Pages at URLs without an .html name: listed with their media type and parsed as HTML when served as HTML.

Against a real local HTTP server (bench/docsite.py) serving a site with
pretty URLs: ``/docs/guide/install/`` (a folder's index, the source's
``directory_index`` off) and ``/docs/api/v2/users`` are text/html, so each is
listed under its own URL with ``media_type`` text/html, kept in the crawl
state across a conditional GET, fetched afresh, and indexed as HTML; a page
at such a URL served without a Content-Type is refused, alone, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.docsite import DocSite, serve
from freshindex.core.errors import DocumentError
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.chunking import CHUNKER_VERSION
from freshindex.workers.connectors.retry import RetryPolicy
from freshindex.workers.connectors.web import WebConnector
from freshindex.workers.connectors.web_options import WebOptions
from freshindex.workers.parsing import registry
from freshindex.workers.runner import sync_inline

NO_WAIT = RetryPolicy(retries=1, backoff_s=0.0, backoff_max_s=0.0)
OPTIONS = {"rate_limit": "1000/second", "directory_index": ""}


def _page(title: str, body: str) -> str:
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{body}</p></body></html>"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[DocSite]:
    root = tmp_path / "site"
    (root / "docs" / "guide" / "install").mkdir(parents=True)
    (root / "docs" / "index.html").write_text(_page("Home", '<a href="guide/install/">install</a> '
                                                          '<a href="api/v2/users">users</a> <a href="raw">raw</a>'))
    (root / "docs" / "guide" / "install" / "index.html").write_text(
        _page("Install", "Run the installer as root and accept the licence on the third screen."))
    routes = {
        "/docs/api/v2/users": (200, {"Content-Type": "text/html; charset=utf-8"},
                               _page("Users", "The users endpoint pages by cursor, fifty users a page.").encode()),
        "/docs/raw": (200, {}, _page("Raw", "no content type").encode()),  # the server says nothing of it
    }
    with serve(DocSite(root=root, routes=routes)) as served:
        yield served


class _State:
    """A source state whose every listing's run succeeds (what the registry keeps, promoted at once)."""

    def __init__(self) -> None:
        self.value: dict[str, Any] = {}

    def get(self) -> dict[str, Any]:
        return dict(self.value)

    def set_pending(self, value: dict[str, Any]) -> None:
        self.value.update(value)

    def planned(self, run_id: int) -> dict[str, Any] | None:
        return None


def _connector(site: DocSite, state: _State | None = None) -> WebConnector:
    return WebConnector(f"{site.base}/docs/index.html", options=WebOptions.of(None, OPTIONS), retry=NO_WAIT,
                        state=state)


def test_a_page_without_an_html_name_is_listed_with_its_media_type(site: DocSite, tmp_path: Path) -> None:
    b = site.base
    # When the site is listed
    state = _State()
    conn = _connector(site, state)
    refs = {r.key: r for r in conn.list()}
    # Then the pretty URLs are documents under their own URLs, typed by their Content-Type
    assert {k: r.media_type for k, r in refs.items()} == {
        f"{b}/docs/index.html": "text/html", f"{b}/docs/guide/install/": "text/html",
        f"{b}/docs/api/v2/users": "text/html", f"{b}/docs/raw": None}
    assert refs[f"{b}/docs/guide/install/"].etag and not refs[f"{b}/docs/guide/install/"].etag.startswith("error:")
    assert b"installer" in conn.fetch(f"{b}/docs/guide/install/")
    # and the page served without a Content-Type is refused, alone
    assert refs[f"{b}/docs/raw"].etag == f"error:{DocumentError.UNSUPPORTED}"
    with pytest.raises(DocumentError, match="did not say text/html") as refused:
        conn.fetch(f"{b}/docs/raw")
    assert refused.value.reason == DocumentError.UNSUPPORTED

    # When it is listed again from the crawl state, the folder page answering 304
    again = {r.key: r for r in _connector(site, state).list()}
    asked = [h for p, h in site.requests if p == "/docs/guide/install/"]
    assert len(asked) == 2 and asked[1].get("if-none-match")  # a conditional GET: no body this time
    # Then it keeps its media type (kept in the crawl state) and its change marker
    assert again[f"{b}/docs/guide/install/"].media_type == "text/html"
    assert again[f"{b}/docs/guide/install/"].etag == refs[f"{b}/docs/guide/install/"].etag

    # And a connector that did not list fetches such a page afresh, checking what the server says of it
    fresh = _connector(site)
    assert b"fifty users" in fresh.fetch(f"{b}/docs/api/v2/users")
    with pytest.raises(DocumentError, match="did not say text/html"):
        fresh.fetch(f"{b}/docs/raw")


def test_pretty_urls_are_indexed_as_html_and_settle(site: DocSite, tmp_path: Path) -> None:
    b = site.base
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("site", kind="web", location=f"{b}/docs/index.html", owner="t", kb="default",
                                setup=SourceSetup(options=OPTIONS))
        # When the site is synced
        first = sync_inline(svc, "site")
        # Then the pages at URLs without an .html name are read by the HTML parser (their titles, not raw tags)
        spec = registry.spec_named("html")
        assert spec is not None
        html = f"{spec.version}.{CHUNKER_VERSION}"
        docs = svc.registry.documents_for_source("site")
        assert {k: d.parser_version for k, d in docs.items() if d.state == "active"} == {
            f"{b}/docs/index.html": html, f"{b}/docs/guide/install/": html, f"{b}/docs/api/v2/users": html}
        assert {s.key: s.reason for s in first.skipped} == {f"{b}/docs/raw": DocumentError.UNSUPPORTED}
        hit = svc.client.retrieve("How do I run the installer?", kb="default", limit=1).evidence[0]
        assert hit.key == f"{b}/docs/guide/install/" and hit.title == "Install" and "<p>" not in hit.text
        # When it is synced again, nothing having changed, the pages are not processed again
        again = sync_inline(svc, "site")
        assert again.run.summary["documents"].get("unchanged") == 3, again.run.summary
        assert again.run.summary["documents"].get("added", 0) + again.run.summary["documents"].get("modified", 0) == 0
    finally:
        svc.close()
