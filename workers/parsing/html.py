"""HTML to blocks, through beautifulsoup4.

Page furniture (navigation, headers and footers, scripts, styles, forms,
breadcrumbs) is dropped before the walk; what remains is read in document
order into headings, paragraphs, lists, tables and code.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString, Tag

from core.types import Block, ParsedDocument
from workers.parsing.decode import decode_text

VERSION = "html-1"

_DROP_TAGS = ("script", "style", "noscript", "nav", "header", "footer", "aside", "form", "template", "svg", "iframe")
_DROP_CLASS = re.compile(r"(^|[-_ ])(breadcrumbs?|navbar|nav|sidebar|footer|header|toc|pagination|prev-next|"
                         r"version-banner|banner|skip-link|cookie)([-_ ]|$)", re.I)
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_CONTAINERS = {"body", "main", "article", "section", "div", "span", "center", "details", "figure", "html", "dl"}
_WS = re.compile(r"[ \t\r\f\v]+")


def _text(node: Tag) -> str:
    return "\n".join(_WS.sub(" ", line).strip() for line in node.get_text(" ").splitlines()).strip()


def _table_markdown(table: Tag) -> tuple[str, dict]:
    rows = []
    for tr in table.find_all("tr"):
        cells = [_WS.sub(" ", c.get_text(" ")).strip().replace("|", "\\|") for c in tr.find_all(["th", "td"])]
        if cells:
            rows.append(cells)
    if not rows:
        return "", {}
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    header, body = rows[0], rows[1:]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    caption = table.find("caption")
    meta = {"columns": header}
    if caption:
        meta["caption"] = _text(caption)
    return "\n".join(lines), meta


def parse_html(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    soup = BeautifulSoup(text, "html.parser")
    title_tag = soup.find("title")
    title = _text(title_tag) if title_tag else ""
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    for tag in soup.find_all(attrs={"role": ["navigation", "banner", "contentinfo"]}):
        tag.decompose()
    for tag in soup.find_all(class_=_DROP_CLASS):
        if tag.name not in ("body", "html", "main", "article"):
            tag.decompose()
    root = soup.body or soup
    blocks: list[Block] = []
    path: list[tuple[int, str]] = []

    def hp() -> tuple[str, ...]:
        return tuple(t for _, t in path)

    def walk(node: Tag) -> None:
        loose: list[str] = []

        def flush_loose() -> None:
            joined = _WS.sub(" ", " ".join(loose)).strip()
            if joined:
                blocks.append(Block("paragraph", joined, hp()))
            loose.clear()

        for child in node.children:
            if isinstance(child, NavigableString):
                if child.strip() and type(child) is NavigableString:
                    loose.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in _HEADINGS:
                flush_loose()
                level, content = _HEADINGS[name], _text(child)
                if not content:
                    continue
                while path and path[-1][0] >= level:
                    path.pop()
                path.append((level, content))
                blocks.append(Block("heading", content, hp(), meta={"level": level}))
            elif name == "pre":
                flush_loose()
                code = child.find("code")
                classes = (code.get("class") if code else child.get("class")) or []
                lang = next((c.split("-", 1)[1] for c in classes if c.startswith(("language-", "lang-"))), None)
                blocks.append(Block("code", child.get_text().strip("\n"), hp(), meta={"language": lang} if lang else {}))
            elif name == "table":
                flush_loose()
                md, meta = _table_markdown(child)
                if md:
                    blocks.append(Block("table", md, hp(), meta=meta))
            elif name in ("ul", "ol"):
                flush_loose()
                items = [_text(li) for li in child.find_all("li", recursive=False)]
                items = [i for i in items if i]
                if items:
                    marker = "1." if name == "ol" else "-"
                    blocks.append(Block("list", "\n".join(f"{marker} {i}" for i in items), hp()))
            elif name in ("p", "dt", "dd", "address", "figcaption"):
                flush_loose()
                content = _text(child)
                if content:
                    blocks.append(Block("paragraph", content, hp()))
            elif name == "blockquote":
                flush_loose()
                content = _text(child)
                if content:
                    blocks.append(Block("admonition", content, hp()))
            elif name in _CONTAINERS:
                cls = " ".join(child.get("class") or [])
                if re.search(r"(admonition|warning|note|caution|alert)", cls, re.I):
                    flush_loose()
                    content = _text(child)
                    if content:
                        blocks.append(Block("admonition", content, hp(), meta={"class": cls}))
                    continue
                flush_loose()
                walk(child)
            elif name == "br":
                loose.append("\n")
            else:
                loose.append(child.get_text(" "))
        flush_loose()

    walk(root)
    if not title:
        title = next((b.text for b in blocks if b.kind == "heading"), key.rsplit("/", 1)[-1])
    return ParsedDocument(title=title, blocks=tuple(blocks), parser="html", parser_version=VERSION)
