"""The parser's tag searches (workers/parsing/soup.py) find what bs4's find_all finds.

Given the generated-documentation fixtures and a page written to hold the
edge cases (nested matches, multi-valued attributes, attributes without a
value, text nodes), when each helper and the bs4 call it replaces search the
same tree, then they return the same elements in the same order.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bs4 import BeautifulSoup, Tag

from freshindex.workers.parsing.soup import find_parent_tag, find_tag, find_tags, iter_tags

FIXTURES = Path(__file__).parent / "fixtures"
EDGES = """<html><head><title>t</title></head><body>
<div role="main" class="a b"><h1 id="top">Top <a href="#top">¶</a></h1>
<ul><li>one <ul><li>nested <a href="x.html">x</a></li></ul></li><li id="">two</li></ul>
<div role="navigation banner"><a>no href</a><a href="">empty href</a></div>
<table><tr><td>1</td></tr><tr><td><table><tr><th>inner</th></tr></table></td></tr></table>
<p data-mark>marked</p> text between <span role="search">s</span></div></body></html>"""


def _trees() -> list[BeautifulSoup]:
    pages = [p.read_text() for p in sorted(FIXTURES.glob("*.html"))]
    return [BeautifulSoup(text, "html.parser") for text in [EDGES, *pages]]


@pytest.mark.parametrize("soup", _trees())
def test_searches_match_find_all(soup: BeautifulSoup) -> None:
    cases = [
        (find_tags(soup), soup.find_all(True)),
        (find_tags(soup, "a"), soup.find_all("a")),
        (find_tags(soup, ("h1", "h2", "h3", "ul")), soup.find_all(["h1", "h2", "h3", "ul"])),
        (find_tags(soup, "a", attr="href"), soup.find_all("a", href=True)),
        (find_tags(soup, attr="id"), soup.find_all(id=True)),
        (find_tags(soup, attr="data-mark"), soup.find_all(attrs={"data-mark": True})),
        (find_tags(soup, attr="role", values=["navigation", "search"]), soup.find_all(role=["navigation", "search"])),
        (find_tags(soup, attr="role", values=("main",)), soup.find_all(role="main")),
        (find_tags(soup, attr="class", values=("b",)), soup.find_all(class_="b")),
    ]
    for ours, theirs in cases:
        assert [id(t) for t in ours] == [id(t) for t in theirs]
    for node in soup.find_all(["ul", "tr", "div"]):
        assert find_tags(node, ("li", "td", "th"), recursive=False) == node.find_all(["li", "td", "th"], recursive=False)
        assert find_tag(node, ("a", "table")) is node.find(["a", "table"])
    for node in soup.find_all(["td", "a", "li"]):
        assert find_parent_tag(node, ("table", "ul")) is node.find_parent(["table", "ul"])


def test_edges_are_what_they_say() -> None:
    soup = BeautifulSoup(EDGES, "html.parser")
    assert [t.get_text() for t in find_tags(soup, "a", attr="href")] == ["¶", "x", "empty href"]
    assert [t.name for t in find_tags(soup, attr="role", values=("navigation",))] == []  # one value, not a word
    assert [t.get_text() for t in iter_tags(soup, "li")] == ["one nested x", "nested x", "two"]
    inner = find_tags(soup, "th")[0]
    assert isinstance(find_parent_tag(inner, "table"), Tag)
    assert find_parent_tag(inner, "table") is not find_tags(soup, "table")[0]
    assert find_tag(soup, "video") is None
