"""Markdown to blocks, through markdown-it-py (CommonMark plus tables).

Headings build the heading path (``{#custom-id}`` attributes dropped: they
are generated anchors, not content); lists keep their markers and record
their top-level items; tables become table blocks (a preceding "Table 3:
..." line is their caption); fenced code keeps its language; blockquotes
are admonitions, typed when they start with "Warning:", "**Note:**" or
GitHub's ``[!CAUTION]``; ``:::warning`` and ``!!! note`` containers are read
as admonitions too.  Front matter (``---`` YAML-ish ``key: value`` lines)
goes to the document meta.

markdown-it stops nesting silently at ``maxNesting``; a document that hits
the cap is refused as ``too_complex`` instead of being half read.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

from freshindex.core.enums import BlockKind
from freshindex.core.errors import DocumentError
from freshindex.core.types import Block, BlockMeta, ParsedDocument
from freshindex.workers.parsing import limits
from freshindex.workers.parsing.decode import decode_text
from freshindex.workers.parsing.table import table_block

VERSION = "md-2"

_HEADING_ID = re.compile(r"\s*\{#[^}]*\}\s*$")
_ADMONITION_LEAD = re.compile(
    r"^\s*(?:\[!(?P<gh>[A-Za-z]+)\]|\*{0,2}(?P<word>warning|caution|danger|note|important|tip|attention|"
    r"注意|警告|提示)\*{0,2}\s*[:：]?\*{0,2})", re.I)
_CONTAINER_OPEN = re.compile(r"^(:::+|!!!|\?\?\?)\s*(\w+)(.*)$")
_CAPTION = re.compile(r"^(table|tabelle|tableau|表)\s*[\d.:\-]", re.I)
_MAX_MD_NESTING = 64


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 4)
    if end < 0:
        return {}, text
    meta = {}
    for line in text[4:end].splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            meta[k.strip()] = v.strip().strip("'\"")
    return meta, text[end + 4 :].lstrip("\n")


def _containers_to_quotes(body: str) -> str:
    """``:::warning`` ... ``:::`` and MkDocs ``!!! note`` blocks as blockquotes."""
    out: list[str] = []
    lines = body.split("\n")
    i = 0
    while i < len(lines):
        m = _CONTAINER_OPEN.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        fence, kind, rest = m.group(1), m.group(2), m.group(3).strip().strip("\"'")
        inner: list[str] = []
        i += 1
        if fence.startswith(":"):
            while i < len(lines) and not lines[i].startswith(fence):
                inner.append(lines[i])
                i += 1
            i += 1  # the closing fence
        else:
            while i < len(lines) and (lines[i].startswith(("    ", "\t")) or not lines[i].strip()):
                inner.append(lines[i][4:] if lines[i].startswith("    ") else lines[i].lstrip("\t"))
                i += 1
        lead = f"**{kind.capitalize()}:**" + (f" {rest}" if rest else "")
        out.append("> " + lead)
        out.extend("> " + line for line in inner)
        out.append("")
    return "\n".join(out)


def _inline_links(tok: Token) -> list[dict[str, str]]:
    links = []
    children = tok.children or []
    for n, child in enumerate(children):
        if child.type == "link_open":
            href = str(child.attrGet("href") or "")
            j = n + 1
            parts = []
            while j < len(children) and children[j].type != "link_close":
                parts.append(children[j].content)
                j += 1
            text = "".join(parts).strip()
            if href and not href.startswith("#"):
                links.append({"text": text, "href": href})
    return links


def _closing(tokens: list[Token], i: int) -> int:
    """Index of the token closing the container opened at ``i``."""
    open_type = tokens[i].type
    close = open_type.replace("_open", "_close")
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].type == open_type:
            depth += 1
        elif tokens[j].type == close:
            depth -= 1
            if depth == 0:
                return j
    return len(tokens) - 1


def _table(tokens: list[Token], i: int, end: int) -> tuple[list[list[str]], list[list[str]]]:
    header: list[list[str]] = []
    rows: list[list[str]] = []
    row: list[str] | None = None
    in_head = False
    for tok in tokens[i:end]:
        if tok.type == "thead_open":
            in_head = True
        elif tok.type == "thead_close":
            in_head = False
        elif tok.type == "tr_open":
            row = []
        elif tok.type == "tr_close" and row is not None:
            (header if in_head else rows).append(row)
            row = None
        elif tok.type == "inline" and row is not None:
            row.append(tok.content.strip())
    return header, rows


def parse_markdown(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    meta, body = _front_matter(text)
    body = _containers_to_quotes(body)
    md = MarkdownIt("commonmark").enable("table")
    cap = min(limits.current().max_nesting_depth, _MAX_MD_NESTING)
    md.options["maxNesting"] = cap
    tokens = md.parse(body)
    limits.check_time("Markdown parsed")
    if tokens and max(t.level for t in tokens) >= cap - 1:
        raise DocumentError(DocumentError.TOO_COMPLEX, f"Markdown nested {cap} or more levels deep")
    lines = body.splitlines()
    blocks: list[Block] = []
    path: list[tuple[int, str]] = []
    title = meta.get("title", "")
    i = 0

    def heading_path() -> tuple[str, ...]:
        return tuple(t for _, t in path)

    def source(tok: Token) -> str:
        start, end = tok.map or (0, 0)
        return "\n".join(lines[start:end]).strip()

    while i < len(tokens):
        tok = tokens[i]
        if len(blocks) % 200 == 199:
            limits.check_time(f"block {len(blocks)}")
            limits.check_blocks(len(blocks))
        if tok.type == "heading_open":
            level = int(tok.tag[1:])
            content = _HEADING_ID.sub("", tokens[i + 1].content.strip())
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, content))
            if not title and level == 1:
                title = content
            blocks.append(Block(BlockKind.HEADING, content, heading_path(), meta=BlockMeta(level=level)))
            i = _closing(tokens, i) + 1
            continue
        if tok.type in ("fence", "code_block"):
            lang = (tok.info or "").strip().split(" ")[0] or None
            if tok.content.strip():
                blocks.append(Block(BlockKind.CODE, tok.content.rstrip("\n"), heading_path(),
                                    meta=BlockMeta(language=lang)))
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            end = _closing(tokens, i)
            items = [source(t) for t in tokens[i + 1 : end] if t.type == "list_item_open" and t.level == tok.level + 1]
            links = [link for t in tokens[i:end] if t.type == "inline" for link in _inline_links(t)]
            blocks.append(Block(BlockKind.LIST, source(tok), heading_path(),
                                meta=BlockMeta(items=items, links=links or None)))
            i = end + 1
            continue
        elif tok.type == "table_open":
            end = _closing(tokens, i)
            header, rows = _table(tokens, i, end)
            caption = None
            if blocks and blocks[-1].kind == BlockKind.PARAGRAPH and _CAPTION.match(blocks[-1].text) \
                    and len(blocks[-1].text) < 200 and blocks[-1].heading_path == heading_path():
                caption = blocks.pop().text
            block = table_block(header, rows, heading_path(), caption=caption)
            if block is not None:
                blocks.append(block)
            i = end + 1
            continue
        elif tok.type == "blockquote_open":
            end = _closing(tokens, i)
            content = "\n".join(re.sub(r"^\s*>\s?", "", line) for line in source(tok).splitlines()).strip()
            m = _ADMONITION_LEAD.match(content)
            kind = (m.group("gh") or m.group("word")).lower() if m and (m.group("gh") or m.group("word")) else "quote"
            if m and m.group("gh"):
                content = content[m.end() :].strip()
            links = [link for t in tokens[i:end] if t.type == "inline" for link in _inline_links(t)]
            if content:
                blocks.append(Block(BlockKind.ADMONITION, content, heading_path(),
                                    meta=BlockMeta(admonition=kind, links=links or None)))
            i = end + 1
            continue
        elif tok.type == "paragraph_open":
            inline = tokens[i + 1]
            content = inline.content.strip()
            if content:
                links = _inline_links(inline)
                blocks.append(Block(BlockKind.PARAGRAPH, content, heading_path(), meta=BlockMeta(links=links or None)))
            i = _closing(tokens, i) + 1
            continue
        elif tok.type == "html_block":
            content = re.sub(r"<!--.*?-->", "", tok.content, flags=re.S)
            content = re.sub(r"<[^>]+>", " ", content)
            content = " ".join(content.split())
            if content:
                blocks.append(Block(BlockKind.PARAGRAPH, content, heading_path()))
        i += 1
    if not title:
        title = key.rsplit("/", 1)[-1]
    return ParsedDocument(title=title, blocks=tuple(blocks), parser="markdown", parser_version=VERSION, meta=meta)
