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
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from bs4 import BeautifulSoup, CData, NavigableString, Tag

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, BlockMeta, ParsedDocument, block_meta
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.boilerplate import is_prev_next, is_volatile
from freshindex.workers.parsing.decode import decode_text
from freshindex.workers.parsing.fingerprint import content_fingerprint
from freshindex.workers.parsing.furniture import is_removed, strip_structural
from freshindex.workers.parsing.numbering import page_title, split_number
from freshindex.workers.parsing.table import clean_cell, table_block

VERSION = "html-4"

_DROP_TAGS = ("script", "style", "noscript", "nav", "footer", "form", "template", "svg", "iframe", "button",
              "select", "input", "textarea", "link", "meta", "object", "embed", "canvas", "dialog")
_DROP_ROLES = ["navigation", "banner", "contentinfo", "search", "complementary", "doc-pagelist"]
#: find_all's attrs for the permalink mark (typed: bs4 wants a dict of its own value type)
_ANCHOR_MARK: dict[str, Any] = {"data-fi-anchor": True}
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
        elif isinstance(el, Tag) and (el.name == "br" or el.name in _BLOCKISH):
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
    if tag.name in _HEADINGS or tag.name in ("dt", "dd") or "." in value:
        return False
    word = m.group(2).lower().rstrip("s")
    head = tag.find(list(_HEADINGS))
    own = {w.lower().rstrip("s") for w in _ID_WORD.findall(head.get_text(" "))} if head is not None else set()
    return word not in own


def _strip_furniture(soup: BeautifulSoup) -> None:
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    # find_all lists nested tags too: one removed with its parent (Sphinx's footnote-list <aside>
    # holds footnote <aside>s) must be skipped, not read.
    for tag in soup.find_all("aside"):
        if not is_removed(tag) and not _ADMONITION.search(_classes(tag)):
            tag.decompose()
    for tag in soup.find_all("header"):
        if is_removed(tag):
            continue
        # A site header goes; an article header keeps its headings.
        headings = tag.find_all(list(_HEADINGS))
        if not headings:
            tag.decompose()
        else:
            for h in headings:
                tag.insert_before(h.extract())
            tag.decompose()
    for tag in soup.find_all(role=_DROP_ROLES):
        if not is_removed(tag):
            tag.decompose()
    for tag in soup.find_all(True):
        if is_removed(tag) or tag.name in ("html", "body", "main", "article"):
            continue
        if _is_named_furniture(tag) and not _ADMONITION.search(" ".join(tag.get("class") or [])):
            if tag.name == "a" and tag.find_parent(list(_HEADINGS)) and tag.get_text().strip().lower() not in _ANCHOR_TEXT:
                tag.unwrap()  # Sphinx's "toc-backref" link is the heading's own text
            else:
                tag.decompose()
    for a in soup.find_all("a", href=True):
        if not is_removed(a) and str(a["href"]).startswith("#") and a.get_text().strip().lower() in _ANCHOR_TEXT:
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


def _span(cell: Tag, attr: str, cap: int) -> int:
    raw = str(cell.get(attr) or "1").strip()
    return min(int(raw), cap) if raw.isdigit() and int(raw) > 0 else 1


def _table(table: Tag, heading_path: tuple[str, ...], caption_hint: str | None) -> Block | None:
    """A table block; a row of one cell spanning every column ("Class 01 — Warning")
    is a group label, carried in a leading ``group`` column on the rows below it."""
    header_rows: list[list[str]] = []
    raw: list[tuple[list[str], bool, bool]] = []  # cells, header-like, one cell spanning the row
    spans: dict[int, tuple[int, str]] = {}  # column -> (rows left, text) for rowspan
    body_rows = table.find_all("tr")
    limits.check_rows(len(body_rows))
    for tr in body_rows:
        if tr.find_parent("table") is not table:
            continue  # a row of a nested table
        cells: list[str] = []
        col = 0
        tags = tr.find_all(["th", "td"], recursive=False)
        for cell in tags:
            col = _carry_spans(spans, col, cells)
            text = clean_cell(_text(cell))
            colspan, rowspan = _span(cell, "colspan", 50), _span(cell, "rowspan", 1000)
            for _ in range(colspan):
                if rowspan > 1:
                    spans[col] = (rowspan - 1, text)
                cells.append(text)
                col += 1
        _carry_spans(spans, col, cells)
        if not any(cells):
            continue
        in_head = tr.find_parent("thead") is not None
        all_th = all(c.name == "th" for c in tags)
        single = len(tags) == 1 and _span(tags[0], "colspan", 50) > 1
        raw.append((cells, in_head or all_th, single))
    width = max((len(c) for c, _, _ in raw), default=0)
    rows: list[list[str]] = []
    labels: list[str] = []
    group = ""
    for cells, head_like, single in raw:
        if head_like and not rows and not single:
            header_rows.append(cells)
        elif single and width > 1 and len(cells) >= width and (header_rows or rows):
            group = cells[0]  # a group row: the label of the rows below it
        else:
            rows.append(cells)
            labels.append(group)
    if any(labels):
        header_rows = [["group" if i == 0 else "", *r] for i, r in enumerate(header_rows)] or [["group"]]
        rows = [[label, *r] for label, r in zip(labels, rows, strict=True)]
    caption_tag = table.find("caption")
    caption = _text(caption_tag).replace("\n", " ") if caption_tag else caption_hint
    if not caption and table.get("summary") and not str(table.get("summary")).lower().startswith(("navigation", "layout")):
        caption = " ".join(str(table["summary"]).split())
    return table_block(header_rows, rows, heading_path, caption=caption)


#: "Table 3.", "Table F.1.", "Table A-1", "Table IV:", "Tabelle 2", "表 3".
_CAPTION_HINT = re.compile(r"^(table|tabelle|tableau|tabla|tabella|tabel|表)\s*"
                           r"([A-Z]{1,3}|[IVXLC]+|\d+)([.\-–:]\s?[\dA-Z]+)*[.:\-–)]?(\s|$)", re.I)
#: DocBook's generated index-term anchors and "id-1.6.7", Sphinx's "id12": ids that move between releases.
_GENERATED_ID = re.compile(r"^(id[-_]?[\d.]+|idm?\d+|index-\d+|_?id\d+)$", re.I)


#: An id usable in a citation link: no whitespace, quotes, angle brackets or control characters.
_SAFE_ID = re.compile(r"[^\s\"'<>`\x00-\x1f\x7f]{1,200}")


def _own_id(tag: Tag) -> str | None:
    value = tag.get("id")
    if not value or not isinstance(value, str):
        return None
    value = value.strip()
    return value if _SAFE_ID.fullmatch(value) else None


def _inner_id(tag: Tag) -> str | None:
    """An id on the element or inside it (``<dt><a id="GUC-WORK-MEM"></a>...``), stable ones first."""
    ids = [i for i in [_own_id(tag), *(_own_id(t) for t in tag.find_all(id=True))] if i]
    return next((i for i in ids if not _GENERATED_ID.match(i)), ids[0] if ids else None)


#: DocBook's back-of-book index (``<div class="index">``), whose <dt>s are separate entries.
_INDEX_CLASS = re.compile(r"^(index|indexdiv|genindex)$")
#: Sphinx's signature parts that name the object: ``<span class="sig-prename descclassname">``, ``sig-name descname``.
_SIG_NAME = re.compile(r"(^|\s)(sig-prename|descclassname|sig-name|descname)(\s|$)")
#: A term name longer than this is cut at a word boundary (a name, not a sentence).
MAX_TERM_NAME = 80


def term_name(dts: list[Tag]) -> str:
    """The name a reader searches for in an entry's terms: ``HttpResponse.set_cookie`` for
    Sphinx's ``HttpResponse.set_cookie(key, value='', max_age=None, ...)[source]``,
    ``verify_heapam`` for DocBook's ``verify_heapam(relation regclass, ...) returns setof record``,
    ``-D directory / --pgdata=directory`` for an option with two spellings.

    Sphinx marks the name in its signature (``descclassname`` + ``descname``);
    other generators get the text of each term (each ``<span class="term">``
    of a DocBook ``<dt>``) up to its parameter list.  It is repeated where the
    whole term would crowd the chunk; it is not a parsed identifier."""
    names: list[str] = []
    for dt in dts:
        sig = [t for t in dt.find_all(True) if _SIG_NAME.search(" ".join(t.get("class") or []))
               and not any(_SIG_NAME.search(" ".join(p.get("class") or [])) for p in t.parents if p is not dt)]
        if sig:
            names.append("".join(t.get_text() for t in sig).strip())
            continue
        spans = dt.find_all("span", class_="term") or [dt]
        for span in spans:
            text = " ".join(_text(span).split())
            names.append(text.split("(", 1)[0].strip() or text)
    unique = list(dict.fromkeys(n for n in names if n))  # DocBook repeats a term spelt two ways
    name = unique[0] if unique else ""
    for more in unique[1:]:  # whole names only, while they fit
        if len(name) + 3 + len(more) > MAX_TERM_NAME:
            break
        name = f"{name} / {more}"
    if len(name) > MAX_TERM_NAME:
        cut = name.rfind(" ", 0, MAX_TERM_NAME)
        name = name[: cut if cut > MAX_TERM_NAME // 2 else MAX_TERM_NAME].rstrip(" /,")
    return name


def _mark_permalinks(soup: BeautifulSoup) -> None:
    """Remember, on each heading, the id its permalink (``¶``) points to: the
    generator's own anchor for it (removed with the furniture afterwards)."""
    for tag in soup.find_all(name=None, attrs=_ANCHOR_MARK):  # bs4's overload wants the name given
        del tag["data-fi-anchor"]  # only this function may set it
    ids = {i for t in soup.find_all(id=True) if (i := _own_id(t))}
    for h in soup.find_all(list(_HEADINGS)):
        for a in h.find_all("a", href=True):
            href = str(a["href"])
            if href.startswith("#") and href[1:] in ids and a.get_text().strip().lower() in _ANCHOR_TEXT:
                h["data-fi-anchor"] = href[1:]
                break


def parse_html(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    soup = BeautifulSoup(text, "html.parser")
    limits.check_time("HTML parsed")
    _check_depth(soup)
    title_tag = soup.find("title")
    raw_title = _text(title_tag) if title_tag else ""
    _mark_permalinks(soup)
    _strip_furniture(soup)
    strip_structural(soup)
    mains = soup.find_all("main") or soup.find_all(role="main")
    root = mains[0] if len(mains) == 1 else (soup.body or soup)
    heading_texts = [" ".join(_text(h).split()) for h in root.find_all(list(_HEADINGS), limit=8)]
    title_number, title = page_title(raw_title, heading_texts)
    blocks: list[Block] = []
    # (level, text, number, anchor id, depth of the id stack when the heading was read)
    path: list[tuple[float, str, str, str | None, int]] = []
    ids: list[str | None] = []  # ids of the elements the walk is inside, outermost first
    pending: list[str] = []  # ids of empty anchors (``<span id=...></span>``) just before a heading
    title_level: list[int] = []  # level of the heading that is the page's title, once seen
    entries = [0]
    # An entry whose <dd> is empty (Sphinx writes ".. attribute:: X" then the
    # text after it): (term, entry, id, walk depth); the blocks that follow at
    # that depth, up to the next heading or list, are its description.
    open_entry: list[tuple[str, int, str | None, int, str]] = []

    def hp() -> tuple[str, ...]:
        return tuple(t for _, t, _, _, _ in path)

    def anchor(node: Tag | None) -> str | None:
        own = _own_id(node) if node is not None else None
        if own:
            return own
        depth = max((i for i, v in enumerate(ids) if v), default=-1)
        heading = next(((a, d) for _, _, _, a, d in reversed(path) if a), None)
        if heading is not None and heading[1] > depth:
            return heading[0]
        return ids[depth] if depth >= 0 else (heading[0] if heading else None)

    def emit(kind: BlockKind, content: str, node: Tag | None, meta: dict | BlockMeta) -> None:
        if open_entry and (kind == BlockKind.HEADING or len(ids) < open_entry[0][3]):
            open_entry.clear()
        if open_entry and "term" not in meta:
            meta["term"], meta["entry"], meta["term_name"] = open_entry[0][0], open_entry[0][1], open_entry[0][4]
            if open_entry[0][2] and (node is None or not _own_id(node)):
                meta["anchor_id"] = open_entry[0][2]
        numbers = tuple(n for _, _, n, _, _ in path)
        if any(numbers):
            meta["heading_numbers"] = numbers
        where = meta.get("anchor_id") or anchor(node)
        if where:
            meta["anchor_id"] = where
        if kind != BlockKind.HEADING:
            pending.clear()
        blocks.append(Block(kind, content, hp(), meta=block_meta(meta)))
        if len(blocks) % 200 == 0:
            limits.check_time(f"block {len(blocks)}")
            limits.check_blocks(len(blocks))

    def add(kind: BlockKind, content: str, node: Tag | None = None, **meta) -> None:
        if not content:
            return
        if node is not None and kind in (BlockKind.PARAGRAPH, BlockKind.LIST, BlockKind.ADMONITION):
            links = _links(node)
            if links:
                meta["links"] = links
        emit(kind, content, node, meta)

    def heading(child: Tag) -> None:
        level, content = _HEADINGS[child.name], " ".join(_text(child).split())
        if not content:
            return
        number, content = split_number(content)
        stable = next((i for i in reversed(pending) if not _GENERATED_ID.match(i)), None)
        where = str(child.get("data-fi-anchor") or "") or _inner_id(child) or stable \
            or (pending[-1] if pending and not any(ids) else None)
        pending.clear()
        eff: float = level
        if not title_level and content.casefold() == title.casefold():
            title_level.append(level)
        elif title_level and level <= title_level[0]:
            # Reference pages put "Synopsis", "Options" at the title's own level:
            # they belong under it.
            eff = title_level[0] + 0.5
        while path and path[-1][0] >= eff:
            path.pop()
        path.append((eff, content, number, where, len(ids)))
        emit(BlockKind.HEADING, content, None, {"level": level})

    def definitions(dl: Tag) -> None:
        """A definition or variable list, entry by entry: every block of an entry's
        description carries ``meta["term"]`` and ``meta["entry"]``, the first one
        starts with the term."""
        terms: list[Tag] = []

        def close(dds: list[Tag]) -> None:
            if not terms:
                for dd in dds:
                    walk(dd)
                return
            term = " / ".join(t for t in (" ".join(_text(x).split()) for x in terms) if t)
            if not term:
                terms.clear()
                for dd in dds:
                    walk(dd)
                return
            entries[0] += 1
            open_entry.clear()
            entry, term_id = entries[0], next((i for i in (_inner_id(t) for t in terms) if i), None)
            name = term_name(terms) or term
            ids.append(term_id)
            start = len(blocks)
            for dd in dds:
                walk(dd)
            ids.pop()
            own = blocks[start:]
            for b in own:
                if "term" not in b.meta:  # an entry of a nested list keeps its own term
                    b.meta["term"], b.meta["entry"], b.meta["term_name"] = term, entry, name
            first = own[0] if own else None
            if first is not None and first.kind == BlockKind.PARAGRAPH and first.meta["entry"] == entry:
                if not first.text.startswith(term):
                    blocks[start] = replace(first, text=f"{term}{'' if term.endswith(':') else ':'} {first.text}")
            else:
                ids.append(term_id)
                emit(BlockKind.PARAGRAPH, term, None, {"term": term, "entry": entry, "term_name": name})
                ids.pop()
                blocks.insert(start, blocks.pop())
                if not own:
                    open_entry.append((term, entry, term_id, len(ids), name))
            terms.clear()

        dds: list[Tag] = []
        items = [c for c in dl.children if isinstance(c, Tag)]
        flat: list[Tag] = []
        for c in items:  # HTML allows <div> wrappers around a dt/dd group
            flat.extend([x for x in c.children if isinstance(x, Tag)] if c.name == "div" else [c])
        index = dl.find_parent(class_=_INDEX_CLASS) is not None
        for n, c in enumerate(flat):
            if c.name == "dt":
                if dds:
                    close(dds)
                    dds = []
                if index and (n + 1 == len(flat) or flat[n + 1].name == "dt"):
                    # A back-of-book index: each term is a line of its own (its links say
                    # where it is explained); only the one a <dd> follows has subentries.
                    add(BlockKind.PARAGRAPH, " ".join(_text(c).split()), c)
                    continue
                terms.append(c)
            elif c.name == "dd":
                dds.append(c)
        close(dds)

    def walk(node: Tag) -> None:
        ids.append(_own_id(node))
        try:
            _walk(node)
        finally:
            ids.pop()

    def _walk(node: Tag) -> None:
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
            if _own_id(child) and name in ("a", "span") and not child.get_text(strip=True):
                pending.append(str(_own_id(child)))
                continue
            if name in _HEADINGS:
                flush_loose()
                heading(child)
            elif name == "pre":
                flush_loose()
                code = child.find("code")
                classes = [*(code.get("class") or [] if code else []), *(child.get("class") or [])]
                lang = next((c.split("-", 1)[1] for c in classes
                             if c.startswith(("language-", "lang-", "highlight-source-", "highlight-"))), None)
                lang = lang or child.get("data-lang") or (code.get("data-lang") if code else None)
                body = child.get_text().strip("\n")
                if body.strip():
                    emit(BlockKind.CODE, body, child, {"language": lang} if lang else {})
            elif name == "table":
                flush_loose()
                hint = None
                if blocks and blocks[-1].kind == BlockKind.PARAGRAPH and _CAPTION_HINT.match(blocks[-1].text) \
                        and len(blocks[-1].text) < 200:
                    hint = blocks.pop().text
                block = _table(child, hp(), hint)
                if block is not None:
                    emit(block.kind, block.text, child, block.meta)
            elif name in ("ul", "ol"):
                flush_loose()
                links = _links(child)
                lines = _list_text(child, "1." if name == "ol" else "-")
                if lines:
                    items = [ln for ln in lines if not ln.startswith(" ")]
                    add(BlockKind.LIST, "\n".join(lines), child, items=items, **({"links": links} if links else {}))
            elif name == "dl":
                flush_loose()
                open_entry.clear()
                definitions(child)
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
