"""A web source crawling a real documentation tree through the whole pipeline, twice.

The tree is the CPython 3.11 HTML documentation from Debian's python3.11-doc
(the bench corpus, bench/corpora/python311.py), served from a local server as
a static host serves it (ETag, Last-Modified, 304s, ``/dir`` -> ``/dir/``),
mounted at ``/3/`` with the build's ``file://`` base URL replaced by the
site's own, as a deployed Sphinx build names itself in ``<link rel=canonical>``.
The test skips (with the reason) when the package cannot be had.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.docsite import DocSite, serve
from freshindex.registry.records import SourceSetup
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline

PAGES = 12


def _python_docs() -> Path:
    try:
        from bench.corpora import python311

        return python311._unpack(python311.DEFAULT_CACHE, python311.fetch(python311.DEFAULT_CACHE))
    except Exception as exc:  # no archive reachable, no dpkg-deb
        pytest.skip(f"python3.11-doc is not available here ({exc})")


@pytest.fixture(scope="module")
def site() -> Iterator[DocSite]:
    docs = _python_docs()
    robots = "User-agent: *\nDisallow: /3/library/a\n"  # abc, argparse, asyncio... never requested
    rewrite = {b"file:///usr/share/doc/python3.11/html/": b"{base}/3/"}
    with serve(DocSite(root=docs, mount="/3/", robots=robots, rewrite=rewrite)) as served:
        yield served


@pytest.fixture(scope="module")
def crawled(site: DocSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two syncs of the library section: what the server saw and what each sync did."""
    data = tmp_path_factory.mktemp("web") / "data"
    # The hashing embedder and no refusal calibration at build: the crawl is under test, not the model.
    svc = Services(load_settings(data_dir=data, embedding={"provider": "hashing"},
                                 context={"refusal_calibration": False}))
    try:
        # The start URL has no trailing slash: the server redirects it to the section's folder.
        svc.registry.add_source("pydocs", kind="web", location=f"{site.base}/3/library", owner="t", kb="default",
                                setup=SourceSetup(options={"prefix": "/3/library/", "max_pages": str(PAGES),
                                                           "directory_index": "", "rate_limit": "1000/second"}))
        conn = svc.connector_for(svc.registry.get_source("pydocs"))
        requested: list[str] = []
        conn._client.event_hooks["request"].append(lambda req: requested.append(str(req.url)))
        first = sync_inline(svc, "pydocs")
        first_crawl, first_requests = conn.last_crawl, list(site.requests)
        site.requests.clear()
        second = sync_inline(svc, "pydocs")
        evidence = svc.client.retrieve("What does base64.b64encode return for a bytes-like object?", kb="default",
                                       limit=5)
        yield {"svc": svc, "conn": conn, "first": first, "second": second, "first_crawl": first_crawl,
               "first_requests": first_requests, "second_requests": list(site.requests),
               "requested": requested, "evidence": evidence,
               "keys": sorted(svc.registry.documents_for_source("pydocs"))}
    finally:
        svc.close()


def test_the_first_crawl_indexes_the_pages_it_reaches(crawled: dict, site: DocSite) -> None:
    first = crawled["first"].as_dict()
    assert first["status"] in ("succeeded", "partial"), first
    assert first["chunks_embedded"] > 100
    # The start URL's page and index.html, the canonical URL it claims (fetched first to grant the claim), are one.
    assert len(crawled["keys"]) == PAGES - 1 and crawled["first_crawl"].pages == PAGES
    assert crawled["first_crawl"].truncated == f"max_pages={PAGES}"  # so nothing it did not reach is deleted
    assert all(k.startswith(f"{site.base}/3/library/") and k.endswith(".html") for k in crawled["keys"])


def test_the_second_crawl_is_conditional_costs_304s_and_embeds_nothing(crawled: dict) -> None:
    # Every request but robots.txt and the start URL's redirect is a page, and every one is conditional.
    pages = [(p, h) for p, h in crawled["second_requests"] if p not in ("/robots.txt", "/3/library")]
    assert len(pages) == PAGES
    assert all("if-none-match" in h and "if-modified-since" in h for _, h in pages)
    second = crawled["second"].as_dict()
    assert crawled["conn"].last_crawl.not_modified == PAGES and crawled["conn"].last_crawl.bytes == 0
    assert second["chunks_embedded"] == 0 and second["documents_changed"] == 0, second


def test_robots_prefix_and_other_hosts_bound_the_crawl(crawled: dict, site: DocSite) -> None:
    index = (site.root / "library" / "index.html").read_bytes()
    # The pages do link to all three kinds of place the crawler must not go.
    assert b'href="argparse.html' in index and b'href="../' in index and b'href="https://' in index
    paths = [p for p, _ in crawled["first_requests"]]
    assert not [p for p in paths if p.startswith("/3/library/a")]
    assert set(paths) - {"/robots.txt", "/3/library"} <= {p for p in paths if p.startswith("/3/library/")}
    assert all(u.startswith(site.base) for u in crawled["requested"])
    assert crawled["first_crawl"].robots_blocked > 0


def test_the_canonical_url_is_the_identity_and_the_redirect_is_recorded(crawled: dict, site: DocSite) -> None:
    index = f"{site.base}/3/library/index.html"
    # Reached as /3/library -> /3/library/ and linked as index.html from the pages: one document,
    # named by its canonical URL (directory_index is off, so only the canonical could name it so).
    assert index in crawled["keys"] and not [k for k in crawled["keys"] if k.endswith("/")]
    assert crawled["conn"].redirects[index] == [f"{site.base}/3/library"]
    assert crawled["conn"].chunk_meta(index) == {"redirected_from": [f"{site.base}/3/library"]}


def test_citations_carry_the_page_url_with_its_anchor(crawled: dict, site: DocSite) -> None:
    ev = crawled["evidence"].evidence
    assert ev and all(e.key.startswith(f"{site.base}/3/library/") for e in ev)
    # Sphinx's own anchor of the function's entry, after the page's URL.
    assert f"{site.base}/3/library/base64.html#base64.b64encode" in ev[0].citation
    prov = crawled["svc"].registry.document_provenance(
        crawled["svc"].registry.documents_for_source("pydocs")[ev[0].key].id)
    assert prov["source_uri"] == ev[0].key


