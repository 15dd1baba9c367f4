"""The HTML parser's tree (workers/parsing/html_tree.py): lxml's elements, read as the parser always read pages.

Given the generated-documentation fixtures and a page written to hold the
edge cases (comments between text, whitespace-only runs, <pre>, scripts,
ruby annotations, nested matches, multi-valued classes, attributes without
a value), when the page is parsed, searched and pruned, then the text under
every element is what beautifulsoup4 (the parser's former tree) reads there,
the searches return what lxml's XPath selects in document order, and a
removed element takes nothing but itself: the text after it stays, a run of
its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from lxml import etree

from freshindex.core.enums import BlockKind
from freshindex.workers.parsing.html import parse_html
from freshindex.workers.parsing.html_tree import (
    Pruning,
    children,
    classes,
    depth_over,
    find_parent_tag,
    find_tag,
    find_tags,
    get_text,
    iter_tags,
    parse_document,
)

FIXTURES = Path(__file__).parent / "fixtures"
EDGES = """<!DOCTYPE html><html><head><title>t</title><style>p { color: red }</style></head><body>
<div role="main" class="a  b"><h1 id="top">Top <a href="#top">¶</a></h1>
<ul><li>one <ul><li>nested <a href="x.html">x</a></li></ul></li><li id="">two</li></ul>
<div role="navigation banner"><a>no href</a><a href="">empty href</a></div>
<table><tr><td>1</td></tr><tr><td><table><tr><th>inner</th></tr></table></td></tr></table>
<p data-mark>marked</p> text <!-- a comment --> between <span role="search">s</span>
<pre>  keep
   this   </pre>   \n\t  <ruby>漢<rp>(</rp><rt>kan</rt><rp>)</rp></ruby>
<script>var x = "<p>not text</p>";</script>&amp; &lt;entities&gt; &copy;</div></body></html>"""


def _pages() -> list[str]:
    return [EDGES, *(p.read_text() for p in sorted(FIXTURES.glob("*.html")))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p[:40])
def test_text_is_what_the_former_tree_read(page: str) -> None:
    root, has_body = parse_document(page)
    soup = BeautifulSoup(page, "html.parser")
    assert has_body
    ours = find_tags(root, ("p", "li", "td", "pre", "h1", "h2", "dt", "dd", "a"))
    theirs = soup.body.find_all(["p", "li", "td", "pre", "h1", "h2", "dt", "dd", "a"])
    assert [t.tag for t in ours] == [t.name for t in theirs]
    for el, tag in zip(ours, theirs, strict=True):
        assert get_text(el) == tag.get_text()
        assert get_text(el, " ") == tag.get_text(" ")
    body = find_tag(root, "body")
    assert body is not None
    assert get_text(body) == soup.body.get_text()


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p[:40])
def test_searches_select_what_xpath_selects(page: str) -> None:
    root, _ = parse_document(page)
    cases = [
        (find_tags(root), root.xpath("descendant::*")),
        (find_tags(root, "a"), root.xpath("descendant::a")),
        (find_tags(root, ("h1", "h2", "h3", "ul")), root.xpath("descendant::*[self::h1 or self::h2 or self::h3 or self::ul]")),
        (find_tags(root, "a", attr="href"), root.xpath("descendant::a[@href]")),
        (find_tags(root, attr="id"), root.xpath("descendant::*[@id]")),
        (find_tags(root, attr="role", values=["navigation", "search"]),
         root.xpath("descendant::*[@role='navigation' or @role='search']")),
        (find_tags(root, attr="class", values=("b",)),
         root.xpath("descendant::*[contains(concat(' ', normalize-space(@class), ' '), ' b ')]")),
    ]
    for ours, theirs in cases:
        assert ours == theirs
    for node in find_tags(root, ("ul", "tr", "div")):
        assert find_tags(node, ("li", "td", "th"), recursive=False) == node.xpath("li|td|th")
        assert find_tag(node, ("a", "table")) is next(iter(node.xpath("descendant::*[self::a or self::table]")), None)
    for node in find_tags(root, ("td", "a", "li")):
        assert find_parent_tag(node, ("table", "ul")) is next(reversed(node.xpath("ancestor::table|ancestor::ul")), None)


def test_edges_are_what_they_say() -> None:
    root, _ = parse_document(EDGES)
    assert [get_text(t) for t in find_tags(root, "a", attr="href")] == ["¶", "x", "empty href"]
    assert find_tags(root, attr="role", values=("navigation",)) == []  # one value, not a word
    assert find_tags(root, attr="data-mark")[0].get("data-mark") == ""
    main = find_tags(root, attr="role", values=("main",))[0]
    assert classes(main) == ["a", "b"]
    assert [get_text(t) for t in iter_tags(root, "li")] == ["one nested x", "nested x", "two"]
    assert get_text(find_tags(root, "pre")[0]) == "  keep\n   this   "
    runs = [c for c in children(main) if isinstance(c, str)]
    assert " text " in runs and " between " in runs  # the comment is not text, and splits the run
    assert "\n" in runs  # a whitespace-only run with a newline: one newline
    assert "not text" not in get_text(root) and "kan" not in get_text(root) and "color" not in get_text(root)
    assert get_text(main).endswith("\n漢\n& <entities> ©")
    inner = find_tags(root, "th")[0]
    assert find_parent_tag(inner, "table") is not find_tags(root, "table")[0]
    assert find_tag(root, "video") is None


def test_removing_keeps_the_text_around_in_its_own_runs() -> None:
    root, _ = parse_document("<html><body><div>one <b>bold <i>it</i></b> two<p>para</p>\n</div>"
                             "<h2><a class='backref' href='#x'>Title</a> <em>now</em></h2></body></html>")
    div, b, i = find_tag(root, "div"), find_tag(root, "b"), find_tag(root, "i")
    assert div is not None and b is not None and i is not None
    pruning = Pruning()
    pruning.remove(b)
    assert pruning.is_removed(b) and pruning.is_removed(i)
    assert [c if isinstance(c, str) else c.tag for c in children(div)] == ["one ", " two", "p", "\n"]
    a = find_tag(root, "a")
    assert a is not None and not pruning.is_removed(a)
    pruning.unwrap(a)
    h2 = find_tag(root, "h2")
    assert h2 is not None
    assert [c if isinstance(c, str) else c.tag for c in children(h2)] == ["Title", " ", "em"]
    assert find_tag(root, "a") is None
    p = find_tag(root, "p")
    assert p is not None
    pruning.move_before(p, div)
    assert [c.tag for c in find_tag(root, "body")] == ["p", "div", "h2"]  # type: ignore[union-attr]
    assert p.tail is None and get_text(div) == "one  two\n"


def test_declarations_empty_pages_and_pages_without_a_body() -> None:
    root, has_body = parse_document('<?xml version="1.0" encoding="UTF-8"?>\n<html><body><p>x</p></body></html>')
    assert has_body and get_text(root).strip() == "x"
    for empty in ("", "   \n", "<!-- nothing -->"):
        root, has_body = parse_document(empty)
        assert root.tag == "html" and find_tag(root, "body") is not None and not has_body
    root, has_body = parse_document("<title>T</title><p>loose</p>")
    assert not has_body and [t.tag for t in find_tags(root)] == ["head", "title", "body", "p"]


def test_depth_counts_levels_from_the_root() -> None:
    root, _ = parse_document("<html><body>" + "<div>" * 10 + "x" + "</div>" * 10 + "</body></html>")
    assert depth_over(root, 11) and not depth_over(root, 12)  # html, body, ten divs: 12 levels
    deep, _ = parse_document("<html><body>" + "<div>" * 3000 + "deep" + "</div>" * 3000 + "</body></html>")
    assert depth_over(deep, 256)  # libxml2 builds it (huge_tree) deep enough to be refused
    assert isinstance(deep, etree._Element)


def test_a_block_inside_a_paragraph_closes_it_as_browsers_do() -> None:
    # Sphinx writes the "Availability" note as <p>…<p>…</p></p>: the HTML standard (and libxml2) closes
    # the first paragraph where the second starts, so they are two blocks, read in order.
    page = ("<html><body><h1>asyncio</h1><p class='availability'><a href='intro.html#availability'>Availability"
            "</a>: not Emscripten, not WASI.<p>This module does not work on WebAssembly.</p></p></body></html>")
    doc = parse_html(page.encode(), "asyncio.html")
    assert [(b.kind, b.text) for b in doc.blocks[1:]] == [
        (BlockKind.PARAGRAPH, "Availability: not Emscripten, not WASI."),
        (BlockKind.PARAGRAPH, "This module does not work on WebAssembly."),
    ]
    assert doc.blocks[1].meta.links == [{"text": "Availability", "href": "intro.html#availability"}]
