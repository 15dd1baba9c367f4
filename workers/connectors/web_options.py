"""A web source's options and start URL (checked when the source is added and when it is crawled), and its HTTP.

:class:`WebOptions` are the bounds of one crawl (``sources.web`` with the
source's own options).  :class:`SiteClient` sends a crawl's GETs: the host's
rate limit, redirects followed by hand, bodies read under a byte cap, all
within :func:`request_deadline`, the wall-clock deadline one request must
finish by: every wait on the network (connecting, each read of the headers
and of the body, through :func:`crawl_client`'s sockets) is cut to what is
left of it, so a server that sends one byte every few seconds cannot hold a
request past it.

The crawl itself is :mod:`workers.connectors.web`; what each option bounds is
described there and in ``docs/configuration.md``.  Not done here: the deadline
bounds waits on this thread's requests only, and a client passed in by a
caller (a test's ``MockTransport``) has no network under it to bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpcore
import httpx
from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from pydantic import TypeAdapter, ValidationError

from freshindex.core.errors import ConfigError, DocumentError, SourceError
from freshindex.workers.connectors.options import SourceOptions
from freshindex.workers.connectors.registry import ConnectorOption
from freshindex.workers.connectors.web_links import normalise, resolve

log = logging.getLogger("freshindex.connectors.web")


@dataclass(frozen=True)
class WebOptions:
    """How one web source is crawled: settings ``sources.web`` with the source's own ``--option`` values."""

    max_pages: int = 1000
    max_depth: int = 20
    max_total_bytes: int = 256 * 1024 * 1024
    max_page_bytes: int = 10 * 1024 * 1024
    concurrency: int = 4
    rate_limit: str = "10/second"
    timeout_s: float = 30.0
    request_deadline_s: float = 120.0
    crawl_deadline_s: float = 3600.0
    page_links_cpu_s: float = 2.0
    user_agent: str = "freshindex-crawler/1"
    prefix: str | None = None
    directory_index: str = "index.html"
    sitemap: bool | None = None

    @classmethod
    def of(cls, defaults: Any, options: Mapping[str, Any], *, max_file_bytes: int | None = None) -> WebOptions:
        """Options from the settings block ``sources.web`` (or None) overridden by a source's string options.

        ``max_file_bytes`` (``sources.max_file_bytes``) caps ``max_page_bytes``."""
        base = cls()
        if defaults is not None:
            base = replace(base, **{f: getattr(defaults, f) for f in (
                "max_pages", "max_depth", "max_total_bytes", "max_page_bytes", "concurrency", "rate_limit",
                "timeout_s", "user_agent", "request_deadline_s", "crawl_deadline_s", "page_links_cpu_s",
            ) if hasattr(defaults, f)})
        kw: dict[str, Any] = {}
        ints = ("max_pages", "max_depth", "max_total_bytes", "max_page_bytes", "concurrency")
        for name, value in options.items():
            if name in ints:
                kw[name] = _int_option(name, value)
            elif name in _FLOATS:
                kw[name] = _float_option(name, value)
            elif name == "sitemap":  # read as the options model checked it (pydantic: t, y, on, 1, ...)
                try:
                    kw[name] = _BOOL.validate_python(value)
                except ValidationError:
                    raise ConfigError(f"web source: sitemap must be true or false, got {value!r}") from None
            elif name in ("rate_limit", "user_agent", "prefix", "directory_index"):
                kw[name] = str(value)
        out = replace(base, **kw)
        if max_file_bytes is not None:
            out = replace(out, max_page_bytes=min(out.max_page_bytes, max_file_bytes))
        if out.max_pages < 1 or out.max_depth < 0 or out.max_total_bytes < 1 or out.max_page_bytes < 1:
            raise ConfigError("web source: max_pages, max_total_bytes and max_page_bytes must be positive, "
                              "max_depth not negative")
        if min(getattr(out, f) for f in _FLOATS) <= 0:
            raise ConfigError(f"web source: {', '.join(_FLOATS)} must be positive")
        if not 1 <= out.concurrency <= 64:
            raise ConfigError(f"web source: concurrency must be 1..64, got {out.concurrency}")
        out.rate_item()  # raises on a bad rate
        return out

    def rate_item(self) -> RateLimitItem:
        try:
            return parse(self.rate_limit)
        except ValueError as exc:
            raise ConfigError(f"web source: rate_limit {self.rate_limit!r} is not a rate such as "
                              "'10/second' or '1 per 2 seconds'") from exc


_FLOATS = ("timeout_s", "request_deadline_s", "crawl_deadline_s", "page_links_cpu_s")
#: How ``sitemap`` reads, the same as :class:`WebSourceOptions` checks it: ``t`` and ``y`` are true in both.
_BOOL: TypeAdapter[bool] = TypeAdapter(bool)


def _int_option(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"web source: option {name} must be a whole number, got {value!r}") from exc


def _float_option(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"web source: option {name} must be a number, got {value!r}") from exc


def check_start_url(location: str) -> str:
    """The start URL as stored: http(s) with a host, no credentials, no fragment; else :class:`ConfigError`."""
    parts = urlsplit(location.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"a web source's location must be an http:// or https:// URL, got {location!r}")
    if parts.username or parts.password:
        raise ConfigError("a web source's URL must not carry credentials")
    try:
        return normalise(urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, "")))
    except ValueError as exc:
        raise ConfigError(f"a web source's URL is refused: {exc}") from exc


_local = threading.local()


@contextmanager
def request_deadline(seconds: float) -> Iterator[None]:
    """Requests this thread sends in the block must be done within ``seconds`` (wall clock) of now.

    Nested blocks keep the earlier deadline.  Past it, a wait on the network raises
    :class:`httpx.TimeoutException` (see :func:`deadline_passed`)."""
    before = getattr(_local, "at", None)
    at = time.monotonic() + max(seconds, 0.0)
    _local.at = at if before is None else min(at, before)
    try:
        yield
    finally:
        _local.at = before


def deadline_passed() -> bool:
    """Whether this thread is inside :func:`request_deadline` and past it."""
    at = getattr(_local, "at", None)
    return at is not None and time.monotonic() >= at


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    at = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every wait is cut to what is left of this thread's request deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, each wrapped in a :class:`_DeadlineStream`."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(host, port, _bounded(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a crawl connects over TCP only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def crawl_client(options: WebOptions) -> httpx.Client:
    """The crawl's HTTP client: redirects by hand, ``timeout_s`` per wait, :func:`request_deadline` obeyed."""
    transport = httpx.HTTPTransport(limits=httpx.Limits(max_connections=options.concurrency,
                                                        max_keepalive_connections=options.concurrency))
    # httpx builds its httpcore pool without a way to pass a network backend: the same pool, with ours.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(), max_connections=options.concurrency,
        max_keepalive_connections=options.concurrency, network_backend=_DeadlineBackend())
    return httpx.Client(transport=transport, timeout=httpx.Timeout(options.timeout_s),
                        headers={"User-Agent": options.user_agent}, follow_redirects=False)


#: Redirect hops followed for one request.
MAX_REDIRECTS = 5
Counter = Callable[[], None] | None


class SiteClient:
    """GETs to one site for a crawl: the host's rate limit, redirects followed by hand, bodies read under caps.

    Every wait (the rate limit, the network, the body) ends at this thread's :func:`request_deadline`:
    past it, :func:`timed_out`.  Network failures are :class:`SourceError` (retryable).  Not done
    here: scope (the caller says which redirect targets it follows) and robots.txt.
    """

    def __init__(self, options: WebOptions, *, client: httpx.Client | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client or crawl_client(options)
        self._sleep = sleep
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._rate = options.rate_item()

    def request(self, url: str, headers: dict[str, str], count: Counter = None) -> httpx.Response:
        """One GET, streamed, once the host's rate limit allows it (``count`` is called as it is sent)."""
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise DocumentError(DocumentError.UNREADABLE, f"{url}: only http and https are fetched")
        host = urlsplit(url).netloc
        while not self._limiter.hit(self._rate, host):
            if deadline_passed():
                raise timed_out(url)
            reset = self._limiter.get_window_stats(self._rate, host).reset_time
            self._sleep(min(max(reset - time.time(), 0.005), 5.0))
        if count is not None:
            count()
        try:
            req = self.client.build_request("GET", url, headers=headers)
            return self.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            if deadline_passed():
                raise timed_out(url) from exc
            raise SourceError(f"GET {url}: {type(exc).__name__}: {exc}") from exc

    def follow(self, url: str, headers: dict[str, str], count: Counter,
               scope: Callable[[str], bool]) -> tuple[httpx.Response | None, str, list[str]]:
        """The response at the end of ``url``'s redirects, its URL and the URLs before it.

        A redirect to a URL outside ``scope`` (or one :func:`normalise` refuses) is not
        followed: ``(None, url, hops)``.  More than :data:`MAX_REDIRECTS` is a :class:`DocumentError`.
        """
        hops: list[str] = []
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            resp = self.request(current, headers, count)
            if resp.status_code not in (301, 302, 303, 307, 308) or "location" not in resp.headers:
                return resp, current, hops
            resp.close()
            hops.append(current)
            try:
                target = resolve(current, resp.headers["location"])
            except ValueError:
                target = ""
            if not target or not scope(target):
                log.info("redirect not followed", extra={"event": "crawl_redirect_refused", "url": current,
                                                          "target": resp.headers["location"]})
                return None, current, hops
            current = target
        raise DocumentError(DocumentError.UNREADABLE, f"more than {MAX_REDIRECTS} redirects from {url}")

    @staticmethod
    def read_capped(resp: httpx.Response, cap: int, url: str) -> bytes:
        """The whole body, or :class:`DocumentError` ``too_large`` past ``cap`` bytes, ``timed_out`` past the deadline."""
        length = resp.headers.get("content-length")
        if length and length.isdigit() and int(length) > cap:
            raise DocumentError(DocumentError.TOO_LARGE, f"{url}: {length} bytes, limit {cap}")
        buf = bytearray()
        try:
            for piece in resp.iter_bytes():
                buf += piece
                if len(buf) > cap:
                    raise DocumentError(DocumentError.TOO_LARGE, f"{url}: more than {cap} bytes")
                if deadline_passed():
                    raise timed_out(url)
        except httpx.HTTPError as exc:
            if deadline_passed():
                raise timed_out(url) from exc
            raise SourceError(f"reading {url}: {type(exc).__name__}: {exc}") from exc
        return bytes(buf)

    def close(self) -> None:
        self.client.close()


def timed_out(url: str) -> DocumentError:
    """The error of a request that passed its deadline."""
    return DocumentError(DocumentError.TIMED_OUT, f"{url}: not answered in full by its deadline "
                         "(sources.web.request_deadline_s, or the crawl's crawl_deadline_s)")


def raise_for_status(resp: httpx.Response, url: str) -> None:
    """429 and 5xx: :class:`SourceError` (retried); another status but 200: :class:`DocumentError`."""
    code = resp.status_code
    if code == 429 or code >= 500:
        raise SourceError(f"GET {url} answered {code}")
    if code in (401, 403):
        raise DocumentError(DocumentError.UNREADABLE, f"GET {url} answered {code} (access denied)")
    if code != 200:
        raise DocumentError(DocumentError.UNREADABLE, f"GET {url} answered {code}")


class WebSourceOptions(SourceOptions):
    """A web source's options, as types (their ranges are :meth:`WebOptions.of`'s)."""

    prefix: str | None = None
    sitemap: bool | None = None
    max_pages: int | None = None
    max_depth: int | None = None
    max_total_bytes: int | None = None
    max_page_bytes: int | None = None
    concurrency: int | None = None
    rate_limit: str | None = None
    timeout_s: float | None = None
    request_deadline_s: float | None = None
    crawl_deadline_s: float | None = None
    page_links_cpu_s: float | None = None
    user_agent: str | None = None
    directory_index: str | None = None


#: The options a web source takes (``freshindex sources kinds``).
OPTIONS_HELP: tuple[ConnectorOption, ...] = (
    ConnectorOption("prefix", "path prefix pages must start with (default: the start URL's folder)"),
    ConnectorOption("sitemap", "true: the location is a sitemap (default: when it ends in .xml)"),
    ConnectorOption("max_pages", "pages per crawl (default: sources.web.max_pages)"),
    ConnectorOption("max_depth", "links followed from the start (default: sources.web.max_depth)"),
    ConnectorOption("max_total_bytes", "bytes downloaded per crawl (default: sources.web.max_total_bytes)"),
    ConnectorOption("max_page_bytes", "bytes of one page (default: sources.web.max_page_bytes)"),
    ConnectorOption("concurrency", "requests in flight (default: sources.web.concurrency)"),
    ConnectorOption("rate_limit", "requests per host, e.g. 2/second (default: sources.web.rate_limit)"),
    ConnectorOption("timeout_s", "seconds per wait on the network (default: sources.web.timeout_s)"),
    ConnectorOption("request_deadline_s", "wall-clock seconds per request, body included "
                    "(default: sources.web.request_deadline_s)"),
    ConnectorOption("crawl_deadline_s", "wall-clock seconds per crawl (default: sources.web.crawl_deadline_s)"),
    ConnectorOption("page_links_cpu_s", "CPU seconds reading one page's links "
                    "(default: sources.web.page_links_cpu_s)"),
    ConnectorOption("user_agent", "User-Agent and robots.txt agent (default: sources.web.user_agent)"),
    ConnectorOption("directory_index", "name appended to a URL ending in / (default index.html; empty: none)"),
)
