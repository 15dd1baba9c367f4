"""Markdown to blocks, through markdown-it-py (CommonMark plus tables)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from core.types import Block, ParsedDocument
from workers.parsing.decode import decode_text

VERSION = "md-1"


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


def parse_markdown(data: bytes, key: str) -> ParsedDocument:
    text = decode_text(data)
    meta, body = _front_matter(text)
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(body)
    lines = body.splitlines()
    blocks: list[Block] = []
    path: list[tuple[int, str]] = []
    title = meta.get("title", "")
    i = 0

    def heading_path() -> tuple[str, ...]:
        return tuple(t for _, t in path)

    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "heading_open":
            level = int(tok.tag[1:])
            content = tokens[i + 1].content.strip()
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, content))
            if not title and level == 1:
                title = content
            blocks.append(Block("heading", content, heading_path(), meta={"level": level}))
            i += 3
            continue
        if tok.type in ("fence", "code_block"):
            lang = (tok.info or "").strip().split(" ")[0] or None
            blocks.append(Block("code", tok.content.rstrip("\n"), heading_path(), meta={"language": lang} if lang else {}))
        elif tok.type in ("bullet_list_open", "ordered_list_open", "table_open", "blockquote_open"):
            # Take the source lines of the whole container: it keeps list
            # markers and table pipes, which carry meaning for the reader.
            depth, j = 0, i
            close = tok.type.replace("_open", "_close")
            while j < len(tokens):
                if tokens[j].type == tok.type:
                    depth += 1
                elif tokens[j].type == close:
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            start, end = tok.map or (0, 0)
            kind = {"table_open": "table", "blockquote_open": "admonition"}.get(tok.type, "list")
            blocks.append(Block(kind, "\n".join(lines[start:end]).strip(), heading_path()))
            i = j + 1
            continue
        elif tok.type == "paragraph_open":
            content = tokens[i + 1].content.strip()
            if content:
                blocks.append(Block("paragraph", content, heading_path()))
            i += 3
            continue
        elif tok.type == "html_block" and tok.content.strip():
            blocks.append(Block("paragraph", tok.content.strip(), heading_path()))
        i += 1
    if not title:
        title = key.rsplit("/", 1)[-1]
    return ParsedDocument(title=title, blocks=tuple(blocks), parser="markdown", parser_version=VERSION, meta=meta)
