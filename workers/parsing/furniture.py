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

from lxml import etree

from freshindex.workers.parsing.html_tree import (
    Element,
    Pruning,
    find_tag,
    find_tags,
    get_text,
    has_text,
    iter_tags,
    strings,
)

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
_STOP = {"html", "body", "main", "article", "[document]"}
_CONTENT_TAGS = ["pre", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "dl", "img", "figure"]
#: A navigation block is short: DocBook's footer with two page titles is about 15 words.
_MAX_NAV_WORDS = 60
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_WORD = re.compile(r"\w+")


def _words(text: str) -> int:
    return len(_WORD.findall(text))


def is_nav_link(a: Element) -> bool:
    """A link that says where to go (previous, next, up, home), not what the text says.

    An ``accesskey`` of p/n/u/h is not read as a mark: the parser never
    honoured it (it compared the attribute's list of keys to single keys), and
    honouring it now would change what is extracted from pages already indexed."""
    rel = str(a.get("rel") or "").split()
    if any(r.lower() in _NAV_REL for r in rel):
        return True
    words = " ".join(get_text(a, " ").split())
    if words and len(words) <= 40 and _NAV_TEXT.match(words):
        return True
    if _is_edit_link(a):
        return True
    return bool(_NAV_TITLE.match(str(a.get("title") or "")) and "chapter" in str(a.get("title")).lower())


def _is_edit_link(a: Element) -> bool:
    return bool(_EDIT_TEXT.match(get_text(a, " ")) or _EDIT_TEXT.match(str(a.get("title") or "")))


class _Stats:
    """Word and link counts of one element and everything in it."""

    __slots__ = ("first", "last", "linked", "links", "local", "words")

    def __init__(self, first: int, last: int, words: int, linked: int, links: int, local: int) -> None:
        self.first, self.last = first, last
        self.words, self.linked, self.links, self.local = words, linked, links, local


def _take_away(stats: dict[Element, _Stats], gone: Element, ancestors: list[Element]) -> None:
    """Take the counts of ``gone`` (removed from the tree) out of its former ``ancestors``' (nearest first)."""
    st = stats[gone]
    words, linked, links, local = st.words, st.linked, st.links, st.local
    for node in ancestors:
        st = stats[node]
        st.words -= words
        if node.tag == "a" and node.get("href") is not None:
            linked = st.linked - st.words  # a link's linked words are all its words
            st.linked = st.words
        else:
            st.linked -= linked
        st.links -= links
        st.local -= local


def _measure(root: Element) -> dict[Element, _Stats]:
    """Every element's counts, keyed by the element (which keeps its lxml proxy, and so its identity, alive);
    ``first`` and ``last`` are the document-order numbers of the element and of the last element in it."""
    order = list(root.iter(etree.Element))
    stats: dict[Element, _Stats] = {}
    count = _WORD.findall
    for n in range(len(order) - 1, -1, -1):  # children before their parent
        el = order[n]
        text = el.text
        words = len(count(text)) if text else 0
        linked = links = local = 0
        last = n
        for c in el:
            text = c.tail
            if text:
                words += len(count(text))
            cs = stats.get(c)
            if cs is not None:
                words += cs.words
                linked += cs.linked
                links += cs.links
                local += cs.local
                last = cs.last
        if el.tag == "a":
            href = el.get("href")
            if href is not None:
                linked = words
                links += 1
                local += href.startswith("#")
        stats[el] = _Stats(n, last, words, linked, links, local)
    return stats


def _link_text_words(node: Element) -> int:
    return sum(_words(get_text(a, " ")) for a in iter_tags(node, "a"))


def _is_navigational(node: Element, stats: dict[Element, _Stats]) -> bool:
    """Short, and nothing in it reads as content."""
    st = stats.get(node)
    if st is not None and st.words > _MAX_NAV_WORDS:
        return False
    if _words(get_text(node, " ")) > _MAX_NAV_WORDS:
        return False
    for h in iter_tags(node, _HEADINGS):
        label = get_text(h, " ")
        if not _NAV_LABEL.match(label) and not (find_tag(h, "a") is not None and _link_text_words(h) == _words(label)):
            return False
    if find_tag(node, ("pre", "blockquote", "dl", "img", "figure", "code")) is not None:
        # Code and definitions are content; a DocBook header never holds them.
        return False
    for p in iter_tags(node, "p"):
        if _words(get_text(p, " ")) - _link_text_words(p) > 12:
            return False
    return True


def _cluster(a: Element, stats: dict[Element, _Stats]) -> Element | None:
    """The largest short block around a navigation link that is still navigation."""
    best: Element | None = None
    node: Element | None = a.getparent()
    while node is not None and node.tag not in _STOP and str(node.get("role") or "") != "main":
        if not _is_navigational(node, stats):
            break
        best = node
        node = node.getparent()
    return best


def _site_heading(h: Element) -> bool:
    """A heading that is only a link to another page: the site's name in its header."""
    links = find_tags(h, "a", attr="href")
    if len(links) != 1:
        return False
    href = str(links[0].get("href")).strip()
    if not href or href.startswith("#"):
        return False
    return _words(get_text(links[0], " ")) == _words(get_text(h, " ")) > 0


def strip_structural(root: Element, pruning: Pruning) -> int:
    """Remove navigation clusters, link-dense blocks outside the text, and
    site-name headings from the page under ``root``; returns how many elements went."""
    is_removed = pruning.is_removed
    removed = 0
    for h in find_tags(root, ("h1", "h2", "h3")):
        if not is_removed(h) and _site_heading(h):
            pruning.remove(h)
            removed += 1
    stats = _measure(root)
    # Counts are read as they were before this loop; what it removes is taken out of them afterwards,
    # in the order it went, for the link-dense pass (one measure of the tree instead of two).
    gone: list[tuple[Element, list[Element]]] = []
    for a in find_tags(root, "a"):
        if is_removed(a) or not is_nav_link(a):
            continue
        block = _cluster(a, stats)
        if block is None or is_removed(block):
            if block is None and _is_edit_link(a):
                gone.append((a, list(a.iterancestors())))
                pruning.remove(a)  # "Edit this page" straight inside the article
                removed += 1
            continue
        links = find_tags(block, "a")
        nav = sum(1 for x in links if is_nav_link(x))
        words, linked = _words(get_text(block, " ")), _link_text_words(block)
        labels = [h for h in iter_tags(block, _HEADINGS) if _NAV_LABEL.match(get_text(h, " "))]
        if nav >= 2 or words - linked <= 4 or linked >= 0.5 * words or labels:
            gone.append((block, list(block.iterancestors())))
            pruning.remove(block)
            removed += 1
    for node, ancestors in gone:
        _take_away(stats, node, ancestors)
    removed += _strip_link_dense(root, pruning, stats)
    return removed


def _strip_link_dense(root: Element, pruning: Pruning, stats: dict[Element, _Stats]) -> int:
    """Lists, tables and divisions made of links: an in-page table of contents, or outside the text.

    ``stats`` are the counts of the tree as it is now; ``first`` and ``last`` may still number
    elements removed since (only their order is compared, and removal keeps the order)."""
    headings = [h for h in iter_tags(root, ("h1", "h2", "h3")) if has_text(h)]
    prose = [p for p in iter_tags(root, "p") if stats[p].words - stats[p].linked > 12]
    first_heading = stats[headings[0]].first if headings else 0
    last_prose = stats[prose[-1]].first if prose else len(stats)
    removed = 0
    for node in find_tags(root, ("ul", "ol", "div", "table", "p", "dl")):
        if pruning.is_removed(node):
            continue
        st = stats[node]
        if st.links < 4 or not st.words or st.linked < 0.8 * st.words:
            continue
        if find_tag(node, "pre") is not None:
            continue
        in_page = st.local == st.links
        outside = st.last < first_heading or st.first > last_prose
        if in_page or outside:
            pruning.remove(node)
            removed += 1
    return removed


def text_without_tags(node: Element) -> str:
    """The visible text of ``node`` on one line (for fingerprints and checks)."""
    return " ".join(s for s in (x.strip() for x in strings(node)) if s)
