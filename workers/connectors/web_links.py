"""What a crawl reads from a page, a sitemap or robots.txt, the one URL form it keys by, and what it remembers.

Functions over bytes and strings (no network):

* :func:`normalise` puts a URL in the form the crawler compares, checks
  scope and robots rules against and keys documents by (RFC 3986 section 6.2.2
  and 5.2.4): lower-case scheme and host, no default port, no fragment,
  percent-escapes of unreserved characters decoded, other escapes in upper
  case, characters a URL may not hold percent-encoded (UTF-8), dot segments
  removed.  A path holding an encoded ``/`` or ``\\`` (``%2F``, ``%5C``), a
  raw backslash or a dot segment with parameters (``..;``) is refused
  (:class:`UnsafeUrl`): servers disagree on what it means, so no rule about
  paths could be trusted for it; so is a URL over
  :data:`MAX_URL_CHARS`.
* :func:`read_page` reads an HTML page's ``<a href>``, ``<link
  rel=canonical>``, ``<base href>`` and robots ``nofollow`` meta tag with
  lxml's HTML parser (libxml2, linear in the page's size, the engine of
  :mod:`workers.parsing.html_tree`), fed in pieces under a CPU budget; a page
  that spends its budget yields the links read so far and says it was cut.
* :func:`sitemap_urls` reads a sitemap or sitemap index.
* :func:`canonical_key` is the rule by which a page may take the URL its
  ``<link rel=canonical>`` names (see :mod:`workers.connectors.web`);
  :func:`page_key_error` the rule by which a page may be a document at a key
  without an ``.html`` name (its server said HTML: parsed by media type).
* :class:`PageState` is what a listing saw of one URL, kept between listings
  in the source state (:func:`pages_record`, :func:`pages_from`; an old
  ``crawl-state.json`` is read once by :func:`load_state`), and
  :class:`CrawlReport` what one listing did.
* :class:`RobotsRules` is a robots.txt compiled once for one user agent
  (RFC 9309: the longest matching rule wins, ``Allow`` on a tie, ``*`` and a
  final ``$`` as wildcards); a check costs the length of the path, plus the
  number of wildcard rules, not the number of rules.

Not guaranteed: links written by JavaScript are not seen; :func:`normalise`
does not make two URLs a server treats as the same one URL when the
difference is not one RFC 3986 calls equivalent (case of the path, a
trailing slash, ``index.html``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import string
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from lxml import etree

from freshindex.core.errors import DocumentError, SourceError

if TYPE_CHECKING:
    from freshindex.workers.connectors.registry import StateStore

#: Linked files that are not pages: never requested.
SKIP_SUFFIXES = frozenset(
    ".css .js .mjs .map .json .png .jpg .jpeg .gif .svg .webp .ico .bmp .tif .tiff .woff .woff2 .ttf .otf .eot "
    ".zip .gz .tgz .bz2 .xz .tar .whl .egg .exe .dmg .pkg .deb .rpm .pdf .epub .mp3 .mp4 .webm .ogg .wav .avi .mov "
    ".txt .rst .md .inv .xml .csv .tsv .ps .dvi".split()
)

log = logging.getLogger("freshindex.connectors.web")

#: Version of a recorded crawl state; another version is ignored (a full crawl).  3: pages keep their media type.
STATE_VERSION = 3
#: The media types a crawl reads as pages (the HTML parser's), and the names that make a URL a page by itself.
HTML_TYPES = ("text/html", "application/xhtml+xml")
PAGE_SUFFIXES = (".html", ".htm", ".xhtml")

_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
#: Characters a path keeps as they are when it is percent-encoded (RFC 3986 pchar, "/" and "%").
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_DEFAULT_PORTS = {"http": "80", "https": "443"}
#: Bytes of a page fed to the parser at once; the CPU budget is checked between pieces.
FEED_BYTES = 64 * 1024
#: A longer URL is refused (a document key is at most 1,024 characters: ``workers.connectors.check_key``).
MAX_URL_CHARS = 1024


class UnsafeUrl(ValueError):
    """A URL whose path no rule can be trusted for (an encoded ``/`` or ``\\``)."""


def normalise_path(path: str) -> str:
    """``path`` percent-encoded, with unreserved escapes decoded and dot segments removed; at least ``/``."""
    if "\\" in path:
        raise UnsafeUrl(f"backslash in path {path!r}")
    path = quote(path, safe=_PATH_SAFE)

    def escape(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        if ch in "/\\":
            raise UnsafeUrl(f"encoded {ch!r} in path {path!r}")
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

    path = _ESCAPE.sub(escape, path)
    if any(seg.split(";", 1)[0] in (".", "..") and ";" in seg for seg in path.split("/")):
        # "..;" and ".;": path parameters some servers (Tomcat, Spring) strip before resolving the dots
        raise UnsafeUrl(f"dot segment with parameters in path {path!r}")
    path = remove_dot_segments(path) or "/"
    if len(path) > MAX_URL_CHARS:
        raise UnsafeUrl(f"path of {len(path)} characters, more than {MAX_URL_CHARS}")
    return path


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for an absolute path: ``/a/./b/../c`` -> ``/a/c``; never above ``/``."""
    segments = path.split("/")
    out: list[str] = []
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg in (".", ".."):
            if seg == ".." and len(out) > 1:
                out.pop()
            if last:
                out.append("")  # "/a/." and "/a/b/.." end in "/"
            continue
        out.append(seg)
    joined = "/".join(out)
    return joined if joined.startswith("/") or not path.startswith("/") else "/" + joined


def _unescape_unreserved(text: str) -> str:
    """``text`` with the escapes of unreserved characters decoded (equivalent anywhere in a URL), nothing else."""
    return _ESCAPE.sub(lambda m: ch if (ch := chr(int(m.group(1), 16))) in _UNRESERVED else m.group(0), text)


def resolve(base: str, href: str) -> str:
    """``href`` read on a page at ``base``, in :func:`normalise`'s form; an encoded dot counts as a dot for ``..``."""
    if len(href) > MAX_URL_CHARS:
        raise UnsafeUrl(f"link of {len(href)} characters, more than {MAX_URL_CHARS}")
    return normalise(urljoin(_unescape_unreserved(base), _unescape_unreserved(href)))


def normalise(url: str) -> str:
    """``url`` in the crawler's one form (see the module); :class:`UnsafeUrl` (a ValueError) when refused."""
    if len(url) > MAX_URL_CHARS:
        raise UnsafeUrl(f"URL of {len(url)} characters, more than {MAX_URL_CHARS}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    netloc = parts.netloc.lower()
    if parts.port is not None and _DEFAULT_PORTS.get(scheme) == str(parts.port) and netloc.endswith(f":{parts.port}"):
        netloc = netloc[: -len(f":{parts.port}")]
    return urlunsplit((scheme, netloc, normalise_path(parts.path or "/"), parts.query, ""))


@dataclass
class PageLinks:
    """What :func:`read_page` found: absolute links (sorted, normalised), the canonical URL, whether it was cut."""

    links: list[str] = field(default_factory=list)
    canonical: str | None = None
    cut: bool = False


class _Collector:
    """An lxml parser target: keeps the attributes the crawl needs, builds no tree."""

    def __init__(self) -> None:
        self.hrefs: list[str] = []
        self.canonical: str | None = None
        self.base: str | None = None
        self.nofollow = False

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        a = {k.lower(): (v or "") for k, v in attrib.items()}
        tag = tag.lower()
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"].strip())
        elif tag == "link" and "canonical" in a.get("rel", "").lower().split() and self.canonical is None:
            self.canonical = a.get("href", "").strip() or None
        elif tag == "base" and a.get("href") and self.base is None:
            self.base = a["href"].strip()
        elif tag == "meta" and a.get("name", "").lower() == "robots" and "nofollow" in a.get("content", "").lower():
            self.nofollow = True

    def end(self, tag: str) -> None:
        pass

    def data(self, data: str) -> None:
        pass

    def comment(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def read_page(html: bytes, url: str, *, budget_s: float | None = None,
              clock: Callable[[], float] = time.thread_time) -> PageLinks:
    """The links of ``html`` served at ``url``, read within ``budget_s`` seconds of ``clock`` (this thread's CPU).

    Over the budget, the links read so far come back with ``cut=True``: the caller must not
    treat the pages it did not see as gone.  A broken page yields what was read before the break.
    """
    collector = _Collector()
    parser = etree.HTMLParser(target=collector, huge_tree=True)
    text = html.decode("utf-8", errors="replace")
    started, cut = clock(), False
    with contextlib.suppress(Exception):  # libxml2 recovers from almost anything; what it read stays
        for at in range(0, len(text), FEED_BYTES):
            if budget_s is not None and clock() - started > budget_s:
                cut = True
                break
            parser.feed(text[at: at + FEED_BYTES])
        parser.close()
    base = url
    with contextlib.suppress(ValueError):
        base = resolve(url, collector.base) if collector.base else url
    canonical = None
    with contextlib.suppress(ValueError):
        canonical = resolve(base, collector.canonical) if collector.canonical else None
    if collector.nofollow:
        return PageLinks([], canonical, cut)
    links = set()
    for href in collector.hrefs:
        if href.startswith(("#", "mailto:", "javascript:", "tel:", "data:")):
            continue
        with contextlib.suppress(ValueError):
            links.add(resolve(base, href))
    return PageLinks(sorted(links), canonical, cut)


def page_links(html: bytes, url: str) -> tuple[list[str], str | None]:
    """Absolute URLs (fragments removed) linked from ``html`` served at ``url``, and its canonical URL."""
    page = read_page(html, url)
    return page.links, page.canonical


def sitemap_urls(data: bytes) -> tuple[list[str], list[str]]:
    """``(<loc> of <url> entries, <loc> of <sitemap> entries)`` of a sitemap or sitemap index."""
    try:
        root = ET.fromstring(data)  # expat refuses external entities and entity blow-ups
    except ET.ParseError as exc:
        raise SourceError(f"the sitemap is not valid XML: {exc}") from exc
    pages: list[str] = []
    maps: list[str] = []
    for el in root.iter():
        if el.tag.rsplit("}", 1)[-1] == "loc" and el.text:
            parent = "sitemap" if root.tag.rsplit("}", 1)[-1] == "sitemapindex" else "url"
            (maps if parent == "sitemap" else pages).append(el.text.strip())
    return pages, maps


def _rule_path(value: str) -> str:
    """A rule's path in the form :func:`normalise_path` gives a URL's (dot segments kept: it is a pattern)."""
    value = quote(value, safe=_PATH_SAFE)
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)) if chr(int(m.group(1), 16)) in _UNRESERVED
                       else "%" + m.group(1).upper(), value)


def _glob_match(pieces: list[str], anchored: bool, path: str) -> bool:
    """Whether ``path`` starts with the pattern ``*``.join(pieces) (ending there when ``anchored``); linear."""
    if not path.startswith(pieces[0]):
        return False
    at = len(pieces[0])
    if len(pieces) == 1:
        return not anchored or at == len(path)
    for piece in pieces[1:-1]:
        found = path.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    last = pieces[-1]
    if anchored:
        return len(path) - len(last) >= at and path.endswith(last)
    return path.find(last, at) >= 0


@dataclass
class RobotsRules:
    """robots.txt for one user agent, compiled once (see the module); :meth:`allows` answers for a URL path.

    ``checks`` counts the questions asked (the crawl's report shows it)."""

    #: literal rule path -> allow (True wins a tie, so it is kept when both are given)
    prefixes: dict[str, bool] = field(default_factory=dict)
    #: rule path ending in $ without other wildcards -> allow
    exact: dict[str, bool] = field(default_factory=dict)
    #: (length, allow, pieces, anchored) of each rule with a * in it
    patterns: list[tuple[int, bool, list[str], bool]] = field(default_factory=list)
    checks: int = 0

    @classmethod
    def parse(cls, text: str, user_agent: str) -> RobotsRules:
        """The rules of the groups naming ``user_agent``'s product token, else of the ``*`` groups."""
        token = user_agent.split("/", 1)[0].strip().lower()
        groups: dict[str, list[tuple[bool, str]]] = {}
        agents: list[str] = []
        in_rules = False
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            name, sep, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if not sep:
                continue
            if name == "user-agent":
                if in_rules:
                    agents, in_rules = [], False
                agents.append(value.lower())
            elif name in ("allow", "disallow"):
                in_rules = True
                for agent in agents:
                    groups.setdefault(agent, []).append((name == "allow", value))
        rules = cls()
        for allow, value in groups.get(token, groups.get("*", [])):
            if value:  # an empty Disallow allows everything: no rule
                rules._add(allow, _rule_path(value))
        return rules

    def _add(self, allow: bool, path: str) -> None:
        anchored = path.endswith("$")
        body = path[:-1] if anchored else path
        if "*" in body:
            self.patterns.append((len(path), allow, body.split("*"), anchored))
        else:
            table = self.exact if anchored else self.prefixes
            table[body] = table.get(body, False) or allow

    def allows(self, path: str) -> bool:
        """Whether a URL with this (normalised) path, plus ``?query`` if any, may be fetched."""
        self.checks += 1
        if path == "/robots.txt":
            return True
        best = (-1, True)  # (length of the longest matching rule, allow); allow wins a tie
        for n in range(len(path), -1, -1):  # the longest literal prefix
            allow = self.prefixes.get(path[:n])
            if allow is not None:
                best = (n, allow)
                break
        if (allow := self.exact.get(path)) is not None:
            best = max(best, (len(path) + 1, allow))
        for length, allow, pieces, anchored in self.patterns:
            if length >= best[0] and _glob_match(pieces, anchored, path):
                best = max(best, (length, allow))
        return best[1]


@dataclass
class PageState:
    """What the last listing saw of one requested URL."""

    key: str | None = None  #: the document it was listed as
    own: str | None = None  #: the key its own URL gives (where it was served, directory index appended)
    canonical: str | None = None  #: the in-scope canonical URL it declares
    digest: str | None = None  #: sha256 of its body
    marker: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    links: list[str] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    size: int = 0
    media_type: str | None = None  #: its ``Content-Type`` (no parameters): the parser of a key without .html

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [], 0)}


@dataclass
class CrawlReport:
    """What one listing did: requests, answers, what was left alone, and the bound that cut it (``truncated``)."""

    pages: int = 0
    requests: int = 0
    not_modified: int = 0
    fetched: int = 0
    bytes: int = 0
    failed: int = 0
    dead_links: int = 0
    robots_blocked: int = 0
    robots_checks: int = 0
    not_html: int = 0
    canonical_conflicts: int = 0
    links_cut: int = 0
    unvisited: int = 0
    truncated: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def media_type_of(header: str | None) -> str | None:
    """A ``Content-Type`` header's media type, lower case, without parameters; None when it says none."""
    return (header or "").split(";", 1)[0].strip().lower() or None


def page_key_error(key: str, media_type: str | None) -> DocumentError | None:
    """Why a page cannot be a document at ``key``, or None: a key whose name ends in ``.html`` (``.htm``,
    ``.xhtml``) is parsed by its name, any other (``/guide/install/`` without a directory index,
    ``/api/v2/users``) by its media type, so the server must have said HTML (``Content-Type``)."""
    name = urlsplit(key).path.rsplit("/", 1)[-1].lower()
    if name.endswith(PAGE_SUFFIXES) or media_type in HTML_TYPES:
        return None
    return DocumentError(DocumentError.UNSUPPORTED, f"{key} is a page at a URL without an .html name whose server "
                         "did not say text/html (Content-Type); the parsers choose by name or media type")


def canonical_key(page: PageState, holders: Mapping[str, PageState],
                  own_key: Callable[[str], str]) -> tuple[str, DocumentError | None]:
    """The key of a fetched ``page``: its own, or the canonical URL it names when it may take it.

    ``holders`` maps a key to the page this crawl fetched at that URL.  A page may take a
    canonical URL only when the page there names itself canonical or has the same bytes; a
    claim on a page this crawl did not fetch leaves the page its own URL; any other claim is
    an ``unsafe_key`` error naming both pages (the claimed page keeps its URL and content).
    """
    own = page.own or ""
    claim = own_key(page.canonical) if page.canonical else own
    holder = holders.get(claim)
    if claim == own or holder is None:
        return own, None
    named = holder.canonical is not None and own_key(holder.canonical) == claim
    if named or (page.digest is not None and holder.digest == page.digest):
        return claim, None
    log.warning("canonical claim refused", extra={"event": "crawl_canonical_conflict", "page": own,
                                                  "claimed": claim})
    return own, DocumentError(DocumentError.UNSAFE_KEY, (
        f"{own} names {claim} as its canonical URL, but the page at {claim} neither names itself canonical "
        f"nor has the same content; the two pages conflict ({own}, {claim}), {claim} keeps its own content"))


def pages_from(raw: Mapping[str, Any], location: str) -> dict[str, PageState]:
    """The pages a recorded crawl state holds (:func:`pages_record`); empty (a full crawl) when it is of
    another version or location, or malformed."""
    try:
        if raw.get("version") != STATE_VERSION or raw.get("location") != location:
            return {}
        return {url: PageState(**page) for url, page in raw.get("pages", {}).items()}
    except (AttributeError, TypeError) as exc:
        log.warning("crawl state unreadable, crawling in full", extra={"event": "crawl_state_unreadable",
                                                                      "location": location, "error": str(exc)})
        return {}


def pages_record(location: str, pages: Mapping[str, PageState]) -> dict[str, Any]:
    """``pages`` as the JSON object the source state keeps for the next listing."""
    return {"version": STATE_VERSION, "location": location,
            "pages": {u: p.as_dict() for u, p in sorted(pages.items())}}


#: The source state's key holding what the last successful listing saw (:func:`pages_record`).
STATE_KEY = "web_pages"


class UpgradedState:
    """A source state (:class:`workers.connectors.registry.StateStore`) that, while it holds no crawl yet,
    answers with the one an older version left in ``crawl-state.json`` (an upgrade: read, never written)."""

    def __init__(self, store: StateStore, legacy: Path, location: str) -> None:
        self.store, self.legacy, self.location = store, legacy, location

    def get(self) -> dict[str, Any]:
        state = self.store.get()
        if STATE_KEY not in state and (pages := load_state(self.legacy, self.location)):
            state = {**state, STATE_KEY: pages_record(self.location, pages)}
        return state

    def set_pending(self, value: dict[str, Any]) -> None:
        self.store.set_pending(value)

    def planned(self, run_id: int) -> dict[str, Any] | None:
        return self.store.planned(run_id)


def load_state(path: Path | None, location: str) -> dict[str, PageState]:
    """The pages an old ``crawl-state.json`` holds (read once on upgrade; nothing writes it any more); empty
    when there is none or it cannot be read."""
    if path is None or not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.warning("crawl state unreadable, crawling in full", extra={"event": "crawl_state_unreadable",
                                                                      "path": str(path), "error": str(exc)})
        return {}
    return pages_from(raw, location) if isinstance(raw, dict) else {}
