"""The web crawler against hostile pages and servers (issue 40) and across runs in one process (issue 39).

Each test is a crawl of a real local HTTP server (``bench.docsite``, or a raw
socket server that drip-feeds its answer) or a pure function of the link
reader; the figures in the names (1 MB under 1 s, 20,000 rules x 20,000
links) are the attacks that took minutes or hours before.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from html import escape as html_escape
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.docsite import DocSite, serve
from freshindex.core.errors import ConfigError, DocumentError
from freshindex.workers.connectors import RunScoped, for_run
from freshindex.workers.connectors.retry import RetryPolicy
from freshindex.workers.connectors.web import WebConnector
from freshindex.workers.connectors.web_links import RobotsRules, normalise, page_links, read_page
from freshindex.workers.connectors.web_options import WebOptions, check_start_url

NO_WAIT = RetryPolicy(retries=1, backoff_s=0.0, backoff_max_s=0.0)
HTML = {"Content-Type": "text/html; charset=utf-8"}


def html(body: str, head: str = "") -> tuple[int, dict[str, str], bytes]:
    page = f"<html><head><title>t</title>{head}</head><body><h1>Title</h1><p>{body}</p></body></html>"
    return 200, HTML, page.encode()


def connector(base: str, start: str = "/docs/index.html", **kw: Any) -> WebConnector:
    opts = {k: v for k, v in kw.items() if k not in ("cursor", "clock")}
    extra = {k: v for k, v in kw.items() if k in ("cursor", "clock")}
    return WebConnector(base + start, options=WebOptions.of(None, {"rate_limit": "1000/second", **opts}),
                        retry=NO_WAIT, **extra)


def listed(conn: WebConnector) -> dict[str, str]:
    return {r.key: r.etag or "" for r in conn.list()}


# -- link extraction in linear time (item 2) ------------------------------------------------


def test_a_megabyte_of_unterminated_start_tags_is_read_in_seconds_not_hours() -> None:
    hostile = b'<a href="first.html">f</a>' + b"<a " * 350_000  # 1 MB; html.parser took hours
    started = time.perf_counter()
    links, _ = page_links(hostile, "http://h/docs/index.html")
    assert time.perf_counter() - started < 3.0
    assert links == ["http://h/docs/first.html"]
    # A megabyte-long link is no URL a document could be keyed by (1,024 characters at most): dropped, fast.
    started = time.perf_counter()
    assert page_links(b'<a href="' + b"a/" * 500_000 + b'">x</a><a href="b.html">', "http://h/")[0] == ["http://h/b.html"]
    assert time.perf_counter() - started < 3.0


def test_a_page_over_its_cpu_budget_keeps_the_links_read_so_far_and_says_it_was_cut() -> None:
    ticks = iter(range(1000))  # one "second" of CPU per look at the clock
    page = b"".join(b'<a href="p%d.html">x</a>' % i for i in range(20_000))  # about 500 KB: several pieces
    cut = read_page(page, "http://h/", budget_s=2.5, clock=lambda: float(next(ticks)))
    assert cut.cut and 0 < len(cut.links) < 20_000
    whole = read_page(page, "http://h/")
    assert not whole.cut and len(whole.links) == 20_000


def test_a_hostile_page_in_a_crawl_lists_fast_and_a_cut_page_deletes_nothing() -> None:
    routes = {"/docs/index.html": (200, HTML, b'<a href="ok.html">k</a>' + b"<a " * 350_000),
              "/docs/ok.html": html("fine")}
    with serve(DocSite(routes=routes)) as site:
        started = time.perf_counter()
        conn = connector(site.base)
        refs = listed(conn)
        assert time.perf_counter() - started < 5.0  # 78 s for 75 KB before
        assert sorted(refs) == [f"{site.base}/docs/index.html", f"{site.base}/docs/ok.html"]
        assert conn.last_crawl.truncated is None
        tight = connector(site.base, page_links_cpu_s="1e-9")  # spent after the first piece of the page
        listed(tight)
        assert tight.last_crawl.links_cut == 1 and tight.last_crawl.truncated == "page_links_cpu_s=1e-09"
        assert tight.unlisted_prefixes == frozenset({f"{site.base}/docs/"})


# -- canonical identity (item 3) ---------------------------------------------------------------


def test_a_page_cannot_take_another_pages_url_with_its_canonical_link() -> None:
    routes = {"/c/index.html": html('<a href="0evil.html">e</a><a href="target.html">t</a>'),
              "/c/0evil.html": html("EVIL", head='<link rel="canonical" href="/c/target.html">'),
              "/c/target.html": html("GENUINE")}
    with serve(DocSite(routes=routes)) as site:
        conn = connector(site.base, start="/c/index.html")
        refs = listed(conn)
        b = site.base
        assert conn.fetch(f"{b}/c/target.html").count(b"GENUINE") == 1
        assert refs[f"{b}/c/0evil.html"] == "error:unsafe_key"  # listed, not dropped: the conflict is seen
        with pytest.raises(DocumentError) as caught:
            conn.fetch(f"{b}/c/0evil.html")
        assert f"{b}/c/0evil.html" in caught.value.detail and f"{b}/c/target.html" in caught.value.detail
        assert conn.last_crawl.canonical_conflicts == 1


def test_a_canonical_claim_is_granted_by_the_page_naming_itself_or_by_the_same_bytes() -> None:
    same = html("same")
    routes = {"/c/index.html": html('<a href="0alias.html">a</a><a href="0copy.html">c</a><a href="0far.html">f</a>'
                                    '<a href="target.html">t</a>'),
              "/c/0alias.html": html("ALIAS", head='<link rel="canonical" href="/c/target.html">'),
              "/c/target.html": html("GENUINE", head='<link rel="canonical" href="/c/target.html">'),
              "/c/0copy.html": (200, HTML, same[2].replace(b"<head>", b'<head><link rel="canonical" href="twin.html">')),
              "/c/twin.html": (200, HTML, same[2].replace(b"<head>", b'<head><link rel="canonical" href="twin.html">')),
              "/c/0far.html": html("far", head='<link rel="canonical" href="/c/gone.html">')}
    with serve(DocSite(routes=routes)) as site:
        conn = connector(site.base, start="/c/index.html")
        refs = listed(conn)
        b = site.base
        # 0alias joins target (which names itself) but never lends it its bytes; 0copy joins twin (same
        # bytes; twin was fetched only to check the claim); 0far claims a dead page and keeps its own URL.
        assert sorted(refs) == [f"{b}/c/0far.html", f"{b}/c/index.html", f"{b}/c/target.html", f"{b}/c/twin.html"]
        assert b"GENUINE" in conn.fetch(f"{b}/c/target.html")
        assert not [r for r in refs.values() if r.startswith("error:")]


# -- URL normalisation (item 4) ----------------------------------------------------------------


def test_percent_encoded_dot_segments_do_not_leave_the_prefix_or_pass_robots() -> None:
    links = ('<a href="/docs/%2e%2e/private/secret.html">1</a><a href="%2E%2E/private/b.html">2</a>'
             '<a href="/docs/.%2e/private/c.html">3</a><a href="/docs/sub%2f..%2f..%2fprivate/d.html">4</a>'
             '<a href="/docs/x%5c..%5c..%5cprivate/e.html">5</a><a href="/docs/%7euser.html">6</a>'
             '<a href="/docs/private/%2e/../../private/f.html">7</a>')
    routes = {"/docs/index.html": html(links), "/docs/~user.html": html("home"),
              "/private/secret.html": html("secret"), "/docs/%2e%2e/private/secret.html": html("secret")}
    with serve(DocSite(routes=routes, robots="User-agent: *\nDisallow: /private/\n")) as site:
        refs = listed(connector(site.base))
    assert not [p for p in site.paths() if "private" in p or "%" in p]
    assert sorted(site.paths()) == ["/docs/index.html", "/docs/~user.html", "/robots.txt"]
    assert sorted(refs) == [f"{site.base}/docs/index.html", f"{site.base}/docs/~user.html"]


def test_normalise_follows_rfc_3986_and_refuses_encoded_separators() -> None:
    assert normalise("HTTP://Docs.Example.COM:80/a/./b/../%7Ec/%c3%a9?q#frag") == "http://docs.example.com/a/~c/%C3%A9?q"
    assert normalise("http://h/docs/%2E%2E/%2e%2e/x") == "http://h/x"
    for bad in ("http://h/a%2fb", "http://h/a%2F..", "http://h/a%5cb", "http://h/a\\b", "http://h/docs/..;/admin/x",
                "http://h/docs/%2e%2e;x/a", "http://h/docs/.;/x"):
        with pytest.raises(ValueError):
            normalise(bad)
    with pytest.raises(ConfigError):
        check_start_url("https://h/docs%2f/")
    assert check_start_url("https://h/docs/./en/../") == "https://h/docs/"


ROBOTS = "User-agent: *\nDisallow: /docs/private/\nAllow: /docs/private/ok\nDisallow: /*.pdf$\nDisallow: /docs/a~b\n"
_UNRESERVED = "abcXYZ019-._~"
_SEGMENT = st.text(alphabet=_UNRESERVED + "!$&'()*+,;=:@é [", min_size=1, max_size=6).filter(
    lambda s: s.split(";", 1)[0] not in (".", ".."))  # "..;" is refused whatever its spelling (normalise)


@st.composite
def spellings(draw: st.DrawFn) -> tuple[str, str]:
    """A path and another spelling of it: escapes of any case, ``.`` and ``x/..`` detours (some encoded)."""
    head = draw(st.sampled_from([["docs"], ["docs", "private"], ["docs", "private", "ok"], ["other"], []]))
    segments = head + draw(st.lists(_SEGMENT, max_size=3)) + [draw(st.sampled_from(["a.html", "b.pdf", "a~b"]))]
    path = "/" + "/".join(segments)
    spelt: list[str] = []
    for seg in segments:
        if draw(st.booleans()):
            spelt.append(draw(st.sampled_from([".", "%2e", "%2E"])))
        if draw(st.booleans()):
            spelt += ["detour", draw(st.sampled_from(["..", "%2e%2e", ".%2E"]))]
        out = ""
        for ch in seg:
            # Unreserved characters and those a URL cannot hold raw: escaped or not, the same path.
            # (An escaped reserved character, ":" or "=", is another path: RFC 3986 section 6.2.2.2.)
            if (ch in _UNRESERVED or ch in "é [") and draw(st.booleans()):
                code = "".join(f"%{b:02x}" for b in ch.encode())
                out += code.upper() if draw(st.booleans()) else code
            else:
                out += ch
        spelt.append(out)
    return path, "/" + "/".join(spelt)


SCOPE = WebConnector("http://h/docs/index.html")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spellings())
def test_scope_and_robots_decide_the_same_for_every_spelling_of_a_path(pair: tuple[str, str]) -> None:
    path, spelt = pair
    conn, robots = SCOPE, RobotsRules.parse(ROBOTS, "freshindex-crawler/1")

    def decision(p: str) -> tuple[bool, bool, str]:
        url = normalise("http://h" + p)
        return conn.in_scope("http://h" + p), robots.allows(urlsplit(url).path), url

    assert decision(spelt) == decision(path)
    # And as a link on a page: the crawler reads it as that same URL.
    page = f'<a href="{html_escape(spelt)}">x</a>'.encode()
    assert read_page(page, "http://h/docs/index.html").links == [decision(path)[2]]


_PIECES = ['<a ', '<a href="', '"', "'", ">", "<", "</a>", "<!--", "-->", "<base href=", "<link rel=canonical href=",
           "<meta name=robots content=", "&#", "&amp;", "%2e%2e/", "../", "x.html", "\x00", "<![CDATA[", "<script>",
           "</", "=", " ", "\n", "é"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=40), st.integers(1, 3000))
def test_generated_hostile_pages_are_read_in_linear_time_into_normalised_links(pieces: list[str], times: int) -> None:
    page = ("".join(pieces) * times)[:300_000].encode()
    started = time.perf_counter()
    links = read_page(page, "http://h/docs/index.html").links
    assert time.perf_counter() - started < 3.0
    assert all(normalise(u) == u and u.startswith(("http://", "https://")) for u in links)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["*", "a", "/", "$", "%2F", "%7e", "b"]), min_size=1, max_size=60),
       st.integers(1, 2000))
def test_generated_robots_rules_answer_in_bounded_time(rule: list[str], rules: int) -> None:
    text = "User-agent: *\n" + f"Disallow: /{''.join(rule)}\n" * min(rules, 500) + \
        "".join(f"Allow: /p{i}/{''.join(rule)}\n" for i in range(rules))
    started = time.perf_counter()
    robots = RobotsRules.parse(text, "freshindex-crawler/1")
    for path in ("/" + "a" * 2000, "/" + "ab/" * 600 + "b", "/p1/" + "a*" * 500):
        robots.allows(path)
    assert time.perf_counter() - started < 2.0


def test_robots_rules_are_rfc_9309_longest_match_with_wildcards() -> None:
    rules = RobotsRules.parse("User-agent: other\nDisallow: /\n\nUser-agent: FreshIndex-Crawler\nUser-agent: x\n"
                              "Disallow: /p/\nAllow: /p/pub\nDisallow: /*.pdf$\nAllow: /same\nDisallow: /same\n"
                              "Disallow: /%7Et/\nDisallow:\n", "freshindex-crawler/1")
    expect = {"/p/x": False, "/p/pub/x": True, "/a.pdf": False, "/a.pdfx": True, "/same": True, "/~t/x": False,
              "/q": True, "/robots.txt": True}
    assert {p: rules.allows(p) for p in expect} == expect
    assert RobotsRules.parse("User-agent: *\nDisallow: /\n", "freshindex-crawler/1").allows("/x") is False


# -- robots after truncation (item 6) ----------------------------------------------------------


def test_twenty_thousand_rules_and_links_with_max_pages_5_ask_robots_a_handful_of_times() -> None:
    robots = "User-agent: *\n" + "".join(f"Disallow: /docs/b{i}/\n" for i in range(20_000)) + \
        "Disallow: /docs/p1.html\n"
    links = "".join(f'<a href="p{i}.html">{i}</a>' for i in range(20_000))
    routes = {"/docs/index.html": html(links), **{f"/docs/p{i}.html": html(str(i)) for i in range(20_000)}}
    with serve(DocSite(routes=routes, robots=robots)) as site:
        conn = connector(site.base, max_pages="5")
        refs = listed(conn)
    report = conn.last_crawl
    # Sorted, the links are p0, p1 (disallowed), p10, p100, p1000...: robots.txt is asked about the start page,
    # then about those until four are allowed, and about none of the other 19,995.
    assert sorted(refs) == sorted(f"{site.base}/docs/{p}.html" for p in ("index", "p0", "p10", "p100", "p1000"))
    assert report.truncated == "max_pages=5" and report.robots_blocked == 1
    assert report.robots_checks == 6 and "/docs/p1.html" not in site.paths()


# -- deadlines (item 5) ------------------------------------------------------------------------


@contextmanager
def drip_server(pages: dict[str, str]) -> Iterator[str]:
    """A server that answers ``pages`` (path -> "body" or "headers") one byte every 0.2 s, for 40 s at most.

    Any other path is a small page linking the dripping ones.
    """
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                piece = self.request.recv(4096)
                if not piece:
                    return
                data += piece
            path = data.split(b" ", 2)[1].decode()
            mode = pages.get(path)
            if mode is None:
                body = "".join(f'<a href="{p.rsplit("/", 1)[1]}">x</a>' for p in pages).encode() + b"<p>ok</p>"
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
                                     b"Connection: close\r\n\r\n%s" % (len(body), body))
                return
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
            head += b"Content-Length: 200\r\n\r\n" if mode == "body" else b"X-Pad: "
            try:
                self.request.sendall(head)
                for _ in range(200):  # bounded: 40 s at most
                    time.sleep(0.2)
                    self.request.sendall(b"a")
            except OSError:
                return

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_drip_fed_page_fails_at_its_request_deadline_and_the_crawl_goes_on() -> None:
    with drip_server({"/docs/body.html": "body", "/docs/head.html": "headers"}) as base:
        # (deadlines a loaded machine's robots.txt and index page come well within)
        conn = connector(base, request_deadline_s="3", timeout_s="3", concurrency="2")
        started = time.perf_counter()
        refs = listed(conn)
        elapsed = time.perf_counter() - started
    assert elapsed < 20.0  # each byte came within timeout_s: 40 s a page without the deadline
    assert refs[f"{base}/docs/body.html"] == "error:timed_out" and refs[f"{base}/docs/head.html"] == "error:timed_out"
    assert refs[f"{base}/docs/index.html"] != "error:timed_out"
    with pytest.raises(DocumentError) as caught:
        conn.fetch(f"{base}/docs/body.html")
    assert caught.value.reason == DocumentError.TIMED_OUT


def test_a_crawl_past_its_deadline_stops_like_max_pages_and_deletes_nothing() -> None:
    with drip_server({"/docs/body.html": "body"}) as base:
        conn = connector(base, crawl_deadline_s="4.5", request_deadline_s="60", timeout_s="3")
        started = time.perf_counter()
        refs = listed(conn)
        assert time.perf_counter() - started < 20.0  # 40 s for the drip-fed page without the crawl's deadline
    assert sorted(refs) == [f"{base}/docs/index.html"]  # the page cut by the crawl's deadline is not an error
    assert conn.last_crawl.truncated == "crawl_deadline_s=4.5" and conn.last_crawl.unvisited == 1
    assert conn.unlisted_prefixes == frozenset({f"{base}/docs/"})


def test_the_crawl_deadline_is_read_from_the_injected_clock_between_pages() -> None:
    routes = {"/docs/index.html": html('<a href="a.html">a</a><a href="b.html">b</a>'),
              "/docs/a.html": html('<a href="deep.html">d</a>'), "/docs/b.html": html("b"),
              "/docs/deep.html": html("deep")}
    with serve(DocSite(routes=routes)) as site:
        # Ten seconds of crawl; the clock jumps an hour once a.html has been asked for.
        conn = connector(site.base, crawl_deadline_s="10", concurrency="1",
                         clock=lambda: 3600.0 if "/docs/a.html" in site.paths() else 0.0)
        refs = listed(conn)
    assert site.paths() == ["/robots.txt", "/docs/index.html", "/docs/a.html"]
    assert sorted(refs) == [f"{site.base}/docs/a.html", f"{site.base}/docs/index.html"]
    assert conn.last_crawl.truncated == "crawl_deadline_s=10" and conn.unlisted_prefixes


# -- per-run state in a long-lived process (issue 39, item 1) --------------------------------------


class FakeCursor:
    """The registry's pending cursor: one open run at a time; ``planned`` answers only for the pending run."""

    def __init__(self) -> None:
        self.run: int | None = None
        self.pending: dict[str, Any] | None = None

    def get(self) -> dict[str, Any] | None:
        return None

    def set_pending(self, value: dict[str, Any]) -> None:
        self.pending = {**value, "run": self.run}

    def planned(self, run_id: int) -> dict[str, Any] | None:
        if not self.pending or self.pending["run"] != run_id:
            return None
        return {k: v for k, v in self.pending.items() if k != "run"}


def test_a_body_listed_for_one_run_is_never_served_to_another() -> None:
    routes = {"/docs/index.html": html('<a href="a.html">a</a>'), "/docs/a.html": html("VERSION-1")}
    cursor = FakeCursor()
    with serve(DocSite(routes=routes)) as site:
        conn = connector(site.base, cursor=cursor)
        key = f"{site.base}/docs/a.html"
        assert isinstance(conn, RunScoped)
        cursor.run = 1
        listed(conn)  # run 1 lists VERSION-1; none of its document tasks ran in this process
        site.routes["/docs/a.html"] = html("VERSION-2")
        cursor.run, cursor.pending = 2, {"crawl": "listed-by-another-worker", "run": 2}
        site.requests.clear()
        assert b"VERSION-2" in for_run(conn, 2).fetch(key)  # run 2 was planned elsewhere: a fresh GET
        assert site.paths() == ["/docs/a.html"]
        listed(conn)  # run 2 again, now listed here: its own table serves it, no request
        site.requests.clear()
        assert b"VERSION-2" in for_run(conn, 2).fetch(key) and site.paths() == []
        site.routes["/docs/a.html"] = html("VERSION-3")
        assert b"VERSION-3" in for_run(conn, 1).fetch(key)  # run 1's redelivered task: never its old body
        cursor.run = 3
        listed(conn)
        # Bounded: the oldest crawl's table is dropped, and only the newest keeps bodies (one crawl's bytes).
        older, newest = conn._crawls.values()
        assert not older.bodies and newest.bodies


def test_errors_and_redirects_belong_to_the_crawl_that_saw_them() -> None:
    routes = {"/docs/index.html": html('<a href="a.html">a</a><a href="old.html">o</a>'),
              "/docs/a.html": (403, {}, b"no"), "/docs/old.html": (301, {"Location": "/docs/new.html"}, b""),
              "/docs/new.html": html("new")}
    cursor = FakeCursor()
    with serve(DocSite(routes=routes)) as site:
        conn = connector(site.base, cursor=cursor)
        b = site.base
        cursor.run = 1
        listed(conn)
        first = for_run(conn, 1)
        with pytest.raises(DocumentError):
            first.fetch(f"{b}/docs/a.html")
        assert first.chunk_meta(f"{b}/docs/new.html") == {"redirected_from": [f"{b}/docs/old.html"]}
        site.routes["/docs/a.html"] = html("readable now")
        cursor.run = 2
        listed(conn)
        assert b"readable now" in for_run(conn, 2).fetch(f"{b}/docs/a.html")
        assert for_run(conn, 7).chunk_meta(f"{b}/docs/new.html") == {}  # a run this process did not list


def test_a_server_that_never_answers_is_not_waited_for_past_the_deadline() -> None:
    # A listening socket that never accepts: the connect waits in the backlog, then the request times out.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        conn = connector(base, request_deadline_s="0.5", timeout_s="30")
        started = time.perf_counter()
        with pytest.raises(DocumentError) as caught:
            conn.fetch(f"{base}/docs/index.html")
        assert time.perf_counter() - started < 5.0
    assert caught.value.reason == DocumentError.TIMED_OUT


def test_the_bounds_are_settings_with_defaults_that_a_source_overrides() -> None:
    from freshindex.settings import load_settings

    web = load_settings(sources={"web": {"crawl_deadline_s": 600}}).sources.web
    assert (web.request_deadline_s, web.crawl_deadline_s, web.page_links_cpu_s) == (120.0, 600.0, 2.0)
    opts = WebOptions.of(web, {"request_deadline_s": "5"})
    assert (opts.request_deadline_s, opts.crawl_deadline_s, opts.page_links_cpu_s) == (5.0, 600.0, 2.0)
    for bad in ({"request_deadline_s": "0"}, {"crawl_deadline_s": "-1"}, {"page_links_cpu_s": "soon"}):
        with pytest.raises(ConfigError):
            WebOptions.of(web, bad)
