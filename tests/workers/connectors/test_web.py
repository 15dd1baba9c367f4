"""The web connector's rules, each against a real local HTTP server serving small pages.

The crawl of a real documentation tree, through the whole pipeline, is in
``test_web_crawl.py``; here each rule (scope, redirects, byte caps, failures,
robots, bounds, sitemaps, options) is one short crawl.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.docsite import DocSite, serve
from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.registry.records import SourceSetup
from freshindex.workers.connectors.retry import RetryPolicy
from freshindex.workers.connectors.web import WebConnector
from freshindex.workers.connectors.web_links import page_links, sitemap_urls
from freshindex.workers.connectors.web_options import WebOptions, check_start_url

NO_WAIT = RetryPolicy(retries=1, backoff_s=0.0, backoff_max_s=0.0)


def html(body: str, head: str = "") -> tuple[int, dict[str, str], bytes]:
    page = f"<html><head><title>t</title>{head}</head><body><h1>Title</h1><p>{body}</p></body></html>"
    return 200, {"Content-Type": "text/html; charset=utf-8"}, page.encode()


@pytest.fixture(scope="module")
def other() -> Iterator[DocSite]:
    """Another origin (another port): the crawler must never send it a request."""
    with serve(DocSite(routes={"/docs/x.html": html("elsewhere")})) as site:
        yield site


def crawl(site: DocSite, start: str = "/docs/index.html", **opts: object) -> tuple[WebConnector, dict[str, str]]:
    options = WebOptions.of(None, {"rate_limit": "1000/second", **opts})
    conn = WebConnector(site.base + start, options=options, retry=NO_WAIT)
    refs = {r.key: r.etag or "" for r in conn.list()}
    return conn, refs


def test_links_resolve_against_base_and_lose_fragments() -> None:
    page = (b'<base href="/docs/sub/"><link rel="canonical" href="page.html#top">'
            b'<a href="a.html#sec">a</a><a href="../b.html">b</a><a href="#local">l</a>'
            b'<a href="mailto:x@y">m</a><a href="HTTP://Example.COM/c.html">c</a>')
    links, canonical = page_links(page, "http://h/docs/index.html")
    assert canonical == "http://h/docs/sub/page.html"
    assert links == ["http://example.com/c.html", "http://h/docs/b.html", "http://h/docs/sub/a.html"]
    assert page_links(b'<meta name="robots" content="noindex, nofollow"><a href="a.html">', "http://h/")[0] == []


def test_sitemap_and_sitemap_index_are_read_and_bad_xml_is_a_source_error() -> None:
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    assert sitemap_urls(f"<urlset {ns}><url><loc> http://h/a.html </loc></url></urlset>".encode()) == (
        ["http://h/a.html"], [])
    assert sitemap_urls(f"<sitemapindex {ns}><sitemap><loc>http://h/s.xml</loc></sitemap></sitemapindex>".encode()) \
        == ([], ["http://h/s.xml"])
    with pytest.raises(SourceError):
        sitemap_urls(b"<urlset><url>")


def test_locations_and_options_are_checked() -> None:
    assert check_start_url("HTTPS://Docs.Example.com") == "https://docs.example.com/"
    for bad in ("ftp://h/docs/", "file:///etc/passwd", "https://user:pw@h/docs/", "docs.example.com"):
        with pytest.raises(ConfigError):
            check_start_url(bad)
    opts = WebOptions.of(None, {"max_pages": "7", "timeout_s": "2.5", "sitemap": "yes", "rate_limit": "1 per 2 seconds"})
    assert (opts.max_pages, opts.timeout_s, opts.sitemap) == (7, 2.5, True)
    for bad in ({"rate_limit": "fast"}, {"max_pages": "many"}, {"concurrency": "0"}, {"max_pages": "0"}):
        with pytest.raises(ConfigError):
            WebOptions.of(None, bad)


def test_only_same_origin_pages_inside_the_prefix_are_requested(other: DocSite) -> None:
    links = (f'<a href="{other.base}/docs/x.html">other port</a><a href="/outside.html">out</a>'
             '<a href="a.html">a</a><a href="a.html?page=2">query</a><a href="logo.png">img</a>'
             '<a href="sub/">sub</a><a href="ftp://127.0.0.1/docs/f.html">ftp</a>')
    routes = {"/docs/index.html": html(links), "/docs/a.html": html("a"), "/docs/sub/": html("sub index"),
              "/outside.html": html("out")}
    with serve(DocSite(routes=routes)) as site:
        conn, refs = crawl(site)
    assert other.requests == []
    assert sorted(site.paths()) == ["/docs/a.html", "/docs/index.html", "/docs/sub/", "/robots.txt"]
    b = site.base
    # A URL ending in / gets the directory index as its key (the parsers choose by name).
    assert sorted(refs) == [f"{b}/docs/a.html", f"{b}/docs/index.html", f"{b}/docs/sub/index.html"]
    assert conn.fetch(f"{b}/docs/sub/index.html").startswith(b"<html>")


def test_a_redirect_is_followed_inside_the_site_recorded_and_refused_to_another_host(other: DocSite) -> None:
    routes = {"/docs/index.html": html('<a href="old.html">o</a><a href="gone.html">g</a>'),
              "/docs/old.html": (301, {"Location": "/docs/new.html"}, b""),
              "/docs/new.html": html("the new page"),
              "/docs/gone.html": (302, {"Location": f"{other.base}/docs/x.html"}, b"")}
    with serve(DocSite(routes=routes)) as site:
        conn, refs = crawl(site)
    b = site.base
    assert sorted(refs) == [f"{b}/docs/index.html", f"{b}/docs/new.html"]
    assert conn.redirects == {f"{b}/docs/new.html": [f"{b}/docs/old.html"]}
    assert conn.chunk_meta(f"{b}/docs/new.html") == {"redirected_from": [f"{b}/docs/old.html"]}
    assert other.requests == []


def test_canonical_of_the_same_site_is_the_identity_and_of_another_host_is_ignored() -> None:
    routes = {"/docs/index.html": html('<a href="a.html">a</a><a href="b.html">b</a>'),
              "/docs/a.html": html("same", head='<link rel="canonical" href="/docs/main.html">'),
              "/docs/b.html": html("same", head='<link rel="canonical" href="/docs/main.html">'),
              # The claimed page names itself canonical: a and b may join it (they are fetched for the check).
              "/docs/main.html": html("x", head='<link rel="canonical" href="/docs/main.html">'),
              "/docs/c.html": html("c", head='<link rel="canonical" href="https://docs.example.com/c.html">')}
    routes["/docs/index.html"] = html('<a href="a.html">a</a><a href="b.html">b</a><a href="c.html">c</a>')
    with serve(DocSite(routes=routes)) as site:
        conn, refs = crawl(site)
        b = site.base
        assert sorted(refs) == [f"{b}/docs/c.html", f"{b}/docs/index.html", f"{b}/docs/main.html"]
        assert b"<p>x</p>" in conn.fetch(f"{b}/docs/main.html")  # the content served at the key, not a claimant's


def test_a_failing_page_is_listed_and_fails_alone_and_a_dead_link_is_not_listed() -> None:
    routes = {"/docs/index.html": html('<a href="big.html">b</a><a href="err.html">e</a><a href="dead.html">d</a>'
                                       '<a href="ok.html">k</a><a href="denied.html">x</a>'),
              "/docs/big.html": html("x" * 5000), "/docs/err.html": (503, {}, b"down"),
              "/docs/denied.html": (403, {}, b"no"), "/docs/ok.html": html("fine")}
    with serve(DocSite(routes=routes)) as site:
        conn, refs = crawl(site, max_page_bytes="2000")
        b = site.base
        assert f"{b}/docs/dead.html" not in refs
        assert site.paths().count("/docs/err.html") == 2  # one retry (NO_WAIT), then recorded
        assert conn.fetch(f"{b}/docs/ok.html").count(b"fine") == 1
        for page, reason in (("big", DocumentError.TOO_LARGE), ("err", DocumentError.FETCH_FAILED),
                             ("denied", DocumentError.UNREADABLE)):
            assert refs[f"{b}/docs/{page}.html"] == f"error:{reason}"
            with pytest.raises(DocumentError) as caught:
                conn.fetch(f"{b}/docs/{page}.html")
            assert caught.value.reason == reason
    assert conn.last_crawl.failed == 3 and conn.last_crawl.dead_links == 1


def test_robots_that_cannot_be_read_stop_the_listing_and_disallow_is_obeyed() -> None:
    routes = {"/docs/index.html": html('<a href="private/a.html">p</a><a href="b.html">b</a>'),
              "/docs/private/a.html": html("secret"), "/docs/b.html": html("b")}
    robots = "User-agent: *\nDisallow: /docs/private/\n"
    with serve(DocSite(routes=routes, robots=robots)) as site:
        conn, refs = crawl(site)
    assert "/docs/private/a.html" not in site.paths() and conn.last_crawl.robots_blocked == 1
    assert sorted(refs) == [f"{site.base}/docs/b.html", f"{site.base}/docs/index.html"]
    with serve(DocSite(routes={**routes, "/robots.txt": (500, {}, b"")})) as down:
        with pytest.raises(SourceError, match="nothing is deleted"):
            crawl(down)
        assert "/docs/index.html" not in down.paths()


def test_a_crawl_cut_by_a_bound_deletes_nothing_and_lists_the_same_pages_each_time() -> None:
    links = "".join(f'<a href="p{i}.html">{i}</a>' for i in range(10))
    routes = {"/docs/index.html": html(links), **{f"/docs/p{i}.html": html(f"page {i}") for i in range(10)}}
    with serve(DocSite(routes=routes)) as site:
        conn, first = crawl(site, max_pages="4")
        _, second = crawl(site, max_pages="4")
        assert len(first) == 4 and first == second
        assert conn.unlisted_prefixes == frozenset({f"{site.base}/docs/"})
        assert conn.last_crawl.truncated == "max_pages=4"
        deep, _ = crawl(site, max_depth="0")
        assert deep.last_crawl.truncated == "max_depth=0" and deep.last_crawl.pages == 1
        whole, refs = crawl(site)
        assert len(refs) == 11 and whole.unlisted_prefixes == frozenset()


def test_a_sitemap_lists_its_pages_in_scope_without_following_links() -> None:
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    with serve(DocSite()) as site:
        b = site.base
        site.routes.update({
            "/docs/sitemap.xml": (200, {"Content-Type": "application/xml"},
                                  f"<urlset {ns}><url><loc>{b}/docs/a.html</loc></url>"
                                  f"<url><loc>{b}/elsewhere.html</loc></url></urlset>".encode()),
            "/docs/a.html": html('<a href="b.html">b</a>'), "/docs/b.html": html("b")})
        _, refs = crawl(site, start="/docs/sitemap.xml")
    assert list(refs) == [f"{b}/docs/a.html"]
    assert "/elsewhere.html" not in site.paths()


def test_a_sync_whose_crawl_was_cut_short_says_so_in_its_report(tmp_path) -> None:
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.runner import sync_inline

    # Given a site of 11 pages registered with max_pages=4
    links = "".join(f'<a href="p{i}.html">{i}</a>' for i in range(10))
    routes = {"/docs/index.html": html(links), **{f"/docs/p{i}.html": html(f"page {i}") for i in range(10)}}
    with serve(DocSite(routes=routes)) as site:
        svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
        try:
            svc.registry.add_source("site", kind="web", location=f"{site.base}/docs/index.html", owner="t",
                                    kb="default",
                                    setup=SourceSetup(options={"max_pages": "4", "rate_limit": "1000/second"}))
            # When it syncs
            report = sync_inline(svc, "site").as_dict()
            # Then the run names the bound that cut the listing short (and deleted nothing)
            assert report["listing_truncated"] == "max_pages=4", report
            assert svc.registry.get_sync_run(report["run_id"]).summary["listing_truncated"] == "max_pages=4"
        finally:
            svc.close()
