"""HTML to blocks, through beautifulsoup4.

Page furniture is dropped before the walk: scripts and styles, navigation,
site headers and footers, sidebars and tables of contents, breadcrumbs,
previous/next links, version banners, "edit this page" links and the
generated permalink anchors (``¶``) next to headings.  When the page has a
``<main>`` (or ``role="main"``) element only that is read.  What remains is
read in document order into headings (with their heading path),
paragraphs, lists (nested items indented), tables (caption, header rows,
units), code blocks (language from the ``language-*`` class) and
admonitions (warnings, notes), with the links of each block in its meta.

Generated documentation (DocBook, Sphinx, MkDocs, Javadoc) gets more:

* navigation is also recognised by its shape (:mod:`workers.parsing.furniture`),
  so a generator whose class names no rule knows still loses it;
* definition and variable lists are read entry by entry: every block of an
  entry's description has ``meta["term"]``, ``meta["entry"]`` and
  ``meta["term_name"]`` (the name a reader searches for, which the chunker
  repeats where a whole signature would crowd a chunk, see :func:`term_name`)
  and the first one starts with the term (Sphinx's empty ``<dd>`` takes the
  paragraphs after it, up to the next heading or list); a back-of-book
  index's terms (DocBook ``<div class="index">``) are one line each;
* a class names furniture ("sidebar", "cookie-banner"); an id only when it
  is not the anchor of the content it sits on (Sphinx's section
  ``id="setting-test-cookies"`` is not a cookie banner);
* section numbers ("20.4.1.", "F.1.", "Chapter 3.") are split from heading
  text into ``meta["heading_numbers"]`` (parallel to the heading path), and
  the title is the page's own (site suffix dropped, number in
  ``meta["title_number"]``); a reference page's "Synopsis" and "Options"
  sit under its title even when printed at the title's level;
* every block has ``meta["anchor_id"]``, the nearest id of the page around
  it (a heading's permalink target first, generated ids such as DocBook's
  "id-1.6.7" last), so a citation link resolves in the page;
* a table caption may be numbered in any style ("Table F.1.", "Table A-1");
  a row of one cell spanning the table is a group label, carried in a
  leading ``group`` column on the rows below it;
* ``ParsedDocument.meta["content_hash"]`` hashes what was extracted, so a
  release that only changed the furniture is seen as unchanged
  (:mod:`workers.parsing.fingerprint`).

A page nested deeper than :attr:`Limits.max_nesting_depth` is refused as
``too_complex`` rather than walked.

This module cleans the page (furniture, permalinks) and reads its title;
the walk into blocks is :class:`~freshindex.workers.parsing.html_walk.HtmlWalker`.
"""

from __future__ import annotations

import re
from itertools import islice

from bs4 import BeautifulSoup, Tag

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, ParsedDocument
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.boilerplate import is_prev_next, is_volatile
from freshindex.workers.parsing.decode import decode_text
from freshindex.workers.parsing.fingerprint import content_fingerprint
from freshindex.workers.parsing.furniture import is_removed, strip_structural
from freshindex.workers.parsing.html_walk import ADMONITION, HEADINGS, HtmlWalker, inline_text, own_id, term_name
from freshindex.workers.parsing.numbering import page_title
from freshindex.workers.parsing.soup import find_parent_tag, find_tag, find_tags, iter_tags

VERSION = "html-4"

#: ``term_name`` is read here by callers and tests; it lives with the walker.
__all__ = ["parse_html", "term_name"]

_DROP_TAGS = ("script", "style", "noscript", "nav", "footer", "form", "template", "svg", "iframe", "button",
              "select", "input", "textarea", "link", "meta", "object", "embed", "canvas", "dialog")
_DROP_ROLES = ["navigation", "banner", "contentinfo", "search", "complementary", "doc-pagelist"]
#: The attribute that marks a heading's permalink target (set and removed by _mark_permalinks).
_ANCHOR_MARK = "data-fi-anchor"
_FURNITURE = re.compile(
    r"(^|[-_ ])(breadcrumbs?|navbar|nav|navigation|sidebar|side-bar|footer|site-header|page-header|masthead|toc|"
    r"table-of-contents|pagination|pager|prev-next|prevnext|page-nav|version-(banner|warning|notice|switcher|selector)|"
    r"banner|announcement|skip-link|cookies?|consent|edit-page|edit-this-page|feedback|last-updated|"
    r"headerlink|header-anchor|anchor-link|hash-link|permalink|copy-button|sr-only|visually-hidden)([-_ ]|$)",
    re.I,
)
_ANCHOR_TEXT = {"", "¶", "#", "§", "🔗", "link", "permalink"}


def _classes(tag: Tag) -> str:
    return " ".join(tag.get("class") or []) + " " + str(tag.get("id") or "")


def _check_depth(soup: BeautifulSoup) -> None:
    limit = limits.current().max_nesting_depth
    stack: list[tuple[Tag, int]] = [(soup, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            limits.check_depth(depth, "HTML elements")
        stack.extend((c, depth + 1) for c in node.contents if isinstance(c, Tag))


_ID_WORD = re.compile(r"[^\W_]+")


def _is_named_furniture(tag: Tag) -> bool:
    """Furniture by name: a class, or an id, that names a navigation bar, a sidebar, a banner...

    An id is weaker evidence than a class: generators derive content ids from
    the heading or the term they anchor (Sphinx's section "Setting test cookies"
    is ``id="setting-test-cookies"``, the method ``set_test_cookie()`` is
    ``id="...SessionBase.set_test_cookie"``), and those must not go as a cookie
    banner.  So an id counts only when the furniture word it holds is not a
    word of the element's own heading, and never on a term, a heading or a
    dotted (qualified-name) id."""
    if _FURNITURE.search(" ".join(tag.get("class") or [])):
        return True
    value = str(tag.get("id") or "")
    m = _FURNITURE.search(value)
    if not m:
        return False
    if tag.name in HEADINGS or tag.name in ("dt", "dd") or "." in value:
        return False
    word = m.group(2).lower().rstrip("s")
    head = find_tag(tag, HEADINGS)
    own = {w.lower().rstrip("s") for w in _ID_WORD.findall(head.get_text(" "))} if head is not None else set()
    return word not in own


def _strip_furniture(soup: BeautifulSoup) -> None:
    for tag in find_tags(soup, _DROP_TAGS):
        tag.decompose()
    # find_all lists nested tags too: one removed with its parent (Sphinx's footnote-list <aside>
    # holds footnote <aside>s) must be skipped, not read.
    for tag in find_tags(soup, "aside"):
        if not is_removed(tag) and not ADMONITION.search(_classes(tag)):
            tag.decompose()
    for tag in find_tags(soup, "header"):
        if is_removed(tag):
            continue
        # A site header goes; an article header keeps its headings.
        headings = find_tags(tag, HEADINGS)
        if not headings:
            tag.decompose()
        else:
            for h in headings:
                tag.insert_before(h.extract())
            tag.decompose()
    for tag in find_tags(soup, attr="role", values=_DROP_ROLES):
        if not is_removed(tag):
            tag.decompose()
    for tag in find_tags(soup):
        if is_removed(tag) or tag.name in ("html", "body", "main", "article"):
            continue
        if _is_named_furniture(tag) and not ADMONITION.search(" ".join(tag.get("class") or [])):
            if tag.name == "a" and find_parent_tag(tag, HEADINGS) and tag.get_text().strip().lower() not in _ANCHOR_TEXT:
                tag.unwrap()  # Sphinx's "toc-backref" link is the heading's own text
            else:
                tag.decompose()
    for a in find_tags(soup, "a", attr="href"):
        if not is_removed(a) and str(a["href"]).startswith("#") and a.get_text().strip().lower() in _ANCHOR_TEXT:
            a.decompose()


def _mark_permalinks(soup: BeautifulSoup) -> None:
    """Remember, on each heading, the id its permalink (``¶``) points to: the
    generator's own anchor for it (removed with the furniture afterwards)."""
    for tag in find_tags(soup, attr=_ANCHOR_MARK):
        del tag[_ANCHOR_MARK]  # only this function may set it
    ids = {i for t in iter_tags(soup, attr="id") if (i := own_id(t))}
    for h in find_tags(soup, HEADINGS):
        for a in iter_tags(h, "a", attr="href"):
            href = str(a["href"])
            if href.startswith("#") and href[1:] in ids and a.get_text().strip().lower() in _ANCHOR_TEXT:
                h[_ANCHOR_MARK] = href[1:]
                break


def parse_html(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    soup = BeautifulSoup(text, "html.parser")
    limits.check_time("HTML parsed")
    _check_depth(soup)
    title_tag = find_tag(soup, "title")
    raw_title = inline_text(title_tag) if title_tag else ""
    _mark_permalinks(soup)
    _strip_furniture(soup)
    strip_structural(soup)
    mains = find_tags(soup, "main") or find_tags(soup, attr="role", values=("main",))
    root = mains[0] if len(mains) == 1 else (soup.body or soup)
    heading_texts = [" ".join(inline_text(h).split()) for h in islice(iter_tags(root, HEADINGS), 8)]
    title_number, title = page_title(raw_title, heading_texts)
    walker = HtmlWalker(title)
    walker.walk(root)
    blocks = _drop_volatile(walker.blocks)
    if not title:
        first = next((b for b in blocks if b.kind == BlockKind.HEADING), None)
        title = first.text if first else key.rsplit("/", 1)[-1]
    meta: dict = {"title_number": title_number} if title_number else {}
    meta["content_hash"] = content_fingerprint(title, blocks, meta)
    return ParsedDocument(title=title, blocks=tuple(blocks), parser="html", parser_version=VERSION, meta=meta)


def _drop_volatile(blocks: list[Block]) -> list[Block]:
    """Banners and footers that survived the class rules: short volatile lines at
    either end of the page, and previous/next link blocks anywhere."""
    out = [
        b for b in blocks
        if not (b.kind == BlockKind.PARAGRAPH and is_prev_next([x["text"] for x in b.meta.get("links", [])], b.text))
    ]
    for _ in range(3):
        if out and out[0].kind != BlockKind.HEADING and is_volatile(out[0].text):
            out.pop(0)
        if out and out[-1].kind != BlockKind.HEADING and is_volatile(out[-1].text):
            out.pop()
    # A banner right under the page title ("Version 4.2 | updated 2026-11-01").
    if len(out) > 1 and out[0].kind == BlockKind.HEADING and out[1].kind == BlockKind.PARAGRAPH and is_volatile(out[1].text):
        out.pop(1)
    return out
