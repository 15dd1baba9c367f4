"""A cleaned HTML page read in document order into blocks (:class:`HtmlWalker`).

Headings with their heading path, section numbers and anchors; paragraphs
(loose inline text gathered into one); lists with nested items indented;
tables (caption, header rows, spans, group rows); code with its language;
admonitions; definition lists entry by entry (every block of a description
carries its term).  Page furniture is removed before the walk
(:mod:`workers.parsing.html`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import NamedTuple

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block, BlockMeta, block_meta
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.html_tree import (
    Element,
    Pruning,
    child_tags,
    children,
    class_text,
    find_parent_tag,
    find_tag,
    find_tags,
    get_text,
    has_text,
    iter_tags,
)
from freshindex.workers.parsing.html_tree import classes as class_words
from freshindex.workers.parsing.numbering import split_number
from freshindex.workers.parsing.table import clean_cell, table_block

ADMONITION = re.compile(r"(^|[-_ ])(admonition|warning|note|caution|danger|important|tip|hint|alert|callout|"
                         r"attention|notice)([-_ ]|$)", re.I)
HEADINGS = {f"h{i}": i for i in range(1, 7)}
_BLOCKISH = {"p", "div", "li", "ul", "ol", "table", "tr", "pre", "blockquote", "section", "article", "dd", "dt",
             "h1", "h2", "h3", "h4", "h5", "h6", "figure", "figcaption", "details", "summary", "main", "aside"}
_CONTAINERS = {"body", "main", "article", "section", "div", "span", "center", "details", "figure", "html", "dl",
               "aside", "header", "hgroup", "summary", "font", "a"}
_BREAKS = (*_BLOCKISH, "br")
_WS = re.compile(r"[ \t\r\f\v\u00a0]+")


def _gather(node: Element, parts: list[str]) -> None:
    if node.text:
        parts.append(node.text)
    for c in node:
        if isinstance(c.tag, str):
            if c.tag in _BREAKS:
                parts.append("\n")
            _gather(c, parts)
        if c.tail:
            parts.append(c.tail)


def inline_text(node: Element) -> str:
    """Inline text of ``node``: inline tags joined as written, block tags on new lines."""
    if next(node.iterdescendants(*_BREAKS), None) is None:
        parts = list(node.itertext())
    else:
        parts = []
        _gather(node, parts)
    lines = (_WS.sub(" ", line.replace("\n", " ")).strip() for line in "".join(parts).split("\n"))
    return "\n".join(line for line in lines if line)


def _links(node: Element) -> list[dict[str, str]]:
    out = []
    for a in iter_tags(node, "a", attr="href"):
        href = str(a.get("href")).strip()
        if not href or href.startswith(("#", "javascript:")):
            continue
        out.append({"text": _WS.sub(" ", get_text(a, " ")).strip(), "href": href})
    return out


def _admonition_kind(cls: str) -> str:
    kinds = [k.lower() for k in re.split(r"[-_ ]+", cls) if ADMONITION.fullmatch(k)]
    return next((k for k in kinds if k not in ("admonition", "callout", "alert")), kinds[0] if kinds else "note")


def _list_text(node: Element, marker: str, indent: int = 0) -> list[str]:
    """Items of a list, nested lists indented under their item."""
    lines: list[str] = []
    n = 0
    for li in find_tags(node, "li", recursive=False):
        n += 1
        nested = [Pruning.extract(c) for c in find_tags(li, ("ul", "ol"), recursive=False)]
        own = inline_text(li).replace("\n", " ")
        bullet = f"{n}." if marker == "1." else "-"
        if own:
            lines.append("  " * indent + f"{bullet} {own}")
        for sub in nested:
            lines.extend(_list_text(sub, "1." if sub.tag == "ol" else "-", indent + 1))
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


def _span(cell: Element, attr: str, cap: int) -> int:
    raw = str(cell.get(attr) or "1").strip()
    return min(int(raw), cap) if raw.isdigit() and int(raw) > 0 else 1


def _table(table: Element, heading_path: tuple[str, ...], caption_hint: str | None) -> Block | None:
    """A table block; a row of one cell spanning every column ("Class 01 — Warning")
    is a group label, carried in a leading ``group`` column on the rows below it."""
    header_rows: list[list[str]] = []
    raw: list[tuple[list[str], bool, bool]] = []  # cells, header-like, one cell spanning the row
    spans: dict[int, tuple[int, str]] = {}  # column -> (rows left, text) for rowspan
    body_rows = find_tags(table, "tr")
    limits.check_rows(len(body_rows))
    for tr in body_rows:
        if find_parent_tag(tr, "table") is not table:
            continue  # a row of a nested table
        cells: list[str] = []
        col = 0
        tags = find_tags(tr, ("th", "td"), recursive=False)
        for cell in tags:
            col = _carry_spans(spans, col, cells)
            text = clean_cell(inline_text(cell))
            colspan, rowspan = _span(cell, "colspan", 50), _span(cell, "rowspan", 1000)
            for _ in range(colspan):
                if rowspan > 1:
                    spans[col] = (rowspan - 1, text)
                cells.append(text)
                col += 1
        _carry_spans(spans, col, cells)
        if not any(cells):
            continue
        in_head = find_parent_tag(tr, "thead") is not None
        all_th = all(c.tag == "th" for c in tags)
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
    caption_tag = find_tag(table, "caption")
    caption = inline_text(caption_tag).replace("\n", " ") if caption_tag is not None else caption_hint
    if not caption and table.get("summary") and not str(table.get("summary")).lower().startswith(("navigation", "layout")):
        caption = " ".join(str(table.get("summary")).split())
    return table_block(header_rows, rows, heading_path, caption=caption)


#: "Table 3.", "Table F.1.", "Table A-1", "Table IV:", "Tabelle 2", "表 3".
_CAPTION_HINT = re.compile(r"^(table|tabelle|tableau|tabla|tabella|tabel|表)\s*"
                           r"([A-Z]{1,3}|[IVXLC]+|\d+)([.\-–:]\s?[\dA-Z]+)*[.:\-–)]?(\s|$)", re.I)
#: DocBook's generated index-term anchors and "id-1.6.7", Sphinx's "id12": ids that move between releases.
_GENERATED_ID = re.compile(r"^(id[-_]?[\d.]+|idm?\d+|index-\d+|_?id\d+)$", re.I)


#: An id usable in a citation link: no whitespace, quotes, angle brackets or control characters.
_SAFE_ID = re.compile(r"[^\s\"'<>`\x00-\x1f\x7f]{1,200}")


def own_id(tag: Element) -> str | None:
    value = tag.get("id")
    if not value or not isinstance(value, str):
        return None
    value = value.strip()
    return value if _SAFE_ID.fullmatch(value) else None


def _inner_id(tag: Element) -> str | None:
    """An id on the element or inside it (``<dt><a id="GUC-WORK-MEM"></a>...``), stable ones first."""
    ids = [i for i in [own_id(tag), *(own_id(t) for t in iter_tags(tag, attr="id"))] if i]
    return next((i for i in ids if not _GENERATED_ID.match(i)), ids[0] if ids else None)


#: DocBook's back-of-book index (``<div class="index">``), whose <dt>s are separate entries.
_INDEX_CLASS = re.compile(r"^(index|indexdiv|genindex)$")
#: Sphinx's signature parts that name the object: ``<span class="sig-prename descclassname">``, ``sig-name descname``.
_SIG_NAME = re.compile(r"(^|\s)(sig-prename|descclassname|sig-name|descname)(\s|$)")
#: A term name longer than this is cut at a word boundary (a name, not a sentence).
MAX_TERM_NAME = 80


def term_name(dts: list[Element]) -> str:
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
        sig = [t for t in iter_tags(dt) if _SIG_NAME.search(class_text(t))
               and not any(_SIG_NAME.search(class_text(p)) for p in t.iterancestors() if p is not dt)]
        if sig:
            names.append("".join(get_text(t) for t in sig).strip())
            continue
        spans = find_tags(dt, "span", attr="class", values=("term",)) or [dt]
        for span in spans:
            text = " ".join(inline_text(span).split())
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



class _Entry(NamedTuple):
    """A definition-list entry whose ``<dd>`` is empty (Sphinx writes ".. attribute:: X"
    then the text after it): the blocks that follow at ``depth``, up to the next
    heading or list, are its description."""

    term: str
    entry: int
    anchor: str | None
    depth: int  # walk depth (length of the id stack) the entry was read at
    name: str


class HtmlWalker:
    """One walk of a cleaned page into :attr:`blocks`, in document order.

    The state of the walk is kept here: the heading path, the ids of the
    elements the walk is inside, the definition-list entry still open and the
    loose inline text gathered into the next paragraph.  One method reads one
    kind of element.  It is not reusable: one walker, one page.
    """

    def __init__(self, title: str) -> None:
        self.title = title
        self.blocks: list[Block] = []
        #: (level, text, number, anchor id, depth of the id stack when the heading was read)
        self.path: list[tuple[float, str, str, str | None, int]] = []
        self.ids: list[str | None] = []  # ids of the elements the walk is inside, outermost first
        self.pending: list[str] = []  # ids of empty anchors (``<span id=...></span>``) just before a heading
        self.title_level: int | None = None  # level of the heading that is the page's title, once seen
        self.entries = 0
        self.open_entry: _Entry | None = None
        self.loose: list[str] = []  # inline text between block elements, one paragraph when flushed
        self.loose_nodes: list[Element] = []

    # blocks --------------------------------------------------------------

    def hp(self) -> tuple[str, ...]:
        return tuple(t for _, t, _, _, _ in self.path)

    def anchor(self, node: Element | None) -> str | None:
        own = own_id(node) if node is not None else None
        if own:
            return own
        depth = max((i for i, v in enumerate(self.ids) if v), default=-1)
        heading = next(((a, d) for _, _, _, a, d in reversed(self.path) if a), None)
        if heading is not None and heading[1] > depth:
            return heading[0]
        return self.ids[depth] if depth >= 0 else (heading[0] if heading else None)

    def emit(self, kind: BlockKind, content: str, node: Element | None, meta: dict | BlockMeta) -> None:
        entry = self.open_entry
        if entry is not None and (kind == BlockKind.HEADING or len(self.ids) < entry.depth):
            self.open_entry = entry = None
        if entry is not None and "term" not in meta:
            meta["term"], meta["entry"], meta["term_name"] = entry.term, entry.entry, entry.name
            if entry.anchor and (node is None or not own_id(node)):
                meta["anchor_id"] = entry.anchor
        numbers = tuple(n for _, _, n, _, _ in self.path)
        if any(numbers):
            meta["heading_numbers"] = numbers
        where = meta.get("anchor_id") or self.anchor(node)
        if where:
            meta["anchor_id"] = where
        if kind != BlockKind.HEADING:
            self.pending.clear()
        self.blocks.append(Block(kind, content, self.hp(), meta=block_meta(meta)))
        if len(self.blocks) % 200 == 0:
            limits.check_time(f"block {len(self.blocks)}")
            limits.check_blocks(len(self.blocks))

    def add(self, kind: BlockKind, content: str, node: Element | None = None, **meta) -> None:
        if not content:
            return
        if node is not None and kind in (BlockKind.PARAGRAPH, BlockKind.LIST, BlockKind.ADMONITION):
            links = _links(node)
            if links:
                meta["links"] = links
        self.emit(kind, content, node, meta)

    def flush_loose(self) -> None:
        joined = _WS.sub(" ", "".join(self.loose)).strip()
        if joined:
            holder = self.loose_nodes[0] if len(self.loose_nodes) == 1 else None
            self.add(BlockKind.PARAGRAPH, joined, holder)
        self.loose.clear()
        self.loose_nodes.clear()

    # the walk ------------------------------------------------------------

    def walk(self, node: Element) -> None:
        """Read the children of ``node``, with its own loose text and its id on the id stack."""
        self.ids.append(own_id(node))
        outer = self.loose, self.loose_nodes
        self.loose, self.loose_nodes = [], []
        try:
            for child in children(node):
                self._child(child)
            self.flush_loose()
        finally:
            self.ids.pop()
            self.loose, self.loose_nodes = outer

    def _child(self, child: Element | str) -> None:
        if isinstance(child, str):
            self.loose.append(child if child.strip() else " ")
            return
        name = child.tag
        if own_id(child) and name in ("a", "span") and not has_text(child):
            self.pending.append(str(own_id(child)))
            return
        if name in HEADINGS:
            self.flush_loose()
            self.heading(child)
        elif name == "pre":
            self.flush_loose()
            self.code(child)
        elif name == "table":
            self.flush_loose()
            self.table(child)
        elif name in ("ul", "ol"):
            self.flush_loose()
            self.item_list(child)
        elif name == "dl":
            self.flush_loose()
            self.open_entry = None
            self.definitions(child)
        elif name in ("p", "dt", "dd", "address", "figcaption", "caption"):
            self.flush_loose()
            self.add(BlockKind.PARAGRAPH, inline_text(child).replace("\n", " "), child)
        elif name == "blockquote":
            self.flush_loose()
            self.add(BlockKind.ADMONITION, inline_text(child), child, admonition="quote")
        elif name in _CONTAINERS:
            self.container(child)
        elif name == "br":
            self.loose.append("\n")
        elif name in ("img", "hr", "area", "map", "audio", "video", "picture", "source", "track"):
            return
        else:
            self.loose.append(get_text(child))
            self.loose_nodes.append(child)

    def container(self, child: Element) -> None:
        """A ``<div>``, ``<section>``, ``<span>``...: an admonition, inline text, or walked into."""
        name = child.tag
        cls = class_text(child)
        if name != "a" and ADMONITION.search(cls):
            self.flush_loose()
            self.add(BlockKind.ADMONITION, inline_text(child), child, admonition=_admonition_kind(cls))
            return
        if name in ("span", "font", "a") or (name == "div" and find_tag(child, _BLOCKISH) is None):
            self.loose.append(get_text(child))
            self.loose_nodes.append(child)
            return
        self.flush_loose()
        self.walk(child)

    # one method per element kind -------------------------------------------

    def heading(self, child: Element) -> None:
        level, content = HEADINGS[str(child.tag)], " ".join(inline_text(child).split())
        if not content:
            return
        number, content = split_number(content)
        pending = self.pending
        stable = next((i for i in reversed(pending) if not _GENERATED_ID.match(i)), None)
        where = str(child.get("data-fi-anchor") or "") or _inner_id(child) or stable \
            or (pending[-1] if pending and not any(self.ids) else None)
        pending.clear()
        eff: float = level
        if self.title_level is None and content.casefold() == self.title.casefold():
            self.title_level = level
        elif self.title_level is not None and level <= self.title_level:
            # Reference pages put "Synopsis", "Options" at the title's own level:
            # they belong under it.
            eff = self.title_level + 0.5
        while self.path and self.path[-1][0] >= eff:
            self.path.pop()
        self.path.append((eff, content, number, where, len(self.ids)))
        self.emit(BlockKind.HEADING, content, None, {"level": level})

    def code(self, child: Element) -> None:
        code = find_tag(child, "code")
        classes = [*(class_words(code) if code is not None else []), *class_words(child)]
        lang = next((c.split("-", 1)[1] for c in classes
                     if c.startswith(("language-", "lang-", "highlight-source-", "highlight-"))), None)
        lang = lang or child.get("data-lang") or (code.get("data-lang") if code is not None else None)
        body = get_text(child).strip("\n")
        if body.strip():
            self.emit(BlockKind.CODE, body, child, {"language": lang} if lang else {})

    def table(self, child: Element) -> None:
        blocks = self.blocks
        hint = None
        if blocks and blocks[-1].kind == BlockKind.PARAGRAPH and _CAPTION_HINT.match(blocks[-1].text) \
                and len(blocks[-1].text) < 200:
            hint = blocks.pop().text
        block = _table(child, self.hp(), hint)
        if block is not None:
            self.emit(block.kind, block.text, child, block.meta)

    def item_list(self, child: Element) -> None:
        links = _links(child)
        lines = _list_text(child, "1." if child.tag == "ol" else "-")
        if lines:
            items = [ln for ln in lines if not ln.startswith(" ")]
            self.add(BlockKind.LIST, "\n".join(lines), child, items=items, **({"links": links} if links else {}))

    def definitions(self, dl: Element) -> None:
        """A definition or variable list, entry by entry: every block of an entry's
        description carries ``meta["term"]`` and ``meta["entry"]``, the first one
        starts with the term."""
        terms: list[Element] = []
        dds: list[Element] = []
        flat: list[Element] = []
        for c in child_tags(dl):  # HTML allows <div> wrappers around a dt/dd group
            flat.extend(child_tags(c) if c.tag == "div" else [c])
        index = any(any(_INDEX_CLASS.search(w) for w in class_words(p)) for p in dl.iterancestors())
        for n, c in enumerate(flat):
            if c.tag == "dt":
                if dds:
                    self._entry(terms, dds)
                    dds = []
                if index and (n + 1 == len(flat) or flat[n + 1].tag == "dt"):
                    # A back-of-book index: each term is a line of its own (its links say
                    # where it is explained); only the one a <dd> follows has subentries.
                    self.add(BlockKind.PARAGRAPH, " ".join(inline_text(c).split()), c)
                    continue
                terms.append(c)
            elif c.tag == "dd":
                dds.append(c)
        self._entry(terms, dds)

    def _entry(self, terms: list[Element], dds: list[Element]) -> None:
        """One entry: its terms and their descriptions (``terms`` is emptied)."""
        term = " / ".join(t for t in (" ".join(inline_text(x).split()) for x in terms) if t)
        if not term:
            terms.clear()
            for dd in dds:
                self.walk(dd)
            return
        self.entries += 1
        self.open_entry = None
        entry, term_id = self.entries, next((i for i in (_inner_id(t) for t in terms) if i), None)
        name = term_name(terms) or term
        blocks = self.blocks
        self.ids.append(term_id)
        start = len(blocks)
        for dd in dds:
            self.walk(dd)
        self.ids.pop()
        own = blocks[start:]
        for b in own:
            if "term" not in b.meta:  # an entry of a nested list keeps its own term
                b.meta["term"], b.meta["entry"], b.meta["term_name"] = term, entry, name
        first = own[0] if own else None
        if first is not None and first.kind == BlockKind.PARAGRAPH and first.meta["entry"] == entry:
            if not first.text.startswith(term):
                blocks[start] = replace(first, text=f"{term}{'' if term.endswith(':') else ':'} {first.text}")
        else:
            self.ids.append(term_id)
            self.emit(BlockKind.PARAGRAPH, term, None, {"term": term, "entry": entry, "term_name": name})
            self.ids.pop()
            blocks.insert(start, blocks.pop())
            if not own:
                self.open_entry = _Entry(term, entry, term_id, len(self.ids), name)
        terms.clear()
