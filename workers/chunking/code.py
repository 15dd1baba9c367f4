"""Source files as one chunk per symbol.

A function, or a class that fits the budget, is one chunk; a larger class
becomes its header (declaration, docstring, fields) plus one chunk per
method.  A symbol still over the budget is cut at statement boundaries:
first between the statements of its body, and only inside a statement that
alone is over the budget, between the statements nested in it (then between
lines, then between words).  A cut never falls inside brackets, inside a
multi-line string, after a comment or decorator (they belong to what follows)
or before a closing brace or ``else``.  Statements are packed into parts with
content-defined boundaries (:func:`~workers.chunking.pack.pack`), and a part
under :data:`FLOOR` of the budget joins its neighbour when they fit together,
so a split symbol is not a trail of two-line fragments.  Each part after the
first starts with a ``<signature> (continued)`` comment whose parameters are
elided (``# def send(...) (continued)``: an edited parameter list re-embeds
the first part, not every part), carries its own ``lines`` and the whole
symbol's ``symbol_lines``, and the parts are linked.  Whether a statement
ends a part depends on its words only (:func:`~workers.chunking.pack.is_anchor`
over its whitespace-collapsed text), so re-indenting code or adding a blank
line moves no cut.

The docstring is inside the symbol's source, so it always travels with the
code it explains.  Each chunk's meta says ``path``, ``symbol``,
``symbol_kind``, ``signature``, ``language``, ``lines`` and
``source_version``; its heading path is the symbol's qualified name only
(never the file path, so a moved file keeps its vectors).
"""

from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

from freshindex.core.enums import BlockKind
from freshindex.core.types import Block
from freshindex.workers.chunking.pack import Count, Piece, estimate_tokens, hard_split, is_anchor, pack

_PROVENANCE = ("path", "language", "source_version")
#: A part of a split symbol smaller than this share of the budget joins a neighbour that has room.
FLOOR = 0.25
_NO_CUT_BEFORE = (")", "]", "}", ".", ",", "&&", "||", "+", "-", "*", "/", "?", ":", "=", "|", "else", "elif",
                  "except", "finally", "catch", "case", "default")
_CONTINUES = ("\\", ",", "(", "[", "{", "+", "-", "*", "/", "=", "&&", "||", ".", "?", ":", " and", " or", " not")
_ATTACHED = ("#", "//", "/*", "*", "@", "--")
_STRING = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")
_TRIPLE = re.compile(r"'''|\"\"\"|`")


def code_pieces(blocks: tuple[Block, ...], budget: int | Callable[[tuple[str, ...]], int],
                count: Count = estimate_tokens) -> Iterator[Piece]:
    """``budget`` is a token budget, or a function of the heading path giving one
    (the room the embedded header leaves)."""
    room = budget if callable(budget) else (lambda _path: budget)
    for block in blocks:
        members = block.meta.get("members") or []
        base = {k: block.meta[k] for k in _PROVENANCE if k in block.meta}
        start = block.meta.get("lines", [1])[0]
        lines = block.text.split("\n")
        numbers = list(range(start, start + len(lines)))
        if not members or count(block.text) <= room(block.heading_path):
            yield from _symbol(block.text, numbers, block.heading_path, base, block.meta.to_dict(), room, count)
            continue
        taken: set[int] = set()
        for m in members:
            a, b = m["lines"]
            taken.update(range(a, b + 1))
        kept = [(n, line) for n, line in zip(numbers, lines, strict=True) if n not in taken and line.strip()]
        header_meta = {k: v for k, v in block.meta.to_dict().items() if k != "members"}
        header_meta["members"] = [m["symbol"] for m in members]
        yield from _symbol("\n".join(line for _, line in kept), [n for n, _ in kept], block.heading_path, base,
                           header_meta, room, count)
        path = block.heading_path[:-1]
        for m in members:
            a, b = m["lines"]
            text = textwrap.dedent("\n".join(lines[a - start : b - start + 1]))
            yield from _symbol(text, list(range(a, b + 1)), (*path, m["symbol"]), base, m, room, count)


def _symbol(text: str, numbers: list[int], heading_path: tuple[str, ...], base: dict[str, Any],
            info: dict[str, Any], room: Callable[[tuple[str, ...]], int], count: Count) -> Iterator[Piece]:
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
    budget = room(heading_path)
    if count(text) <= budget:
        yield Piece(text, BlockKind.CODE, heading_path, None, meta)
        return
    signature = meta.get("signature")
    # The parameters stay out of the continued line: an edited signature re-embeds the first part only.
    short = short_signature(signature, str(meta.get("symbol") or "")) if signature else ""
    head = f"{_comment(meta.get('language'))} {short} (continued)" if short else ""
    lines = text.split("\n")
    group = "/".join(heading_path)
    symbol_lines = meta.get("lines") or [numbers[0], numbers[-1]]
    for n, (a, b, part) in enumerate(split_statements(lines, budget - (count(head) if head else 0), count)):
        body = part if n == 0 or not head else f"{head}\n{part}"
        part_meta = dict(meta, lines=[numbers[a], numbers[b - 1]], symbol_lines=list(symbol_lines))
        yield Piece(body, BlockKind.CODE, heading_path, None, part_meta, group=group)


def split_statements(lines: list[str], budget: int, count: Count = estimate_tokens) -> list[tuple[int, int, str]]:
    """``lines`` cut at statement boundaries into parts within ``budget``:
    ``(first line index, end index, text)``, in order, covering every non-blank line."""
    budget = max(8, budget)
    levels = _cut_levels(lines)
    sizes = [count(line) for line in lines]
    segments = _segments(0, len(lines), levels, sizes, budget)
    seg_sizes = [sum(sizes[a:b]) for a, b in segments]
    # A statement's anchor status hangs on its words only: re-indenting it, or adding or
    # removing a blank line inside it, moves no cut.
    anchors = [b < len(lines) and (not lines[b].strip() or is_anchor(" ".join("\n".join(lines[a:b]).split())))
               for a, b in segments]
    groups = pack(seg_sizes, anchors, budget, min_fill=budget // 2)
    groups = _floor(groups, seg_sizes, budget, int(budget * FLOOR))
    out: list[tuple[int, int, str]] = []
    for g in groups:
        a, b = segments[g[0]][0], segments[g[-1]][1]
        while a < b and not lines[a].strip():
            a += 1
        while b > a and not lines[b - 1].strip():
            b -= 1
        if a == b:
            continue
        text = "\n".join(lines[a:b])
        if count(text) <= budget:
            out.append((a, b, text))
        else:  # one line longer than the budget: cut between words, each part keeps that line's number
            out.extend((a, b, p) for p in hard_split(text, budget, count))
    return out


def _cut_levels(lines: list[str]) -> list[int | None]:
    """For each line, the indentation of a statement starting there, or None when no cut may fall before it."""
    levels: list[int | None] = []
    depth = 0
    in_string: str | None = None
    prev = ""  # the previous non-blank line, stripped, strings removed
    for i, line in enumerate(lines):
        stripped = line.strip()
        ok = (i > 0 and bool(stripped) and depth == 0 and in_string is None
              and not stripped.startswith(_NO_CUT_BEFORE)
              and not prev.endswith(_CONTINUES) and not prev.startswith(_ATTACHED))
        levels.append(len(line) - len(line.lstrip()) if ok else None)
        code = line
        for m in _TRIPLE.finditer(line):  # multi-line strings: toggled by their delimiters
            if in_string is None:
                in_string = m.group()
            elif in_string == m.group():
                in_string = None
        if in_string is None and not _TRIPLE.search(line):
            code = _STRING.sub("''", line)
            code = code.split("#", 1)[0] if stripped.startswith("#") or " #" in code else code
            code = code.split("//", 1)[0] if "//" in code else code
            depth = max(0, depth + sum(code.count(c) for c in "([") - sum(code.count(c) for c in ")]"))
        if stripped:
            prev = stripped if stripped.startswith(_ATTACHED) else code.strip()
    return levels


def _segments(lo: int, hi: int, levels: list[int | None], sizes: list[int], budget: int) -> list[tuple[int, int]]:
    """[lo, hi) as statements at the outermost level inside it; one over the budget is cut inside, recursively."""
    if sum(sizes[lo:hi]) <= budget or hi - lo <= 1:
        return [(lo, hi)]
    cuts = [i for i in range(lo + 1, hi) if levels[i] is not None]
    if not cuts:
        return [(i, i + 1) for i in range(lo, hi)]
    outer = min(levels[i] for i in cuts)  # type: ignore[type-var]
    bounds = [lo, *(i for i in cuts if levels[i] == outer), hi]
    out: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(bounds):
        out.extend(_segments(a, b, levels, sizes, budget) if b - a > 1 and sum(sizes[a:b]) > budget
                   else [(a, b)])
    return out


def _floor(groups: list[list[int]], sizes: list[int], budget: int, floor: int) -> list[list[int]]:
    """Groups under ``floor`` tokens merged into the previous (or next) group when the two fit,
    else filled up with the previous group's last statements."""
    out = [list(g) for g in groups]
    i = 0
    while len(out) > 1 and i < len(out):
        size = sum(sizes[j] for j in out[i])
        if size < floor:
            if i > 0 and size + sum(sizes[j] for j in out[i - 1]) <= budget:
                out[i - 1].extend(out.pop(i))
                continue
            if i + 1 < len(out) and size + sum(sizes[j] for j in out[i + 1]) <= budget:
                small = out.pop(i)
                out[i][:0] = small
                continue
            if i > 0:  # too big to merge: take statements from the end of the previous group instead
                while size < floor and len(out[i - 1]) > 1 and size + sizes[out[i - 1][-1]] <= budget:
                    size += sizes[out[i - 1][-1]]
                    out[i].insert(0, out[i - 1].pop())
        i += 1
    return out


def _comment(language: str | None) -> str:
    if language in ("python", "shell", "ruby", "yaml", "toml", "ini"):
        return "#"
    return "--" if language == "sql" else "//"


def short_signature(signature: str, symbol: str) -> str:
    """The signature up to the symbol's name, its parameters as ``(...)``:
    ``def send(self, request, stream=False, timeout=None) -> Response`` -> ``def send(...)``."""
    name = symbol.rsplit(".", 1)[-1]
    found = _name_in(signature, name) if name else None
    if found is None:
        head, paren, _ = signature.partition("(")
        return f"{head.strip()}(...)" if paren else signature
    rest = signature[found.end() :].lstrip()
    return signature[: found.end()] + ("(...)" if rest.startswith(("(", "<", "[")) else "")


def _name_in(signature: str, name: str) -> re.Match[str] | None:
    """Where ``signature`` names ``name`` itself: outside brackets (not a Go receiver ``(s Send)`` nor a
    parameter), preferring the place its parameter list follows; else the first mention."""
    matches = list(re.finditer(rf"(?<![\w$]){re.escape(name)}(?![\w$])", signature))
    if not matches:
        return None
    depth_at: dict[int, int] = {}
    depth = 0
    starts = {m.start() for m in matches}
    for i, ch in enumerate(signature):
        if i in starts:
            depth_at[i] = depth
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
    outside = [m for m in matches if depth_at[m.start()] == 0]
    opened = [m for m in outside if signature[m.end() :].lstrip().startswith(("(", "<", "["))]
    return (opened or outside or matches)[0]
