"""Page furniture of generated documentation, recognised by its structure.

Documentation generators (DocBook XSL, Sphinx, MkDocs, Javadoc) wrap every
page in the same furniture: a previous/up/home/next bar above and below the
text (DocBook ``navheader``/``navfooter`` tables, Sphinx ``related``), a
sidebar with the site's table of contents, a header whose heading is the
site's name linking to its index, an in-page table of contents.  Each
generator names them differently, so a class-name list always misses one.
What they share is their shape, and that is what is judged here:

* **navigation clusters**: the smallest block around links that say where
  to go rather than what is said (text "Prev", "Next", "Up", "Home",
  "« previous", "Next topic"; ``accesskey`` p/n/u/h; ``rel`` prev/next/up),
  as long as the block stays short and holds no prose, headings other than
  labels ("Previous topic"), code or content tables;
* **link-dense blocks**: lists, tables and divisions made almost only of
  links, when they are an in-page table of contents (every link points into
  the page) or sit outside the main text (before the first content heading
  or after the last paragraph);
* **site-name headings**: a heading that is nothing but one link to another
  page ("Django 3.2.25 documentation" linking to ``index.html``).

What it does not guarantee: a page written by hand whose prose paragraph is
only "Next" in a link loses that paragraph; a link list *inside* the text
(an index page) is kept, because it is content there.  Repetition across
pages (the third mark of furniture) cannot be seen from one page;
``bench/docs_structure.py`` measures what repeats across a corpus.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString, Tag

from freshindex.workers.parsing.soup import find_tag, find_tags, iter_tags

_NAV_TEXT = re.compile(
    r"^[\s«‹←<]*(prev|previous|next|up|home|top|back|forward|contents|table of contents|index|"
    r"previous (page|topic|chapter|section|class|package|file)|next (page|topic|chapter|section|class|package|file)|"
    r"prev (page|class|package|file)|up one level|go up|frames|no frames|all classes|"
    r"上一页|下一页|上一节|下一节|返回|目录|首页)[\s»›→>:]*$",
    re.I,
)
_EDIT_TEXT = re.compile(r"^\s*(edit|edit this page|edit on (github|gitlab)|view (page )?source|view on (github|gitlab)|"
                        r"improve this (page|doc)|suggest (an )?edit|report an issue)\s*$", re.I)
_NAV_LABEL = re.compile(r"^\s*(previous|next|prev)\s+(topic|page|chapter|section)|^\s*(navigation|this page|"
                        r"quick search|table of contents|on this page|contents|related topics?)\s*:?\s*$", re.I)
_NAV_TITLE = re.compile(r"^(previous|next|prev|up|home)\b", re.I)
_NAV_REL = {"prev", "previous", "next", "up", "start", "home", "first", "last", "contents", "index"}
_NAV_ACCESSKEY = {"p", "n", "u", "h"}
_STOP = {"html", "body", "main", "article", "[document]"}
_CONTENT_TAGS = ["pre", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "dl", "img", "figure"]
#: A navigation block is short: DocBook's footer with two page titles is about 15 words.
_MAX_NAV_WORDS = 60
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_WORD = re.compile(r"\w+")


def _words(text: str) -> int:
    return len(_WORD.findall(text))


def is_nav_link(a: Tag) -> bool:
    """A link that says where to go (previous, next, up, home), not what the text says."""
    if str(a.get("accesskey") or "").lower() in _NAV_ACCESSKEY:
        return True
    raw = a.get("rel")
    rel = raw.split() if isinstance(raw, str) else list(raw or ())
    if any(r.lower() in _NAV_REL for r in rel):
        return True
    text = " ".join(a.get_text(" ").split())
    if text and len(text) <= 40 and _NAV_TEXT.match(text):
        return True
    if _is_edit_link(a):
        return True
    return bool(_NAV_TITLE.match(str(a.get("title") or "")) and "chapter" in str(a.get("title")).lower())


def _is_edit_link(a: Tag) -> bool:
    return bool(_EDIT_TEXT.match(a.get_text(" ")) or _EDIT_TEXT.match(str(a.get("title") or "")))


def is_removed(tag: Tag) -> bool:
    # ``Tag.decomposed`` falls back to a subtree search when the flag is unset.
    return bool(tag.__dict__.get("_decomposed", False))


class _Stats:
    """Word and link counts of every element, from one pass over the tree."""

    __slots__ = ("first", "last", "linked", "links", "local", "words")

    def __init__(self) -> None:
        self.words = self.linked = self.links = self.local = 0
        self.first = self.last = 0


def _measure(soup: BeautifulSoup) -> dict[int, _Stats]:
    stats: dict[int, _Stats] = {}
    order = 0
    stack: list[tuple[Tag, bool]] = [(soup, False)]
    while stack:
        node, done = stack.pop()
        if not done:
            st = stats[id(node)] = _Stats()
            st.first = order
            order += 1
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(node.contents) if isinstance(c, Tag))
            continue
        st = stats[id(node)]
        st.last = order - 1
        own = sum(_words(str(c)) for c in node.contents if type(c) is NavigableString)
        st.words = own
        for c in node.contents:
            if isinstance(c, Tag):
                cs = stats[id(c)]
                st.words += cs.words
                st.linked += cs.linked
                st.links += cs.links
                st.local += cs.local
        if node.name == "a" and node.get("href") is not None:
            st.linked = st.words
            st.links += 1
            st.local += str(node["href"]).startswith("#")
    return stats


def _link_text_words(node: Tag) -> int:
    return sum(_words(a.get_text(" ")) for a in iter_tags(node, "a"))


def _is_navigational(node: Tag, stats: dict[int, _Stats]) -> bool:
    """Short, and nothing in it reads as content."""
    st = stats.get(id(node))
    if st is not None and st.words > _MAX_NAV_WORDS:
        return False
    text = node.get_text(" ")
    if _words(text) > _MAX_NAV_WORDS:
        return False
    for h in iter_tags(node, _HEADINGS):
        if not _NAV_LABEL.match(h.get_text(" ")) and not (find_tag(h, "a") is not None and _link_text_words(h) == _words(h.get_text(" "))):
            return False
    if find_tag(node, ("pre", "blockquote", "dl", "img", "figure", "code")) is not None:
        # Code and definitions are content; a DocBook header never holds them.
        return False
    for p in iter_tags(node, "p"):
        if _words(p.get_text(" ")) - _link_text_words(p) > 12:
            return False
    return True


def _cluster(a: Tag, stats: dict[int, _Stats]) -> Tag | None:
    """The largest short block around a navigation link that is still navigation."""
    best: Tag | None = None
    node: Tag | None = a.parent
    while node is not None and node.name not in _STOP and str(node.get("role") or "") != "main":
        if not _is_navigational(node, stats):
            break
        best = node
        node = node.parent
    return best


def _site_heading(h: Tag) -> bool:
    """A heading that is only a link to another page: the site's name in its header."""
    links = find_tags(h, "a", attr="href")
    if len(links) != 1:
        return False
    href = str(links[0]["href"]).strip()
    if not href or href.startswith("#"):
        return False
    return _words(links[0].get_text(" ")) == _words(h.get_text(" ")) > 0


def strip_structural(soup: BeautifulSoup) -> int:
    """Remove navigation clusters, link-dense blocks outside the text, and
    site-name headings from ``soup``; returns how many elements went."""
    removed = 0
    for h in find_tags(soup, ("h1", "h2", "h3")):
        if not is_removed(h) and _site_heading(h):
            h.decompose()
            removed += 1
    stats = _measure(soup)
    for a in find_tags(soup, "a"):
        if is_removed(a) or not is_nav_link(a):
            continue
        block = _cluster(a, stats)
        if block is None or is_removed(block):
            if block is None and _is_edit_link(a):
                a.decompose()  # "Edit this page" straight inside the article
                removed += 1
            continue
        links = find_tags(block, "a")
        nav = sum(1 for x in links if is_nav_link(x))
        words, linked = _words(block.get_text(" ")), _link_text_words(block)
        labels = [h for h in iter_tags(block, _HEADINGS) if _NAV_LABEL.match(h.get_text(" "))]
        if nav >= 2 or words - linked <= 4 or linked >= 0.5 * words or labels:
            block.decompose()
            removed += 1
    removed += _strip_link_dense(soup)
    return removed


def _strip_link_dense(soup: BeautifulSoup) -> int:
    stats = _measure(soup)
    headings = [h for h in iter_tags(soup, ("h1", "h2", "h3")) if h.get_text(strip=True)]
    prose = [p for p in iter_tags(soup, "p") if stats[id(p)].words - stats[id(p)].linked > 12]
    first_heading = stats[id(headings[0])].first if headings else 0
    last_prose = stats[id(prose[-1])].first if prose else len(stats)
    removed = 0
    for node in find_tags(soup, ("ul", "ol", "div", "table", "p", "dl")):
        if is_removed(node):
            continue
        st = stats[id(node)]
        if st.links < 4 or not st.words or st.linked < 0.8 * st.words:
            continue
        if find_tag(node, "pre") is not None:
            continue
        in_page = st.local == st.links
        outside = st.last < first_heading or st.first > last_prose
        if in_page or outside:
            node.decompose()
            removed += 1
    return removed


def text_without_tags(node: Tag) -> str:
    """The visible text of ``node`` on one line (for fingerprints and checks)."""
    return " ".join(s for s in (str(x).strip() for x in node.descendants if type(x) is NavigableString) if s)
