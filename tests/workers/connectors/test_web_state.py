"""A web source's page validators live in the registry's source state, promoted with the run.

Against a real local HTTP server (bench/docsite.py) and the registry on
SQLite and PostgreSQL: given a source upgraded from a version that kept
``crawl-state.json``, when it is listed, then that file's validators are
used once (conditional GETs) and the file is not written again; once a run
succeeded, its validators come from the registry (the file gone, a new
connector in another process alike); a run that failed after listing a
changed page leaves the older validators in place, so the next listing asks
with those.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.docsite import DocSite, serve
from freshindex.registry import Registry
from freshindex.registry.records import SourceSetup
from freshindex.registry.source_state import SourceStateView
from freshindex.workers.connectors.retry import RetryPolicy
from freshindex.workers.connectors.web import WebConnector
from freshindex.workers.connectors.web_links import STATE_KEY, UpgradedState, pages_record
from freshindex.workers.connectors.web_options import WebOptions

NO_WAIT = RetryPolicy(retries=1, backoff_s=0.0, backoff_max_s=0.0)
OPTIONS = {"rate_limit": "1000/second"}


def _page(title: str, body: str) -> str:
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{body}</p></body></html>"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[DocSite]:
    root = tmp_path / "site" / "docs"
    root.mkdir(parents=True)
    (root / "index.html").write_text(_page("Home", '<a href="install.html">install</a>'))
    (root / "install.html").write_text(_page("Install", "Run the installer as root."))
    with serve(DocSite(root=tmp_path / "site")) as served:
        yield served


def _list(site: DocSite, registry: Registry, state_dir: Path, *, error: str | None = None) -> dict[str, str]:
    """One run of the source: a fresh connector (another process) lists it; returns what install.html was
    asked with (the conditional GET's headers)."""
    run, _ = registry.start_sync_run("site", "test")
    location = f"{site.base}/docs/index.html"
    state = UpgradedState(SourceStateView(registry, "site"), state_dir / "crawl-state.json", location)
    conn = WebConnector(location, options=WebOptions.of(None, OPTIONS), retry=NO_WAIT, state=state)
    site.requests.clear()
    try:
        list(conn.list())
    finally:
        conn.close()
    registry.set_run_planned(run, listed=0, planned=0)
    registry.finish_sync_run(run, error=error)
    return next(h for p, h in site.requests if p == "/docs/install.html")


def test_validators_come_from_the_registry_and_a_failed_run_leaves_the_old_ones(
        site: DocSite, registry: Registry, tmp_path: Path) -> None:
    location = f"{site.base}/docs/index.html"
    registry.add_source("site", kind="web", location=location, owner="t", kb="default",
                        setup=SourceSetup(options=OPTIONS))
    state_dir = tmp_path / "sources" / "site"
    # Given the crawl state an older version left in the source's folder
    old = WebConnector(location, options=WebOptions.of(None, OPTIONS), retry=NO_WAIT)
    list(old.list())
    old.close()
    state_dir.mkdir(parents=True)
    legacy = state_dir / "crawl-state.json"
    legacy.write_text(json.dumps(pages_record(location, old._pages)))
    written = legacy.stat().st_mtime_ns

    # When the source is listed, Then that file's validators are used, and it is not written again
    v1 = _list(site, registry, state_dir)["if-none-match"]
    assert v1 and legacy.stat().st_mtime_ns == written
    assert registry.source_state("site")[STATE_KEY]["pages"]

    # Given the file gone, When a new connector lists, Then the registry's validators are used
    legacy.unlink()
    assert _list(site, registry, state_dir)["if-none-match"] == v1

    # Given install.html changed, When a run lists it (a full GET) and fails, Then the next run asks with v1
    page = site.root / "docs" / "install.html"
    page.write_text(_page("Install", "Run the installer as an ordinary user."))
    os.utime(page, ns=(written + 10**9, written + 10**9))
    assert _list(site, registry, state_dir, error="worker killed")["if-none-match"] == v1
    assert _list(site, registry, state_dir)["if-none-match"] == v1
    # And once that run succeeded, the next asks with the changed page's validator
    assert _list(site, registry, state_dir)["if-none-match"] != v1
