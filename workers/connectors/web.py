"""A documentation web site as a source: a bounded, polite, incremental crawler.

A source of kind ``web`` is a start URL (``https://docs.example.com/en/stable/``)
or a sitemap (``.../sitemap.xml``).  Listing it crawls:

* only ``http``/``https`` URLs on the start URL's host (same scheme and port)
  whose path starts with the source's path prefix (option ``prefix``; by
  default the start URL's folder); other hosts, other schemes and paths
  outside the prefix are never requested, and neither is a redirect that
  leads to them;
* ``robots.txt`` of the host is read once per listing and obeyed
  (:mod:`urllib.robotparser`, with the crawler's user agent); a robots.txt
  that answers 5xx or cannot be reached fails the listing (nothing is
  deleted), one that answers 4xx allows everything, as RFC 9309 says;
* pages breadth-first from the start, level by level in sorted order (so a
  bounded crawl lists the same pages each time), at most ``max_pages``
  pages, ``max_depth`` links from the start and ``max_total_bytes`` bytes;
  ``concurrency`` requests in flight and ``rate_limit`` requests per host
  (a :mod:`limits` moving window); links with a query string and links to
  files that are not pages (``.css``, ``.png``, ``.zip``...) are not followed.

Each page is fetched with a conditional GET when the previous listing saw it:
``If-None-Match`` with its ``ETag``, ``If-Modified-Since`` with its
``Last-Modified``.  A ``304 Not Modified`` costs no body, and the page keeps
its change marker (its :attr:`ObjectRef.etag`: the ``ETag``, else the
``Last-Modified`` date, else a hash of the body), so the planner skips it and
nothing is parsed or embedded.  What the previous listing saw (validators,
links, canonical URL, redirects) is kept in ``crawl-state.json`` in the
source's own folder; without it (first crawl, another worker machine) every
page is fetched in full and the markers still spare the unchanged ones.

A document's key is its URL: the ``<link rel="canonical">`` when it names a
page of the same site inside the prefix, otherwise the URL the page was
served from after redirects (a URL ending in ``/`` gets ``index.html``
appended, as static documentation hosts serve it; option
``directory_index``).  The key is also the citation's URI (a chunk's anchor
is appended as ``#anchor`` by the renderer).  Two URLs with one canonical
are one document.  Redirects are followed by hand, each hop checked, at most
:data:`MAX_REDIRECTS`; the URLs a document was reached from are kept
(:meth:`WebConnector.chunk_meta`, ``redirected_from``).

A page that fails (an error status other than 404/410, a timeout after the
retries of :func:`workers.connectors.retry.fetch_with_retry`, a body over the
byte cap, a URL whose parser cannot be chosen) is still listed; fetching it
raises the :class:`DocumentError`, so the pipeline records it against that
document and goes on.  A 404 or 410 is a dead link: not listed (a page that
disappeared is deleted like a removed file).  A crawl cut short by a bound
proves nothing about the pages it did not reach, so it deletes nothing
(:attr:`unlisted_prefixes`).

Not guaranteed: that a server's ``ETag`` changes with its content (it is
trusted, as S3's is); JavaScript-rendered pages (only the served HTML is
read); that a page fetched by a worker in another process (the distributed
runner) is byte-identical to the one the listing saw: that worker fetches it
again, unconditionally.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import httpx
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from freshindex.acl.model import is_sidecar
from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.core.types import ObjectRef
from freshindex.workers.connectors import ChunkMeta, UnlistedPrefixes
from freshindex.workers.connectors.registry import ConnectorEnv, ConnectorOption, ConnectorSpec, SourceLike
from freshindex.workers.connectors.retry import RetryPolicy, fetch_with_retry
from freshindex.workers.connectors.web_links import normalise, page_links, sitemap_urls
from freshindex.workers.connectors.web_options import WebOptions, check_start_url

log = logging.getLogger("freshindex.connectors.web")

#: Redirect hops followed for one request.
MAX_REDIRECTS = 5
#: Version of ``crawl-state.json``; another version is ignored (a full crawl).
STATE_VERSION = 1
#: ``list`` is a method of the connector (the protocol's name): annotations inside the class use these.
Urls = list[str]
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_PAGE_SUFFIXES = (".html", ".htm", ".xhtml")
#: Linked files that are not pages: never requested.
_SKIP_SUFFIXES = frozenset(
    ".css .js .mjs .map .json .png .jpg .jpeg .gif .svg .webp .ico .bmp .tif .tiff .woff .woff2 .ttf .otf .eot "
    ".zip .gz .tgz .bz2 .xz .tar .whl .egg .exe .dmg .pkg .deb .rpm .pdf .epub .mp3 .mp4 .webm .ogg .wav .avi .mov "
    ".txt .rst .md .inv .xml .csv .tsv .ps .dvi".split()
)


@dataclass
class PageState:
    """What the last listing saw of one requested URL."""

    key: str | None = None
    marker: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    links: Urls = field(default_factory=list)
    redirects: Urls = field(default_factory=list)
    size: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [], 0)}


@dataclass
class CrawlReport:
    """What one listing did: requests, answers and what was left alone."""

    pages: int = 0
    requests: int = 0
    not_modified: int = 0
    fetched: int = 0
    bytes: int = 0
    failed: int = 0
    dead_links: int = 0
    robots_blocked: int = 0
    not_html: int = 0
    truncated: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Outcome:
    url: str
    state: PageState | None = None
    body: bytes | None = None
    error: DocumentError | None = None
    status: str = "ok"  # ok | not_modified | dead | not_html | failed | out_of_scope


class WebConnector:
    """A documentation site below a start URL (or the pages of a sitemap), crawled politely."""

    def __init__(self, location: str, *, options: WebOptions | None = None, state_dir: Path | None = None,
                 retry: RetryPolicy | None = None, client: httpx.Client | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.location = check_start_url(location)
        self.options = options or WebOptions()
        start = urlsplit(self.location)
        self.origin = (start.scheme, start.netloc)
        self.sitemap = (self.options.sitemap if self.options.sitemap is not None
                        else start.path.endswith(".xml"))
        prefix = self.options.prefix
        if prefix is None:
            prefix = start.path[: start.path.rfind("/") + 1] or "/"
        if not prefix.startswith("/"):
            raise ConfigError(f"web source: prefix must be a path starting with '/', got {prefix!r}")
        self.prefix = prefix
        self.root = urlunsplit((*self.origin, self.prefix, "", ""))
        self.state_path = state_dir / "crawl-state.json" if state_dir is not None else None
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(self.options.timeout_s),
            limits=httpx.Limits(max_connections=self.options.concurrency,
                                max_keepalive_connections=self.options.concurrency),
            headers={"User-Agent": self.options.user_agent}, follow_redirects=False,
        )
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._rate = self.options.rate_item()
        self._lock = threading.Lock()
        self._pages: dict[str, PageState] = self._load_state()
        self._bodies: dict[str, bytes] = {}
        self._errors: dict[str, DocumentError] = {}
        self._redirects: dict[str, Urls] = {}
        self._robots: RobotFileParser | None = None
        #: What the last listing did (``bench/crawl.py`` reports it).
        self.last_crawl = CrawlReport()
        #: The whole site when the last listing was cut short by a bound: nothing under it counts as deleted.
        self.unlisted_prefixes: frozenset[str] = frozenset()

    # -- scope ---------------------------------------------------------

    def in_scope(self, url: str) -> bool:
        """Same scheme, host and port as the start URL, inside the prefix, no query string."""
        parts = urlsplit(url)
        return ((parts.scheme, parts.netloc) == self.origin and parts.path.startswith(self.prefix)
                and not parts.query and ".." not in parts.path.split("/"))

    def _followable(self, url: str) -> bool:
        path = urlsplit(url).path.lower()
        name = path.rsplit("/", 1)[-1]
        return self.in_scope(url) and not ("." in name and name[name.rfind("."):] in _SKIP_SUFFIXES)

    # -- listing -------------------------------------------------------

    def list(self) -> Iterator[ObjectRef]:
        started = time.perf_counter()
        report = CrawlReport()
        self._bodies, self._errors, self._redirects = {}, {}, {}
        self.unlisted_prefixes = frozenset()
        self._robots = self._read_robots(report)
        previous = self._pages
        seen: dict[str, PageState] = {}
        refs: dict[str, ObjectRef] = {}
        frontier, depth, budget_bytes = self._starts(report), 0, self.options.max_total_bytes
        queued = set(frontier)
        with ThreadPoolExecutor(max_workers=self.options.concurrency, thread_name_prefix="freshindex-crawl") as pool:
            while frontier:
                frontier = self._allowed(frontier, report)
                room = self.options.max_pages - report.pages
                if len(frontier) > room:
                    report.truncated = f"max_pages={self.options.max_pages}"
                outcomes = list(pool.map(lambda u: self._visit(u, previous.get(u), report), frontier[:room]))
                links: set[str] = set()
                for out in outcomes:
                    if out.status in ("dead", "not_html", "out_of_scope"):
                        continue
                    report.pages += 1
                    st = out.state or PageState()
                    seen[out.url] = st
                    key = st.key or out.url
                    if out.error is not None:
                        report.failed += 1
                        self._errors.setdefault(key, out.error)
                        refs.setdefault(key, ObjectRef(key=key, etag=f"error:{out.error.reason}", size=0))
                    elif key not in refs:
                        refs[key] = ObjectRef(key=key, etag=st.marker, size=st.size)
                        if out.body is not None:
                            self._bodies[key] = out.body
                    if st.redirects:
                        self._redirects.setdefault(key, []).extend(r for r in st.redirects if r != key)
                    budget_bytes -= st.size if out.status == "ok" else 0
                    if not self.sitemap:
                        links.update(u for u in st.links if u not in queued and self._followable(u))
                frontier = sorted(links)
                queued.update(frontier)
                if not frontier or report.truncated:
                    break
                if budget_bytes <= 0:
                    report.truncated = f"max_total_bytes={self.options.max_total_bytes}"
                elif depth >= self.options.max_depth:
                    report.truncated = f"max_depth={self.options.max_depth}"
                if report.truncated:
                    break
                depth += 1
        if report.truncated:
            self.unlisted_prefixes = frozenset({self.root})
            log.warning("crawl cut short", extra={"event": "crawl_truncated", "location": self.location,
                                                  "bound": report.truncated, "pages": report.pages})
        self._pages = seen
        self._save_state()
        report.seconds = time.perf_counter() - started
        self.last_crawl = report
        log.info("crawl listed", extra={"event": "crawl_listed", "location": self.location, **report.as_dict()})
        yield from (refs[k] for k in sorted(refs))

    def _starts(self, report: CrawlReport) -> Urls:
        if not self.sitemap:
            return [self.location]
        pages: Urls = []
        maps: Urls = [self.location]
        done: set[str] = set()
        while maps and len(done) < 50:  # a sitemap index names sitemaps; 50 of them at most
            url = maps.pop(0)
            done.add(url)
            data = self._get_whole(url, report, what="sitemap")
            found, nested = sitemap_urls(data)
            pages += [normalise(u) for u in found]
            maps += [u for u in nested if urlsplit(u)[:2] == self.origin and u not in done]
        return sorted({u for u in pages if self.in_scope(u)})

    def _read_robots(self, report: CrawlReport) -> RobotFileParser:
        """The host's robots.txt (redirects on the same host followed), read with retries.

        4xx: everything allowed; 5xx or unreachable after the retries: the
        listing fails with :class:`SourceError` (RFC 9309 says assume all
        disallowed; failing the run keeps every indexed page as it was).
        """
        robots = RobotFileParser()
        url = urlunsplit((*self.origin, "/robots.txt", "", ""))

        def read(u: str) -> tuple[int, bytes]:
            resp, final, _ = self._follow(u, {}, report, scope=lambda t: urlsplit(t)[:2] == self.origin)
            if resp is None:
                return 404, b""  # redirected to another host: treated as absent
            with contextlib.closing(resp):
                if resp.status_code == 429 or resp.status_code >= 500:
                    raise SourceError(f"{final} answered {resp.status_code}")
                return resp.status_code, self._read_capped(resp, 512 * 1024, final)

        try:
            # fetch_with_retry is typed for bytes; the retry rule is the same for any result.
            status, body = cast(tuple[int, bytes], fetch_with_retry(
                cast(Callable[[str], bytes], read), url, self.retry, sleep=self._sleep))
        except DocumentError as exc:
            raise SourceError(f"cannot read {url} ({exc.detail}); the crawl stops, nothing is deleted") from exc
        # No rules (a 4xx) parse to "everything allowed".
        robots.parse([] if status >= 400 else body.decode("utf-8", errors="replace").splitlines())
        return robots

    def _get_whole(self, url: str, report: CrawlReport, *, what: str) -> bytes:
        resp = self._request(url, {}, report)
        with contextlib.closing(resp):
            if resp.status_code != 200:
                raise SourceError(f"the {what} {url} answered {resp.status_code}")
            return self._read_capped(resp, self.options.max_page_bytes, url)

    def _allowed(self, urls: Urls, report: CrawlReport) -> Urls:
        """``urls`` that robots.txt lets the crawler fetch (checked before the page bound counts them)."""
        robots = self._robots
        if robots is None:
            return urls
        allowed = [u for u in urls if robots.can_fetch(self.options.user_agent, u)]
        report.robots_blocked += len(urls) - len(allowed)
        return allowed

    def _visit(self, url: str, before: PageState | None, report: CrawlReport) -> _Outcome:
        """One page: conditional GET with retries, redirects, links and canonical."""
        try:
            visit = cast(Callable[[str], bytes], lambda u: self._visit_once(u, before, report))
            return cast(_Outcome, fetch_with_retry(visit, url, self.retry, sleep=self._sleep))
        except DocumentError as exc:
            # The links it had last time keep the pages behind it listed (not deleted).
            keep = PageState(key=before.key if before else None, links=list(before.links) if before else [])
            return _Outcome(url, state=keep, error=exc, status="failed")

    def _visit_once(self, url: str, before: PageState | None, report: CrawlReport) -> _Outcome:
        headers = {}
        if before is not None and before.marker:
            if before.etag:
                headers["If-None-Match"] = before.etag
            if before.last_modified:
                headers["If-Modified-Since"] = before.last_modified
        resp, final, hops = self._follow(url, headers, report)
        if resp is None:
            return _Outcome(url, status="out_of_scope")
        with contextlib.closing(resp):
            code = resp.status_code
            if code == 304 and before is not None:
                with self._lock:
                    report.not_modified += 1
                return _Outcome(url, state=replace(before, redirects=hops or before.redirects), status="not_modified")
            if code in (404, 410):
                with self._lock:
                    report.dead_links += 1
                return _Outcome(url, status="dead")
            _raise_for_status(resp, url)
            ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype and ctype not in _HTML_TYPES:
                with self._lock:
                    report.not_html += 1
                return _Outcome(url, status="not_html")
            body = self._read_capped(resp, self.options.max_page_bytes, final)
        with self._lock:
            report.fetched += 1
            report.bytes += len(body)
        links, canonical = page_links(body, final)
        key = self._key_for(final, canonical)
        etag, modified = resp.headers.get("etag"), resp.headers.get("last-modified")
        marker = etag or (f"lm:{modified}" if modified else "sha256:" + hashlib.sha256(body).hexdigest()[:32])
        state = PageState(key=key, marker=marker, etag=etag, last_modified=modified, links=links,
                          redirects=hops, size=len(body))
        error = self._key_error(key)
        return _Outcome(url, state=state, body=None if error else body, error=error)

    def _key_for(self, final: str, canonical: str | None) -> str:
        key = canonical if canonical and self.in_scope(canonical) else final
        if key.endswith("/") and self.options.directory_index:
            key += self.options.directory_index
        return key

    @staticmethod
    def _key_error(key: str) -> DocumentError | None:
        name = urlsplit(key).path.rsplit("/", 1)[-1].lower()
        if name.endswith(_PAGE_SUFFIXES):
            return None
        return DocumentError(DocumentError.UNSUPPORTED, f"{key} is an HTML page at a URL without an .html name; "
                             "the parsers choose by name (set the source option directory_index for URLs "
                             "ending in /)")

    def _follow(self, url: str, headers: dict[str, str], report: CrawlReport | None,
                scope: Callable[[str], bool] | None = None) -> tuple[httpx.Response | None, str, Urls]:
        """The response at the end of ``url``'s redirects, its URL and the URLs before it.

        A redirect out of scope (another host or scheme, outside the prefix)
        is not followed: ``(None, url, hops)``, the page is left out.
        """
        hops: Urls = []
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            resp = self._request(current, headers, report)
            if resp.status_code not in (301, 302, 303, 307, 308) or "location" not in resp.headers:
                return resp, current, hops
            resp.close()
            target = normalise(urljoin(current, resp.headers["location"]))
            hops.append(current)
            if not (scope or self.in_scope)(target):
                log.info("redirect not followed", extra={"event": "crawl_redirect_refused", "url": current,
                                                          "target": target})
                return None, current, hops
            current = target
        raise DocumentError(DocumentError.UNREADABLE, f"more than {MAX_REDIRECTS} redirects from {url}")

    def _request(self, url: str, headers: dict[str, str], report: CrawlReport | None) -> httpx.Response:
        """One GET, streamed, once the host's rate limit allows it; network failures are :class:`SourceError`."""
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise DocumentError(DocumentError.UNREADABLE, f"{url}: only http and https are fetched")
        host = urlsplit(url).netloc
        while not self._limiter.hit(self._rate, host):
            reset = self._limiter.get_window_stats(self._rate, host).reset_time
            self._sleep(min(max(reset - time.time(), 0.005), 5.0))
        if report is not None:
            with self._lock:
                report.requests += 1
        try:
            req = self._client.build_request("GET", url, headers=headers)
            return self._client.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise SourceError(f"GET {url}: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def _read_capped(resp: httpx.Response, cap: int, url: str) -> bytes:
        length = resp.headers.get("content-length")
        if length and length.isdigit() and int(length) > cap:
            raise DocumentError(DocumentError.TOO_LARGE, f"{url}: {length} bytes, limit {cap}")
        buf = bytearray()
        try:
            for piece in resp.iter_bytes():
                buf += piece
                if len(buf) > cap:
                    raise DocumentError(DocumentError.TOO_LARGE, f"{url}: more than {cap} bytes")
        except httpx.HTTPError as exc:
            raise SourceError(f"reading {url}: {type(exc).__name__}: {exc}") from exc
        return bytes(buf)

    # -- fetching ------------------------------------------------------

    def fetch(self, key: str) -> bytes:
        """The page's bytes: from the listing that just read it, else one GET (retried by the pipeline)."""
        if key in self._errors:
            raise self._errors[key]
        body = self._bodies.pop(key, None)
        if body is not None:
            return body
        if is_sidecar(key):  # ACL resolution asks every connector; a web site has no sidecar files
            raise DocumentError(DocumentError.VANISHED, f"{key}: web sources carry no ACL sidecars")
        if not self.in_scope(key):
            raise DocumentError(DocumentError.UNSAFE_KEY, f"{key} is not a page of {self.root}")
        if (error := self._key_error(key)) is not None:
            raise error
        resp, final, _ = self._follow(key, {}, None)
        if resp is None:
            raise DocumentError(DocumentError.VANISHED, f"{key} now redirects outside {self.root}")
        with contextlib.closing(resp):
            if resp.status_code in (404, 410):
                raise DocumentError(DocumentError.VANISHED, f"{key} answered {resp.status_code}")
            _raise_for_status(resp, key)
            return self._read_capped(resp, self.options.max_page_bytes, final)

    def chunk_meta(self, key: str) -> dict[str, Any]:
        """``redirected_from``: the URLs (sorted) that redirected to the page, when any did."""
        hops = sorted(set(self._redirects.get(key, ())))
        return {"redirected_from": hops} if hops else {}

    @property
    def redirects(self) -> dict[str, Urls]:
        """Document key -> the URLs the last listing was redirected from to reach it."""
        return {k: sorted(set(v)) for k, v in self._redirects.items() if v}

    def close(self) -> None:
        self._client.close()

    # -- state ---------------------------------------------------------

    def _load_state(self) -> dict[str, PageState]:
        if self.state_path is None or not self.state_path.is_file():
            return {}
        try:
            raw = json.loads(self.state_path.read_text())
            if raw.get("version") != STATE_VERSION or raw.get("location") != self.location:
                return {}
            return {url: PageState(**page) for url, page in raw.get("pages", {}).items()}
        except (OSError, ValueError, TypeError) as exc:
            log.warning("crawl state unreadable, crawling in full", extra={"event": "crawl_state_unreadable",
                                                                          "path": str(self.state_path),
                                                                          "error": str(exc)})
            return {}

    def _save_state(self) -> None:
        if self.state_path is None:
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": STATE_VERSION, "location": self.location,
                                   "pages": {u: p.as_dict() for u, p in sorted(self._pages.items())}}))
        os.replace(tmp, self.state_path)


def _raise_for_status(resp: httpx.Response, url: str) -> None:
    code = resp.status_code
    if code == 429 or code >= 500:
        raise SourceError(f"GET {url} answered {code}")
    if code in (401, 403):
        raise DocumentError(DocumentError.UNREADABLE, f"GET {url} answered {code} (access denied)")
    if code != 200:
        raise DocumentError(DocumentError.UNREADABLE, f"GET {url} answered {code}")


def _build(source: SourceLike, env: ConnectorEnv) -> WebConnector:
    options = WebOptions.of(env.sources.web, source.options, max_file_bytes=env.max_bytes)
    return WebConnector(source.location, options=options, state_dir=env.data_dir)


def _check_location(location: str, options: Mapping[str, Any]) -> str:
    url = check_start_url(location)
    WebConnector(url, options=WebOptions.of(None, options)).close()  # bad options and prefixes fail here
    return url


SPEC = ConnectorSpec(
    kind="web",
    build=_build,
    # The key is the page's URL (canonical, or where it was served): the citation shows it, #anchor appended.
    source_uri=lambda _location, key: key,
    location_help="a start URL (https://docs.example.com/en/stable/) or a sitemap (.../sitemap.xml)",
    check_location=_check_location,
    options=(
        ConnectorOption("prefix", "path prefix pages must start with (default: the start URL's folder)"),
        ConnectorOption("sitemap", "true: the location is a sitemap (default: when it ends in .xml)"),
        ConnectorOption("max_pages", "pages per crawl (default: sources.web.max_pages)"),
        ConnectorOption("max_depth", "links followed from the start (default: sources.web.max_depth)"),
        ConnectorOption("max_total_bytes", "bytes downloaded per crawl (default: sources.web.max_total_bytes)"),
        ConnectorOption("max_page_bytes", "bytes of one page (default: sources.web.max_page_bytes)"),
        ConnectorOption("concurrency", "requests in flight (default: sources.web.concurrency)"),
        ConnectorOption("rate_limit", "requests per host, e.g. 2/second (default: sources.web.rate_limit)"),
        ConnectorOption("timeout_s", "seconds per request (default: sources.web.timeout_s)"),
        ConnectorOption("user_agent", "User-Agent and robots.txt agent (default: sources.web.user_agent)"),
        ConnectorOption("directory_index", "name appended to a URL ending in / (default index.html; empty: none)"),
    ),
    hooks=(UnlistedPrefixes, ChunkMeta),
)


__all__ = ["SPEC", "CrawlReport", "WebConnector", "WebOptions", "check_start_url", "page_links", "sitemap_urls"]
