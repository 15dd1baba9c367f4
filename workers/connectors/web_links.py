"""What a crawl reads from a page or a sitemap: links, the canonical URL, sitemap entries.

Pure functions over bytes (no network): :func:`page_links` for an HTML page
(``<a href>``, ``<link rel=canonical>``, ``<base href>``, a robots ``nofollow``
meta tag), :func:`sitemap_urls` for a sitemap or sitemap index, and
:func:`normalise` for the URL form the crawler compares and keys by.
Not guaranteed: links written by JavaScript are not seen.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit, urlunsplit

from freshindex.core.errors import SourceError


def normalise(url: str) -> str:
    """``url`` without its fragment, with a lower-case scheme and host and a path of at least ``/``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query, ""))


class _PageLinks(HTMLParser):
    """The ``<a href>``, ``<link rel=canonical>`` and ``<base href>`` of an HTML page (stdlib parser)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.canonical: str | None = None
        self.base: str | None = None
        self.nofollow = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): (v or "") for k, v in attrs}
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"].strip())
        elif tag == "link" and "canonical" in a.get("rel", "").lower().split() and self.canonical is None:
            self.canonical = a.get("href", "").strip() or None
        elif tag == "base" and a.get("href") and self.base is None:
            self.base = a["href"].strip()
        elif tag == "meta" and a.get("name", "").lower() == "robots" and "nofollow" in a.get("content", "").lower():
            self.nofollow = True


def page_links(html: bytes, url: str) -> tuple[list[str], str | None]:
    """Absolute URLs (fragments removed) linked from ``html`` served at ``url``, and its canonical URL."""
    parser = _PageLinks()
    with contextlib.suppress(Exception):  # a broken page still yields what was read before the break
        parser.feed(html.decode("utf-8", errors="replace"))
        parser.close()
    base = urljoin(url, parser.base) if parser.base else url
    canonical = normalise(urljoin(base, parser.canonical)) if parser.canonical else None
    if parser.nofollow:
        return [], canonical
    links = []
    for href in parser.hrefs:
        if href.startswith(("#", "mailto:", "javascript:", "tel:", "data:")):
            continue
        with contextlib.suppress(ValueError):
            links.append(normalise(urljoin(base, href)))
    return sorted(set(links)), canonical


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
