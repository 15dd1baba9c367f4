"""Source files as one chunk per symbol.

A function, or a class that fits the budget, is one chunk; a larger class
becomes its header (declaration, docstring, fields) plus one chunk per
method; a symbol still over the budget is cut between lines (blank lines
first) into parts linked to each other.  The docstring is inside the
symbol's source, so it always travels with the code it explains.  Each
chunk's meta says ``path``, ``symbol``, ``symbol_kind``, ``signature``,
``language``, ``lines`` and ``source_version``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block
from freshindex.workers.chunking.pack import Piece, estimate_tokens, split_lines

_PROVENANCE = ("path", "language", "source_version")


def code_pieces(blocks: tuple[Block, ...], budget: int) -> Iterator[Piece]:
    for block in blocks:
        members = block.meta.get("members") or []
        base = {k: block.meta[k] for k in _PROVENANCE if k in block.meta}
        if not members or estimate_tokens(block.text) <= budget:
            yield from _symbol(block.text, block.heading_path, base, block.meta, budget)
            continue
        start = block.meta["lines"][0]
        lines = block.text.split("\n")
        taken: set[int] = set()
        for m in members:
            a, b = m["lines"]
            taken.update(range(a, b + 1))
        header = "\n".join(line for n, line in enumerate(lines, start=start) if n not in taken and line.strip())
        header_meta = {k: v for k, v in block.meta.items() if k != "members"}
        header_meta["members"] = [m["symbol"] for m in members]
        yield from _symbol(header, block.heading_path, base, header_meta, budget)
        path = block.heading_path[:-1] if len(block.heading_path) > 1 else block.heading_path
        for m in members:
            a, b = m["lines"]
            text = textwrap.dedent("\n".join(lines[a - start : b - start + 1]))
            yield from _symbol(text, (*path, m["symbol"]), base, m, budget)


def _symbol(text: str, heading_path: tuple[str, ...], base: dict[str, Any], info: dict[str, Any],
            budget: int) -> Iterator[Piece]:
    meta = dict(base)
    for k in ("symbol", "symbol_kind", "signature", "lines", "docstring", "members"):
        if k in info:
            meta[k] = info[k]
    if meta.get("members"):
        meta["members"] = [m["symbol"] if isinstance(m, dict) else m for m in meta["members"]]
    if isinstance(meta.get("docstring"), str) and len(meta["docstring"]) > 400:
        meta["docstring"] = meta["docstring"][:400] + "…"
    if not text.strip():
        return
    if estimate_tokens(text) <= budget:
        yield Piece(text, BlockKind.CODE, heading_path, None, meta)
        return
    signature = meta.get("signature")
    head = [f"{_comment(meta.get('language'))} {signature} (continued)"] if signature else []
    parts = split_lines(text, budget - (estimate_tokens(head[0]) if head else 0))
    for n, part in enumerate(parts):
        body = part if n == 0 or not head else "\n".join([*head, part])
        yield Piece(body, BlockKind.CODE, heading_path, None, dict(meta), group=f"{'/'.join(heading_path)}")


def _comment(language: str | None) -> str:
    if language in ("python", "shell", "ruby", "yaml", "toml"):
        return "#"
    return "--" if language == "sql" else "//"
