"""Crawling a real documentation site twice: what the second, conditional crawl costs.

The CPython 3.11 HTML documentation (Debian's python3.11-doc, the
bench.corpora.python311 package: about 520 pages, 67 MB with assets) is
served from a local static host (bench/docsite.py: ETag, Last-Modified,
304s, ``/dir`` -> ``/dir/``) at ``/3/``, its build's ``file://`` base URL
replaced by the site's own (what a deployed Sphinx build names in
``<link rel=canonical>``).  Two measurements:

* crawl: the connector alone lists the whole site from ``/3/index.html``
  twice (``--max-pages`` 2000): pages, requests, 304s, bytes, wall time;
* sync: a ``web`` source on the ``/3/library/`` section, bounded to
  ``--sync-pages`` pages, synced twice through the embedded default
  (hashing embedder unless ``--embedding onnx``: the crawl is measured, not
  the model; no refusal calibration at build): chunks embedded, documents
  changed, wall time.

    python -m bench.crawl [--max-pages 2000] [--sync-pages 100] [--rate 1000/second] [--concurrency 4]

Writes bench/results/crawl.json and bench/results/crawl.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from bench.corpora import python311
from bench.docsite import DocSite, serve
from bench.report import table, write


def _served(site: DocSite) -> tuple[int, int]:
    conditional = sum(1 for _, h in site.requests if "if-none-match" in h or "if-modified-since" in h)
    return len(site.requests), conditional


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-pages", type=int, default=2000)
    parser.add_argument("--sync-pages", type=int, default=100)
    parser.add_argument("--rate", default="1000/second", help="rate_limit option (limits notation)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--embedding", choices=("hashing", "onnx"), default="hashing")
    args = parser.parse_args()

    from freshindex.registry.records import SourceSetup
    from freshindex.services import Services
    from freshindex.settings import load_settings
    from freshindex.workers.connectors.web import WebConnector, WebOptions
    from freshindex.workers.runner import sync_inline

    docs = python311._unpack(python311.DEFAULT_CACHE, python311.fetch(python311.DEFAULT_CACHE))
    site = DocSite(root=docs, mount="/3/", rewrite={b"file:///usr/share/doc/python3.11/html/": b"{base}/3/"})
    crawls, syncs, crawl_rows, sync_rows = [], [], [], []
    opts = {"rate_limit": args.rate, "concurrency": str(args.concurrency)}
    with tempfile.TemporaryDirectory() as tmp, serve(site):
        conn = WebConnector(f"{site.base}/3/index.html",
                            options=WebOptions.of(None, {**opts, "max_pages": str(args.max_pages)}))
        for name in ("first", "second"):
            site.requests.clear()
            refs = list(conn.list())
            c = conn.last_crawl.as_dict()
            served, conditional = _served(site)
            run = {"crawl": name, "documents": len(refs), **c, "server_requests": served,
                   "conditional_requests": conditional, "seconds": round(c["seconds"], 2)}
            crawls.append(run)
            crawl_rows.append([name, run["pages"], run["documents"], run["requests"], conditional, run["not_modified"],
                               f"{run['bytes'] / 1e6:.1f}", run["dead_links"], run["seconds"]])
            print(run, flush=True)
        conn.close()
        svc = Services(load_settings(data_dir=Path(tmp) / "data", embedding={"provider": args.embedding},
                                     context={"refusal_calibration": False}))
        try:
            svc.registry.add_source("pydocs", kind="web", location=f"{site.base}/3/library/index.html",
                                    owner="bench", kb="default",
                                    setup=SourceSetup(options={**opts, "max_pages": str(args.sync_pages)}))
            sconn = svc.connector_for(svc.registry.get_source("pydocs"))
            for name in ("first", "second"):
                site.requests.clear()
                started = time.perf_counter()
                report = sync_inline(svc, "pydocs").as_dict()
                wall = time.perf_counter() - started
                c = sconn.last_crawl.as_dict()
                run = {"sync": name, "pages": c["pages"], "requests": c["requests"], "not_modified": c["not_modified"],
                       "bytes": c["bytes"], "documents": report["documents"],
                       "documents_changed": report["documents_changed"], "chunks_embedded": report["chunks_embedded"],
                       "status": report["status"], "crawl_s": round(c["seconds"], 2), "sync_s": round(wall, 2)}
                syncs.append(run)
                sync_rows.append([name, run["pages"], run["requests"], run["not_modified"], run["documents_changed"],
                                  run["chunks_embedded"], run["crawl_s"], run["sync_s"]])
                print(run, flush=True)
        finally:
            svc.close()
    load = os.getloadavg()[0]
    data = {"corpus": f"{python311.PACKAGE} {python311.VERSION}", "max_pages": args.max_pages,
            "sync_pages": args.sync_pages, "rate_limit": args.rate, "concurrency": args.concurrency,
            "embedding": args.embedding, "crawls": crawls, "syncs": syncs,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_1m_at_end": load}}
    md = [
        "# bench.crawl: a documentation site crawled twice",
        "",
        f"`python -m bench.crawl --max-pages {args.max_pages} --sync-pages {args.sync_pages} --rate {args.rate} "
        f"--concurrency {args.concurrency} --embedding {args.embedding}` on {os.cpu_count()} cores "
        f"(load average {load:.0f} at the end: other work shared the cores, so times are upper bounds).",
        f"Site: {python311.PACKAGE} {python311.VERSION} (the CPython 3.11 HTML docs) served from a local static "
        "host with ETag and Last-Modified.",
        "",
        "## The whole site, listed by the connector (`/3/index.html`, no parsing)",
        "",
        *table(["crawl", "pages", "documents", "requests", "conditional", "304s", "MB downloaded", "dead links",
                "seconds"], ["l", "r", "r", "r", "r", "r", "r", "r", "r"], crawl_rows),
        "",
        f"## A source on `/3/library/`, {args.sync_pages} pages, synced twice through the pipeline",
        "",
        *table(["sync", "pages", "requests", "304s", "documents changed", "chunks embedded", "crawl s", "sync s"],
               ["l", "r", "r", "r", "r", "r", "r", "r"], sync_rows),
        "",
        "The second crawl sends every page its ETag and Last-Modified back (If-None-Match, If-Modified-Since): "
        "each answer is a 304 without a body, the page keeps its change marker, the planner skips it, nothing "
        "is parsed or embedded. `requests` includes robots.txt and redirect hops; `pages` counts one per URL "
        "requested, `documents` one per key (two URLs with one canonical are one document); dead links are "
        "404s of links the pages carry.",
    ]
    write("crawl", data, md)


if __name__ == "__main__":
    main()
