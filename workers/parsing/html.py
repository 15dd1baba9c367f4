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

A page nested deeper than :attr:`Limits.max_nesting_depth` is refused as
``too_complex`` rather than walked.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, CData, NavigableString, Tag
from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, ParsedDocument
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.boilerplate import is_prev_next, is_volatile
from freshindex.workers.parsing.decode import decode_text
from freshindex.workers.parsing.table import clean_cell, table_block

VERSION = "html-2"

_DROP_TAGS = ("script", "style", "noscript", "nav", "footer", "form", "template", "svg", "iframe", "button",
              "select", "input", "textarea", "link", "meta", "object", "embed", "canvas", "dialog")
_DROP_ROLES = ["navigation", "banner", "contentinfo", "search", "complementary", "doc-pagelist"]
_FURNITURE = re.compile(
    r"(^|[-_ ])(breadcrumbs?|navbar|nav|navigation|sidebar|side-bar|footer|site-header|page-header|masthead|toc|"
    r"table-of-contents|pagination|pager|prev-next|prevnext|page-nav|version-(banner|warning|notice|switcher|selector)|"
    r"banner|announcement|skip-link|cookies?|consent|edit-page|edit-this-page|feedback|last-updated|"
    r"headerlink|header-anchor|anchor-link|hash-link|permalink|copy-button|sr-only|visually-hidden)([-_ ]|$)",
    re.I,
)
_ADMONITION = re.compile(r"(^|[-_ ])(admonition|warning|note|caution|danger|important|tip|hint|alert|callout|"
                         r"attention|notice)([-_ ]|$)", re.I)
_ANCHOR_TEXT = {"", "¶", "#", "§", "🔗", "link", "permalink"}
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_BLOCKISH = {"p", "div", "li", "ul", "ol", "table", "tr", "pre", "blockquote", "section", "article", "dd", "dt",
             "h1", "h2", "h3", "h4", "h5", "h6", "figure", "figcaption", "details", "summary", "main", "aside"}
_CONTAINERS = {"body", "main", "article", "section", "div", "span", "center", "details", "figure", "html", "dl",
               "aside", "header", "hgroup", "summary", "font", "a"}
_WS = re.compile(r"[ \t\r\f\v\u00a0]+")


def _text(node: Tag) -> str:
    """Inline text of ``node``: inline tags joined as written, block tags on new lines."""
    parts: list[str] = []
    for el in node.descendants:
        if isinstance(el, NavigableString):
            if type(el) is NavigableString or isinstance(el, CData):
                parts.append(str(el))
        elif el.name == "br" or el.name in _BLOCKISH:
            parts.append("\n")
    lines = (_WS.sub(" ", line.replace("\n", " ")).strip() for line in "".join(parts).split("\n"))
    return "\n".join(line for line in lines if line)


def _links(node: Tag) -> list[dict[str, str]]:
    out = []
    for a in node.find_all("a", href=True):
        href = str(a["href"]).strip()
        if not href or href.startswith(("#", "javascript:")):
            continue
        out.append({"text": _WS.sub(" ", a.get_text(" ")).strip(), "href": href})
    return out


def _admonition_kind(cls: str) -> str:
    kinds = [k.lower() for k in re.split(r"[-_ ]+", cls) if _ADMONITION.fullmatch(k)]
    return next((k for k in kinds if k not in ("admonition", "callout", "alert")), kinds[0] if kinds else "note")


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


def _strip_furniture(soup: BeautifulSoup) -> None:
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for tag in soup.find_all("aside"):
        if not _ADMONITION.search(_classes(tag)):
            tag.decompose()
    for tag in soup.find_all("header"):
        # A site header goes; an article header keeps its headings.
        headings = tag.find_all(list(_HEADINGS))
        if not headings:
            tag.decompose()
        else:
            for h in headings:
                tag.insert_before(h.extract())
            tag.decompose()
    for tag in soup.find_all(attrs={"role": _DROP_ROLES}):
        tag.decompose()
    for tag in soup.find_all(True):
        if tag.decomposed or tag.name in ("html", "body", "main", "article"):
            continue
        if _FURNITURE.search(_classes(tag)) and not _ADMONITION.search(" ".join(tag.get("class") or [])):
            tag.decompose()
    for a in soup.find_all("a", href=True):
        if not a.decomposed and str(a["href"]).startswith("#") and a.get_text().strip().lower() in _ANCHOR_TEXT:
            a.decompose()


def _list_text(node: Tag, marker: str, indent: int = 0) -> list[str]:
    """Items of a list, nested lists indented under their item."""
    lines: list[str] = []
    n = 0
    for li in node.find_all("li", recursive=False):
        n += 1
        nested = [c.extract() for c in li.find_all(["ul", "ol"], recursive=False)]
        own = _text(li).replace("\n", " ")
        bullet = f"{n}." if marker == "1." else "-"
        if own:
            lines.append("  " * indent + f"{bullet} {own}")
        for sub in nested:
            lines.extend(_list_text(sub, "1." if sub.name == "ol" else "-", indent + 1))
    return lines


def _carry_spans(spans: dict[int, tuple[int, str]], col: int, cells: list[str]) -> int:
    """Fill the columns a cell from an earlier row spans into; returns the next free column."""
    while col in spans:
        left, text = spans.pop(col)
        cells.append(text)
        if left > 1:
            spans[col] = (left - 1, text)
        col += 1
    return col


def _table(table: Tag, heading_path: tuple[str, ...], caption_hint: str | None) -> Block | None:
    header_rows: list[list[str]] = []
    rows: list[list[str]] = []
    spans: dict[int, tuple[int, str]] = {}  # column -> (rows left, text) for rowspan
    body_rows = table.find_all("tr")
    limits.check_rows(len(body_rows))
    for tr in body_rows:
        if tr.find_parent("table") is not table:
            continue  # a row of a nested table
        cells: list[str] = []
        col = 0
        for cell in tr.find_all(["th", "td"], recursive=False):
            col = _carry_spans(spans, col, cells)
            text = clean_cell(_text(cell))
            colspan = min(int(cell.get("colspan") or 1) if str(cell.get("colspan") or "1").isdigit() else 1, 50)
            rowspan = min(int(cell.get("rowspan") or 1) if str(cell.get("rowspan") or "1").isdigit() else 1, 1000)
            for _ in range(colspan):
                if rowspan > 1:
                    spans[col] = (rowspan - 1, text)
                cells.append(text)
                col += 1
        _carry_spans(spans, col, cells)
        if not any(cells):
            continue
        in_head = tr.find_parent("thead") is not None
        all_th = all(c.name == "th" for c in tr.find_all(["th", "td"], recursive=False))
        if (in_head or all_th) and not rows:
            header_rows.append(cells)
        else:
            rows.append(cells)
    caption_tag = table.find("caption")
    caption = _text(caption_tag).replace("\n", " ") if caption_tag else caption_hint
    return table_block(header_rows, rows, heading_path, caption=caption)


_CAPTION_HINT = re.compile(r"^(table|tabelle|tableau|表)\s*[\d.:\-]", re.I)


def parse_html(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    soup = BeautifulSoup(text, "html.parser")
    limits.check_time("HTML parsed")
    _check_depth(soup)
    title_tag = soup.find("title")
    title = _text(title_tag) if title_tag else ""
    _strip_furniture(soup)
    mains = soup.find_all("main") or soup.find_all(attrs={"role": "main"})
    root = mains[0] if len(mains) == 1 else (soup.body or soup)
    blocks: list[Block] = []
    path: list[tuple[int, str]] = []

    def hp() -> tuple[str, ...]:
        return tuple(t for _, t in path)

    def add(kind: str, content: str, node: Tag | None = None, **meta) -> None:
        if not content:
            return
        if node is not None and kind in (BlockKind.PARAGRAPH, BlockKind.LIST, BlockKind.ADMONITION):
            links = _links(node)
            if links:
                meta["links"] = links
        blocks.append(Block(kind, content, hp(), meta=meta))
        if len(blocks) % 200 == 0:
            limits.check_time(f"block {len(blocks)}")
            limits.check_blocks(len(blocks))

    def walk(node: Tag) -> None:
        loose: list[str] = []
        loose_nodes: list[Tag] = []

        def flush_loose() -> None:
            joined = _WS.sub(" ", "".join(loose)).strip()
            if joined:
                holder = loose_nodes[0] if len(loose_nodes) == 1 else None
                add(BlockKind.PARAGRAPH, joined, holder)
            loose.clear()
            loose_nodes.clear()

        for child in node.children:
            if isinstance(child, NavigableString):
                if type(child) is NavigableString and child.strip():
                    loose.append(str(child))
                elif type(child) is NavigableString:
                    loose.append(" ")
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in _HEADINGS:
                flush_loose()
                level, content = _HEADINGS[name], _text(child).replace("\n", " ")
                if not content:
                    continue
                while path and path[-1][0] >= level:
                    path.pop()
                path.append((level, content))
                blocks.append(Block(BlockKind.HEADING, content, hp(), meta={"level": level}))
            elif name == "pre":
                flush_loose()
                code = child.find("code")
                classes = [*(code.get("class") or [] if code else []), *(child.get("class") or [])]
                lang = next((c.split("-", 1)[1] for c in classes
                             if c.startswith(("language-", "lang-", "highlight-source-", "highlight-"))), None)
                lang = lang or child.get("data-lang") or (code.get("data-lang") if code else None)
                body = child.get_text().strip("\n")
                if body.strip():
                    blocks.append(Block(BlockKind.CODE, body, hp(), meta={"language": lang} if lang else {}))
            elif name == "table":
                flush_loose()
                hint = None
                if blocks and blocks[-1].kind == BlockKind.PARAGRAPH and _CAPTION_HINT.match(blocks[-1].text) \
                        and len(blocks[-1].text) < 200:
                    hint = blocks.pop().text
                block = _table(child, hp(), hint)
                if block is not None:
                    blocks.append(block)
            elif name in ("ul", "ol"):
                flush_loose()
                links = _links(child)
                lines = _list_text(child, "1." if name == "ol" else "-")
                if lines:
                    items = [ln for ln in lines if not ln.startswith(" ")]
                    add(BlockKind.LIST, "\n".join(lines), None, items=items, **({"links": links} if links else {}))
            elif name in ("p", "dt", "dd", "address", "figcaption", "caption"):
                flush_loose()
                add(BlockKind.PARAGRAPH, _text(child).replace("\n", " "), child)
            elif name == "blockquote":
                flush_loose()
                add(BlockKind.ADMONITION, _text(child), child, admonition="quote")
            elif name in _CONTAINERS:
                cls = " ".join(child.get("class") or [])
                if name != "a" and _ADMONITION.search(cls):
                    flush_loose()
                    add(BlockKind.ADMONITION, _text(child), child, admonition=_admonition_kind(cls))
                    continue
                if name in ("span", "font", "a") or (name == "div" and not child.find(list(_BLOCKISH))):
                    loose.append(child.get_text())
                    loose_nodes.append(child)
                    continue
                flush_loose()
                walk(child)
            elif name == "br":
                loose.append("\n")
            elif name in ("img", "hr", "area", "map", "audio", "video", "picture", "source", "track"):
                continue
            else:
                loose.append(child.get_text())
                loose_nodes.append(child)
        flush_loose()

    walk(root)
    blocks = _drop_volatile(blocks)
    h1 = next((b.text for b in blocks if b.kind == BlockKind.HEADING and b.meta.get("level") == 1), None)
    if not title or (h1 and title.startswith(h1)):
        # "Page — Site 4.2" names the site and its version too; the page's own h1 does not.
        title = h1 or next((b.text for b in blocks if b.kind == BlockKind.HEADING), key.rsplit("/", 1)[-1])
    return ParsedDocument(title=title, blocks=tuple(blocks), parser="html", parser_version=VERSION)


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
