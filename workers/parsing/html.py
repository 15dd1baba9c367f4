"""HTML to blocks, through lxml's HTML tree (libxml2's parser, :mod:`workers.parsing.html_tree`).

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

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice

from lxml import etree

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, ParsedDocument
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.boilerplate import is_prev_next, is_volatile
from freshindex.workers.parsing.decode import decode_text
from freshindex.workers.parsing.fingerprint import content_fingerprint
from freshindex.workers.parsing.furniture import strip_structural
from freshindex.workers.parsing.html_tree import (
    Element,
    Pruning,
    class_text,
    depth_over,
    find_parent_tag,
    find_tag,
    find_tags,
    get_text,
    iter_tags,
    parse_document,
)
from freshindex.workers.parsing.html_walk import ADMONITION, HEADINGS, HtmlWalker, inline_text, own_id, term_name
from freshindex.workers.parsing.numbering import page_title

#: html-5: the tree is libxml2's (lxml): a block element starting inside a <p> closes it, as the HTML
#: standard says (Sphinx's "Availability" note, a list inside a paragraph are separate blocks now).
VERSION = "html-5"

#: ``term_name`` is read here by callers and tests; it lives with the walker.
__all__ = ["parse_html", "shape_html", "term_name"]

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


def _classes(tag: Element) -> str:
    return class_text(tag) + " " + str(tag.get("id") or "")


def _check_depth(root: Element) -> None:
    limit = limits.current().max_nesting_depth
    if depth_over(root, limit):
        limits.check_depth(limit + 1, "HTML elements")


_ID_WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=4096)
def _names_furniture(value: str | None) -> bool:
    """Whether a class attribute names furniture (pages repeat a few class values thousands of times)."""
    return bool(value) and bool(_FURNITURE.search(" ".join(str(value).split())))


def _is_named_furniture(tag: Element) -> bool:
    """Furniture by name: a class, or an id, that names a navigation bar, a sidebar, a banner...

    An id is weaker evidence than a class: generators derive content ids from
    the heading or the term they anchor (Sphinx's section "Setting test cookies"
    is ``id="setting-test-cookies"``, the method ``set_test_cookie()`` is
    ``id="...SessionBase.set_test_cookie"``), and those must not go as a cookie
    banner.  So an id counts only when the furniture word it holds is not a
    word of the element's own heading, and never on a term, a heading or a
    dotted (qualified-name) id."""
    if _names_furniture(tag.get("class")):
        return True
    value = str(tag.get("id") or "")
    m = _FURNITURE.search(value)
    if not m:
        return False
    if tag.tag in HEADINGS or tag.tag in ("dt", "dd") or "." in value:
        return False
    word = m.group(2).lower().rstrip("s")
    head = find_tag(tag, HEADINGS)
    own = {w.lower().rstrip("s") for w in _ID_WORD.findall(get_text(head, " "))} if head is not None else set()
    return word not in own


def _strip_furniture(root: Element, pruning: Pruning) -> None:
    is_removed, remove = pruning.is_removed, pruning.remove
    for tag in find_tags(root, _DROP_TAGS):
        if not is_removed(tag):
            remove(tag)
    # The list holds nested tags too: one removed with its parent (Sphinx's footnote-list <aside>
    # holds footnote <aside>s) must be skipped, not read.
    for tag in find_tags(root, "aside"):
        if not is_removed(tag) and not ADMONITION.search(_classes(tag)):
            remove(tag)
    for tag in find_tags(root, "header"):
        if is_removed(tag):
            continue
        # A site header goes; an article header keeps its headings.
        for h in find_tags(tag, HEADINGS):
            pruning.move_before(h, tag)
        remove(tag)
    for tag in find_tags(root, attr="role", values=_DROP_ROLES):
        if not is_removed(tag):
            remove(tag)
    for tag in root.xpath("descendant::*[@class or @id]"):  # furniture by name has one or the other
        if is_removed(tag) or tag.tag in ("html", "body", "main", "article"):
            continue
        if _is_named_furniture(tag) and not ADMONITION.search(class_text(tag)):
            if tag.tag == "a" and find_parent_tag(tag, HEADINGS) is not None \
                    and get_text(tag).strip().lower() not in _ANCHOR_TEXT:
                pruning.unwrap(tag)  # Sphinx's "toc-backref" link is the heading's own text
            else:
                remove(tag)
    for a in find_tags(root, "a", attr="href"):
        if not is_removed(a) and str(a.get("href")).startswith("#") and get_text(a).strip().lower() in _ANCHOR_TEXT:
            remove(a)


def _mark_permalinks(page: Element) -> None:
    """Remember, on each heading, the id its permalink (``¶``) points to: the
    generator's own anchor for it (removed with the furniture afterwards)."""
    for tag in find_tags(page, attr=_ANCHOR_MARK):
        del tag.attrib[_ANCHOR_MARK]  # only this function may set it
    ids = {i for t in iter_tags(page, attr="id") if (i := own_id(t))}
    for h in find_tags(page, HEADINGS):
        for a in iter_tags(h, "a", attr="href"):
            href = str(a.get("href"))
            if href.startswith("#") and href[1:] in ids and get_text(a).strip().lower() in _ANCHOR_TEXT:
                h.set(_ANCHOR_MARK, href[1:])
                break


@dataclass
class _Page:
    """A page cleaned for the walk: the element read, the page's own title, and the hash of both."""

    root: Element
    title_number: str | None
    title: str
    shape_hash: str


def _clean(data: bytes) -> _Page:
    """Parse, drop the furniture, pick the element to read: everything the walk depends on, hashed."""
    page, has_body = parse_document(decode_text(data))
    limits.check_time("HTML parsed")
    _check_depth(page)
    title_tag = find_tag(page, "title")
    raw_title = inline_text(title_tag) if title_tag is not None else ""
    _mark_permalinks(page)
    pruning = Pruning()
    _strip_furniture(page, pruning)
    strip_structural(page, pruning)
    mains = find_tags(page, "main") or find_tags(page, attr="role", values=("main",))
    # A page without a <body> of its own is read whole (libxml2 adds one, around part of it).
    body = find_tag(page, "body") if has_body else None
    root = mains[0] if len(mains) == 1 else (body if body is not None else page)
    heading_texts = [" ".join(inline_text(h).split()) for h in islice(iter_tags(root, HEADINGS), 8)]
    title_number, title = page_title(raw_title, heading_texts)
    # The walk reads the element, its ancestors' names and the title; nothing else of the page.
    digest = hashlib.sha256(f"{VERSION}\0{raw_title}\0".encode())
    digest.update("/".join(str(a.tag) for a in root.iterancestors()).encode() + b"\0")
    digest.update(etree.tostring(root, encoding="utf-8", with_tail=False))
    return _Page(root, title_number, title, digest.hexdigest())


def shape_html(data: bytes) -> str:
    """The hash of what :func:`parse_html` would walk, without the walk.

    Two pages with the same shape hash parse to the same blocks and title
    (the walk is a function of the cleaned element and the title), so a
    release that changed only a page's furniture (navigation, a version in
    the header, a footer) is seen as unchanged for the cost of parsing and
    cleaning the tree: no walk, no fingerprint.  A different hash says
    nothing: the page is parsed, and its content hash decides."""
    return _clean(data).shape_hash


def parse_html(data: bytes, key: str) -> ParsedDocument:
    cleaned = _clean(data)
    title_number, title = cleaned.title_number, cleaned.title
    walker = HtmlWalker(title)
    walker.walk(cleaned.root)
    blocks = _drop_volatile(walker.blocks)
    if not title:
        first = next((b for b in blocks if b.kind == BlockKind.HEADING), None)
        title = first.text if first else key.rsplit("/", 1)[-1]
    meta: dict = {"title_number": title_number} if title_number else {}
    meta["content_hash"] = content_fingerprint(title, blocks, meta)
    meta["shape_hash"] = cleaned.shape_hash
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
