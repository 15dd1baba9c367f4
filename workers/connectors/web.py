"""A documentation web site as a source: a bounded, polite, incremental crawler.

A source of kind ``web`` is a start URL (``https://docs.example.com/en/stable/``)
or a sitemap (``.../sitemap.xml``).  Listing it crawls:

* every URL in one form first (:func:`~workers.connectors.web_links.normalise`,
  RFC 3986: unreserved escapes decoded, dot segments removed, an encoded
  ``/`` or ``\\`` refused), so scope, robots.txt and keys judge what the
  server will be asked for, however a link spells it;
* only URLs of the start URL's scheme, host and port whose path starts with
  the prefix (option ``prefix``; by default the start URL's folder), without
  a query string; a redirect elsewhere is not followed;
* obeying ``robots.txt``, read once per listing and compiled once
  (:class:`~workers.connectors.web_links.RobotsRules`, RFC 9309), asked only
  about the URLs that will be requested (after the page bound cut the level);
  one that answers 5xx or cannot be reached fails the listing (nothing is
  deleted), one that answers 4xx allows everything;
* breadth-first, level by level in sorted order (a bounded crawl lists the
  same pages each time), within ``max_pages``, ``max_depth``,
  ``max_total_bytes`` and ``crawl_deadline_s`` (wall clock, link extraction
  included); each request (redirects, retries, headers and body) within
  ``request_deadline_s`` (:func:`~workers.connectors.web_options.request_deadline`),
  each page's links read within ``page_links_cpu_s`` of CPU; ``concurrency``
  requests in flight, ``rate_limit`` per host; links to files that are not
  pages (``.css``, ``.png``, ``.zip``...) are not followed.

A page the previous listing saw is fetched with a conditional GET
(``If-None-Match``, ``If-Modified-Since``); a ``304`` costs no body and keeps
its change marker (:attr:`ObjectRef.etag`: the ``ETag``, else the
``Last-Modified`` date, else a hash of the body), so nothing is parsed or
embedded.  What a listing saw is the run's pending source state (key
``web_pages``, :mod:`registry.source_state`), promoted when the run succeeds:
a failed or killed run's validators are never used, and every worker reads
the same ones.  A source without it (upgraded from a version that kept
``crawl-state.json`` in the source's folder) reads that file once; nothing
writes it any more.  Without either every page is fetched in full and the
markers still spare the unchanged ones.

A document's key is the URL its page was served from after redirects (``/``
at the end gets option ``directory_index``, ``index.html``); its listing
carries the page's media type (``Content-Type``), so a page at a URL without
an ``.html`` name (``/guide/install/`` with no directory index,
``/api/v2/users``) that its server said is HTML is parsed as HTML.  A page takes the
URL its ``<link rel="canonical">`` names only when the page at that URL was
fetched in the same crawl and names itself canonical, or has the same bytes:
then they are one document, whose content is the one served at its key.  Any
other claim on a fetched page is an ``unsafe_key`` error listed under the
claimant's URL, naming both pages; the claimed page keeps its URL and content.
The key is the citation's URI; the URLs that redirected to it are kept
(``chunk_meta``, ``redirected_from``).

A page that fails (an error status other than 404/410, retries spent, its
deadline, a byte cap, a URL without an ``.html`` name not served as HTML) is still listed and
fails alone when fetched.  A 404 or 410 is not listed (the page is deleted).
A crawl cut short by a bound (pages, depth, bytes, its deadline, a page's link
budget) deletes nothing (:attr:`unlisted_prefixes`) and names it (``unlisted_reason``).

What a listing read (bodies, errors, redirects) is kept under a crawl id,
recorded as the run's pending cursor (``{"crawl": id}``).  Document tasks
read through :meth:`WebConnector.for_run`: that table only when the run
planned that very crawl, else a fresh GET, so a body one run listed is never
served to another (:data:`CRAWLS_KEPT` tables, bodies in the newest only).
Not guaranteed: that a server's ``ETag`` changes with its content (trusted, as
S3's is); JavaScript-rendered pages; that a fresh GET returns what the listing saw.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import httpx

from freshindex.acl.model import is_sidecar
from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.core.types import ObjectRef
from freshindex.workers.connectors import ChunkMeta, Connector, RunScoped, UnlistedPrefixes
from freshindex.workers.connectors.registry import (
    ConnectorEnv,
    ConnectorSpec,
    CursorStore,
    SourceLike,
    StateStore,
)
from freshindex.workers.connectors.retry import RetryPolicy, fetch_with_retry
from freshindex.workers.connectors.web_links import (
    HTML_TYPES,
    SKIP_SUFFIXES,
    STATE_KEY,
    CrawlReport,
    PageState,
    RobotsRules,
    UpgradedState,
    canonical_key,
    media_type_of,
    normalise,
    normalise_path,
    page_key_error,
    page_links,
    pages_from,
    pages_record,
    read_page,
    sitemap_urls,
)
from freshindex.workers.connectors.web_options import (
    OPTIONS_HELP,
    SiteClient,
    WebOptions,
    WebSourceOptions,
    check_start_url,
    raise_for_status,
    request_deadline,
)

log = logging.getLogger("freshindex.connectors.web")

#: Crawls whose tables (errors, redirects; bodies of the newest only) a connector keeps for their runs' tasks.
CRAWLS_KEPT = 2
#: ``list`` is a method of the connector (the protocol's name): annotations inside the class use these.
Urls = list[str]
Outcomes = list["_Outcome"]


@dataclass
class _Outcome:
    url: str
    state: PageState | None = None
    body: bytes | None = None
    error: DocumentError | None = None
    status: str = "ok"  # ok | not_modified | dead | not_html | failed | out_of_scope | unvisited


@dataclass
class _CrawlTable:
    """What one listing read, for the document tasks of the run that planned it."""

    id: str
    bodies: dict[str, bytes] = field(default_factory=dict)
    errors: dict[str, DocumentError] = field(default_factory=dict)
    redirects: dict[str, Urls] = field(default_factory=dict)

    def chunk_meta(self, key: str) -> dict[str, Any]:
        hops = sorted(set(self.redirects.get(key, ())))
        return {"redirected_from": hops} if hops else {}


class _RunView:
    """A web connector as one run planned it (:class:`RunScoped`): that crawl's table, else fresh GETs."""

    def __init__(self, conn: WebConnector, table: _CrawlTable | None) -> None:
        self._conn, self._table = conn, table

    def list(self) -> Iterator[ObjectRef]:
        return self._conn.list()

    def fetch(self, key: str) -> bytes:
        return self._conn._fetch(key, self._table)

    def peek(self, key: str) -> bytes:
        """As :meth:`fetch`, leaving the listed body for the document task (the planner's move finding)."""
        return self._conn._fetch(key, self._table, keep=True)

    def chunk_meta(self, key: str) -> dict[str, Any]:
        return self._table.chunk_meta(key) if self._table is not None else {}


class WebConnector:
    """A documentation site below a start URL (or the pages of a sitemap), crawled politely."""

    def __init__(self, location: str, *, options: WebOptions | None = None, state: StateStore | None = None,
                 retry: RetryPolicy | None = None, client: httpx.Client | None = None,
                 sleep: Callable[[float], None] = time.sleep, cursor: CursorStore | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.location = check_start_url(location)
        self.options = options or WebOptions()
        start = urlsplit(self.location)
        self.origin = (start.scheme, start.netloc)
        self.sitemap = self.options.sitemap if self.options.sitemap is not None else start.path.endswith(".xml")
        prefix = self.options.prefix
        if prefix is None:
            prefix = start.path[: start.path.rfind("/") + 1] or "/"
        if not prefix.startswith("/"):
            raise ConfigError(f"web source: prefix must be a path starting with '/', got {prefix!r}")
        try:
            self.prefix = normalise_path(prefix)
        except ValueError as exc:
            raise ConfigError(f"web source: prefix {prefix!r} is refused: {exc}") from exc
        self.root = urlunsplit((*self.origin, self.prefix, "", ""))
        self.retry = retry or RetryPolicy()
        self._sleep, self._clock, self._cursor, self._state = sleep, clock, cursor, state
        self._http = SiteClient(self.options, client=client, sleep=sleep)
        self._client = self._http.client
        self._lock = threading.Lock()
        #: What the previous listing saw (without a state store: this connector's own last listing).
        self._pages: dict[str, PageState] = {}
        self._crawls: dict[str, _CrawlTable] = {}
        self._robots: RobotsRules | None = None
        self._deadline_at: float | None = None
        #: What the last listing did (``bench/crawl.py`` reports it).
        self.last_crawl = CrawlReport()
        #: The whole site when the last listing was cut short (why: ``unlisted_reason``): nothing counts as deleted.
        self.unlisted_prefixes: frozenset[str] = frozenset()
        self.unlisted_reason: str | None = None

    # -- scope ---------------------------------------------------------

    def in_scope(self, url: str) -> bool:
        """Normalised: same scheme, host and port as the start URL, inside the prefix, no query string."""
        try:
            parts = urlsplit(normalise(url))
        except ValueError:
            return False
        return (parts.scheme, parts.netloc) == self.origin and parts.path.startswith(self.prefix) and not parts.query

    def _followable(self, url: str) -> bool:
        path = urlsplit(url).path.lower()
        name = path.rsplit("/", 1)[-1]
        return self.in_scope(url) and not ("." in name and name[name.rfind("."):] in SKIP_SUFFIXES)

    def _own_key(self, url: str) -> str:
        return url + self.options.directory_index if url.endswith("/") else url

    # -- per run -------------------------------------------------------

    def for_run(self, run_id: int) -> Connector:
        """This connector as run ``run_id`` planned it: its crawl's table when that crawl is kept here, else GETs."""
        planned = self._cursor.planned(run_id) if self._cursor is not None else None
        crawl = (planned or {}).get("crawl")
        with self._lock:
            table = self._crawls.get(crawl) if isinstance(crawl, str) else None
        return _RunView(self, table)

    def _keep(self, table: _CrawlTable) -> None:
        """Keep ``table`` as the newest; older ones lose their bodies (one crawl's bytes in memory at most)."""
        with self._lock:
            for older in self._crawls.values():
                older.bodies.clear()
            self._crawls[table.id] = table
            while len(self._crawls) > CRAWLS_KEPT:
                self._crawls.pop(next(iter(self._crawls)))

    def _latest(self) -> _CrawlTable | None:
        with self._lock:
            return next(reversed(self._crawls.values()), None)

    # -- listing -------------------------------------------------------

    def list(self) -> Iterator[ObjectRef]:
        started = time.perf_counter()
        report = CrawlReport()
        self.unlisted_prefixes = frozenset()
        self._deadline_at = self._clock() + self.options.crawl_deadline_s
        self._pages = self._previous_pages()
        try:
            self._robots = self._read_robots(report)
            outcomes = self._walk(self._starts(report), report)
        finally:
            self._deadline_at = None
        table = _CrawlTable(uuid.uuid4().hex)
        refs, seen = self._resolve(outcomes, table, report)
        report.robots_checks = self._robots.checks if self._robots is not None else 0
        if report.links_cut and not report.truncated:
            report.truncated = f"page_links_cpu_s={self.options.page_links_cpu_s:g}"
        if report.truncated:
            self.unlisted_prefixes = frozenset({self.root})
            seen = {**self._pages, **seen}  # the pages it did not reach keep their validators
            log.warning("crawl cut short", extra={"event": "crawl_truncated", "location": self.location,
                                                  "bound": report.truncated, "pages": report.pages})
        self._pages = seen
        self._keep(table)
        if self._state is not None:  # promoted with the run: the next listing's validators
            self._state.set_pending({STATE_KEY: pages_record(self.location, seen)})
        if self._cursor is not None:
            self._cursor.set_pending({"crawl": table.id})  # the run's document tasks read this crawl or GET afresh
        report.seconds = time.perf_counter() - started
        self.last_crawl, self.unlisted_reason = report, report.truncated
        log.info("crawl listed", extra={"event": "crawl_listed", "location": self.location, **report.as_dict()})
        yield from (refs[k] for k in sorted(refs))

    def _previous_pages(self) -> dict[str, PageState]:
        """What the last successful listing saw (the source state's); without a store, this connector's last."""
        if self._state is None:
            return self._pages
        return pages_from(self._state.get().get(STATE_KEY) or {}, self.location)

    def _count(self, report: CrawlReport) -> None:
        with self._lock:
            report.requests += 1

    def _past_deadline(self) -> bool:
        return self._deadline_at is not None and self._clock() >= self._deadline_at

    def _request_scope(self, *, crawl: bool) -> AbstractContextManager[None]:
        """The wall-clock deadline of the requests in the block: the request's own, within the crawl's."""
        seconds = self.options.request_deadline_s
        if crawl and self._deadline_at is not None:
            seconds = min(seconds, self._deadline_at - self._clock())
        return request_deadline(seconds)

    def _walk(self, frontier: Urls, report: CrawlReport) -> Outcomes:
        """Breadth-first from ``frontier`` within the bounds: the outcome of every page reached."""
        previous = self._pages
        outcomes: Outcomes = []
        depth, budget_bytes = 0, self.options.max_total_bytes
        queued = set(frontier)
        with ThreadPoolExecutor(max_workers=self.options.concurrency, thread_name_prefix="freshindex-crawl") as pool:
            while frontier:
                frontier, more = self._allowed(frontier, self.options.max_pages - report.pages, report)
                if more:
                    report.truncated = f"max_pages={self.options.max_pages}"
                links: set[str] = set()
                claims: set[str] = set()  # canonical URLs claimed: fetched first, only they can grant a claim
                for out in pool.map(lambda u: self._visit(u, previous.get(u), report), frontier):
                    if out.status == "unvisited":
                        report.unvisited += 1
                    if out.status in ("dead", "not_html", "out_of_scope", "unvisited"):
                        continue
                    report.pages += 1
                    outcomes.append(out)
                    st = out.state or PageState()
                    budget_bytes -= st.size if out.status == "ok" else 0
                    links.update(u for u in ([] if self.sitemap else st.links) if u not in queued and self._followable(u))
                    claims.update(u for u in [st.canonical] if u and self._own_key(u) != st.own and u not in queued
                                  and self._followable(u))
                if report.unvisited or ((links or claims) and self._past_deadline()):
                    report.truncated = report.truncated or f"crawl_deadline_s={self.options.crawl_deadline_s:g}"
                frontier = sorted(claims) + sorted(links - claims)
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
        return outcomes

    def _resolve(self, outcomes: Outcomes, table: _CrawlTable,
                 report: CrawlReport) -> tuple[dict[str, ObjectRef], dict[str, PageState]]:
        """Each page's key (its own URL, or a canonical URL it may take), the listing's refs and its state."""
        holders: dict[str, PageState] = {}
        for out in outcomes:
            if out.error is None and out.state is not None and out.state.own:
                holders.setdefault(out.state.own, out.state)
        seen: dict[str, PageState] = {}
        own: list[tuple[str, _Outcome]] = []
        aliases: list[tuple[str, _Outcome]] = []
        errors: list[tuple[str, DocumentError]] = []
        for out in outcomes:
            st = seen[out.url] = out.state or PageState()
            if out.error is not None:
                errors.append((st.key or self._own_key(out.url), out.error))
                continue
            st.own = st.own or self._own_key(out.url)
            key, error = canonical_key(st, holders, self._own_key)
            st.key = key
            if error is not None:
                report.canonical_conflicts += 1
            if (error := error or page_key_error(key, st.media_type)) is not None:
                errors.append((key, error))
                continue
            (own if key == st.own else aliases).append((key, out))
        refs: dict[str, ObjectRef] = {}
        for key, out in own + aliases:  # a key's content is the page served at it, when it was fetched
            st = out.state or PageState()
            if key not in refs:
                refs[key] = ObjectRef(key=key, etag=st.marker, size=st.size, media_type=st.media_type)
                if out.body is not None:
                    table.bodies[key] = out.body
            if st.redirects:
                table.redirects.setdefault(key, []).extend(r for r in st.redirects if r != key)
        report.failed += len(errors)
        for key, error in errors:
            table.errors.setdefault(key, error)
            refs.setdefault(key, ObjectRef(key=key, etag=f"error:{error.reason}", size=0))
        return refs, seen

    def _starts(self, report: CrawlReport) -> Urls:
        if not self.sitemap:
            return [self.location]
        pages: set[str] = set()
        maps: Urls = [self.location]
        done: set[str] = set()
        while maps and len(done) < 50:  # a sitemap index names sitemaps; 50 of them at most
            url = maps.pop(0)
            done.add(url)
            with self._request_scope(crawl=True), contextlib.closing(
                    self._http.request(url, {}, functools.partial(self._count, report))) as resp:
                if resp.status_code != 200:
                    raise SourceError(f"the sitemap {url} answered {resp.status_code}")
                found, nested = sitemap_urls(self._http.read_capped(resp, self.options.max_page_bytes, url))
            for u in found:
                with contextlib.suppress(ValueError):
                    pages.add(normalise(u))
            maps += [u for u in nested if urlsplit(u)[:2] == self.origin and u not in done]
        return sorted(u for u in pages if self.in_scope(u))

    def _read_robots(self, report: CrawlReport) -> RobotsRules:
        """The host's robots.txt (redirects on the same host followed), read with retries, compiled once.

        4xx: everything allowed; 5xx or unreachable after the retries: the
        listing fails with :class:`SourceError` (RFC 9309 says assume all
        disallowed; failing the run keeps every indexed page as it was).
        """
        url = urlunsplit((*self.origin, "/robots.txt", "", ""))

        def read(u: str) -> tuple[int, bytes]:
            resp, final, _ = self._http.follow(u, {}, functools.partial(self._count, report),
                                               scope=lambda t: urlsplit(t)[:2] == self.origin)
            if resp is None:
                return 404, b""  # redirected to another host: treated as absent
            with contextlib.closing(resp):
                if resp.status_code == 429 or resp.status_code >= 500:
                    raise SourceError(f"{final} answered {resp.status_code}")
                return resp.status_code, self._http.read_capped(resp, 512 * 1024, final)

        try:
            # fetch_with_retry is typed for bytes; the retry rule is the same for any result.
            with self._request_scope(crawl=True):
                status, body = cast(tuple[int, bytes], fetch_with_retry(
                    cast(Callable[[str], bytes], read), url, self.retry, sleep=self._sleep))
        except DocumentError as exc:
            raise SourceError(f"cannot read {url} ({exc.detail}); the crawl stops, nothing is deleted") from exc
        # No rules (a 4xx) parse to "everything allowed".
        text = "" if status >= 400 else body.decode("utf-8", errors="replace")
        return RobotsRules.parse(text, self.options.user_agent)

    def _allowed(self, urls: Urls, room: int, report: CrawlReport) -> tuple[Urls, bool]:
        """Up to ``room`` of ``urls``, in order, that robots.txt allows, and whether some were left unasked."""
        robots, allowed = self._robots, cast(Urls, [])
        for url in urls:
            if len(allowed) >= room:
                return allowed, True
            parts = urlsplit(url)
            if robots is None or robots.allows(parts.path + (f"?{parts.query}" if parts.query else "")):
                allowed.append(url)
            else:
                report.robots_blocked += 1
        return allowed, False

    def _visit(self, url: str, before: PageState | None, report: CrawlReport) -> _Outcome:
        """One page within the crawl's deadline: conditional GET with retries, redirects, links and canonical."""
        if self._past_deadline():
            return _Outcome(url, status="unvisited")
        try:
            with self._request_scope(crawl=True):
                visit = cast(Callable[[str], bytes], lambda u: self._visit_once(u, before, report))
                return cast(_Outcome, fetch_with_retry(visit, url, self.retry, sleep=self._sleep))
        except DocumentError as exc:
            if self._past_deadline():  # cut by the crawl's deadline, not the page's fault
                return _Outcome(url, status="unvisited")
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
        resp, final, hops = self._http.follow(url, headers, functools.partial(self._count, report), self.in_scope)
        if resp is None:
            return _Outcome(url, status="out_of_scope")
        with contextlib.closing(resp):
            code = resp.status_code
            if code == 304 and before is not None:
                with self._lock:
                    report.not_modified += 1
                return _Outcome(url, state=replace(before, own=self._own_key(final),
                                                   redirects=hops or before.redirects), status="not_modified")
            if code in (404, 410):
                with self._lock:
                    report.dead_links += 1
                return _Outcome(url, status="dead")
            raise_for_status(resp, url)
            ctype = media_type_of(resp.headers.get("content-type"))
            if ctype and ctype not in HTML_TYPES:
                with self._lock:
                    report.not_html += 1
                return _Outcome(url, status="not_html")
            body = self._http.read_capped(resp, self.options.max_page_bytes, final)
        with self._lock:
            report.fetched += 1
            report.bytes += len(body)
        return _Outcome(url, state=self._page_state(body, final, hops, resp.headers, report), body=body)

    def _page_state(self, body: bytes, final: str, hops: Urls, headers: httpx.Headers,
                    report: CrawlReport) -> PageState:
        """Links, canonical claim and change marker of a page fetched in full; its links within the CPU budget."""
        budget = self.options.page_links_cpu_s
        if self._deadline_at is not None:
            budget = max(min(budget, self._deadline_at - self._clock()), 0.0)
        page = read_page(body, final, budget_s=budget)
        if page.cut:
            with self._lock:
                report.links_cut += 1
            log.warning("page links cut", extra={"event": "crawl_links_cut", "url": final, "links": len(page.links),
                                                 "budget_s": budget})
        digest = hashlib.sha256(body).hexdigest()
        etag, modified = headers.get("etag"), headers.get("last-modified")
        marker = etag or (f"lm:{modified}" if modified else "sha256:" + digest[:32])
        own = self._own_key(final)
        canonical = page.canonical if page.canonical and self.in_scope(page.canonical) else None
        return PageState(key=own, own=own, canonical=canonical, digest=digest, marker=marker, etag=etag,
                         last_modified=modified, links=page.links, redirects=hops, size=len(body),
                         media_type=media_type_of(headers.get("content-type")))

    # -- fetching ------------------------------------------------------

    def fetch(self, key: str) -> bytes:
        """The page's bytes from the latest listing's table, else one GET (document tasks use :meth:`for_run`)."""
        return self._fetch(key, self._latest())

    def _fetch(self, key: str, table: _CrawlTable | None, *, keep: bool = False) -> bytes:
        """The page's bytes from ``table`` (one crawl's; given up unless ``keep``), else one bounded GET."""
        if table is not None:
            with self._lock:
                error = table.errors.get(key)
                body = table.bodies.get(key) if keep else table.bodies.pop(key, None)
            if error is not None:
                raise error
            if body is not None:
                return body
        if is_sidecar(key):  # ACL resolution asks every connector; a web site has no sidecar files
            raise DocumentError(DocumentError.VANISHED, f"{key}: web sources carry no ACL sidecars")
        with contextlib.suppress(ValueError):
            if key == normalise(key) and self.in_scope(key):
                return self._get_page(key)
        raise DocumentError(DocumentError.UNSAFE_KEY, f"{key} is not a page of {self.root}")

    def _get_page(self, key: str) -> bytes:
        with self._request_scope(crawl=False):
            resp, final, _ = self._http.follow(key, {}, None, self.in_scope)
            if resp is None:
                raise DocumentError(DocumentError.VANISHED, f"{key} now redirects outside {self.root}")
            with contextlib.closing(resp):
                if resp.status_code in (404, 410):
                    raise DocumentError(DocumentError.VANISHED, f"{key} answered {resp.status_code}")
                raise_for_status(resp, key)
                if (error := page_key_error(key, media_type_of(resp.headers.get("content-type")))) is not None:
                    raise error  # no parser would read it: its bytes are not worth reading
                return self._http.read_capped(resp, self.options.max_page_bytes, final)

    def chunk_meta(self, key: str) -> dict[str, Any]:
        """``redirected_from``: the URLs (sorted) that redirected to the page in the latest listing, when any did."""
        table = self._latest()
        return table.chunk_meta(key) if table is not None else {}

    @property
    def redirects(self) -> dict[str, Urls]:
        """Document key -> the URLs the last listing was redirected from to reach it."""
        table = self._latest()
        return {k: sorted(set(v)) for k, v in (table.redirects if table else {}).items() if v}

    def close(self) -> None:
        self._http.close()



def _build(source: SourceLike, env: ConnectorEnv) -> WebConnector:
    options = WebOptions.of(env.sources.web, source.options, max_file_bytes=env.max_bytes)
    state = UpgradedState(env.state, env.data_dir / "crawl-state.json", source.location) if env.state else None
    return WebConnector(source.location, options=options, state=state, cursor=env.cursor)


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
    options=OPTIONS_HELP,
    hooks=(UnlistedPrefixes, ChunkMeta, RunScoped),
    options_model=WebSourceOptions,
)


__all__ = ["SPEC", "CrawlReport", "PageState", "WebConnector", "WebOptions", "check_start_url", "page_links", "sitemap_urls"]
