"""Cutting sequences into chunks whose boundaries do not drift.

Greedy packing ("fill each chunk up to the budget") has a flaw for
incremental indexing: lengthen one paragraph and every boundary after it in
the section can shift, so one edit re-embeds the rest of the section.
:func:`pack` cuts where the *content* says so, as rsync and restic do with
bytes: after a unit whose hash falls in one residue class (about one unit
in three), once the run since the last such cut holds ``min_fill`` tokens.
Only a run over the budget is cut further, greedily and inside that run.
A boundary therefore depends only on the units since the previous
content-defined cut: an edit re-chunks its own run, and the next one only
when it turns a unit into or out of an anchor.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[A-Za-z0-9_]+|[^\sA-Za-z0-9_]")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=\S)|(?<=[。！？；])")
#: One unit in ANCHOR_EVERY ends a chunk (once it holds min_fill tokens).
ANCHOR_EVERY = 3


#: Counts the tokens of one text as part of a longer input (no special tokens).
Count = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """WordPiece-like count without loading a tokenizer (within ~20 % for English prose).

    Only an estimate: it under-counts identifiers, hashes and numbers badly, so
    chunk sizes never rest on it (see :class:`workers.chunking.Chunker`'s
    ``count_tokens``); it bounds what a document may cost before it is chunked."""
    return int(len(_TOKEN.findall(text)) * 1.15) + 1


def is_anchor(key: str, every: int = ANCHOR_EVERY) -> bool:
    return int(hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest(), 16) % every == 0


def pack(sizes: Sequence[int], anchors: Sequence[bool], budget: int, min_fill: int,
         max_items: int | None = None) -> list[list[int]]:
    """Group indexes ``0..n-1`` into runs within ``budget``.

    A run ends after an anchor (see :func:`is_anchor`) once it holds
    ``min_fill`` tokens; only then, and only inside that run, is it cut
    greedily to fit the budget.  The greedy cuts never move the start of the
    next run, so an edit re-chunks the run it is in and nothing after it.
    """
    groups: list[list[int]] = []
    run: list[int] = []
    used = 0

    def emit() -> None:
        cur: list[int] = []
        cur_used = 0
        for i in run:
            if cur and (cur_used + sizes[i] > budget or (max_items is not None and len(cur) >= max_items)):
                groups.append(cur)
                cur, cur_used = [], 0
            cur.append(i)
            cur_used += sizes[i]
        if cur:
            groups.append(cur)

    for i, size in enumerate(sizes):
        run.append(i)
        used += size
        if used >= min_fill and anchors[i]:
            emit()
            run, used = [], 0
    if run:
        emit()
    return groups


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def hard_split(text: str, budget: int, count: Count = estimate_tokens) -> list[str]:
    """Text with no sentence ends (or one huge sentence) cut between words so
    that each part counts at most ``budget`` tokens.

    Words are counted one by one and summed (a WordPiece tokenizer splits at
    whitespace and punctuation, so the sum is the count of the part), then
    every part is counted whole; a part still over the budget (or one word
    longer than it) is halved until it fits."""
    budget = max(1, budget)
    spans = [m.span() for m in _TOKEN.finditer(text)]
    if not spans:
        return [text.strip()] if text.strip() else []
    parts: list[str] = []
    start, used = 0, 0
    for n, (a, b) in enumerate(spans):
        size = count(text[a:b])
        if n > start and used + size > budget:
            parts.append(text[spans[start][0] : a].strip())
            start, used = n, 0
        used += size
    parts.append(text[spans[start][0] :].strip())
    return [q for p in parts if p for q in _fit(p, budget, count)]


def _fit(text: str, budget: int, count: Count) -> list[str]:
    if count(text) <= budget or len(text) <= 1:
        return [text]
    cut = text.rfind(" ", 0, len(text) // 2 + 1)
    cut = cut if cut > 0 else len(text) // 2
    return [q for half in (text[:cut].strip(), text[cut:].strip()) if half for q in _fit(half, budget, count)]


def split_prose(text: str, budget: int, overlap: int, count: Count = estimate_tokens) -> list[str]:
    """Prose over the budget as parts cut at sentence ends, each part after the
    first starting with the last sentence(s) of the one before (up to ``overlap`` tokens)."""
    overlap = min(overlap, budget // 4)
    room = max(8, budget - overlap)
    units: list[str] = []
    for s in sentences(text):
        units.extend(hard_split(s, room, count) if count(s) > room else [s])
    if len(units) <= 1:
        return units or [text]
    sizes = [count(u) for u in units]
    groups = pack(sizes, [is_anchor(u) for u in units], room, min_fill=budget // 2)
    parts: list[str] = []
    for g, group in enumerate(groups):
        body = [units[i] for i in group]
        if g and overlap:
            tail: list[str] = []
            for i in reversed(groups[g - 1]):
                if count(" ".join([units[i], *tail])) > overlap:
                    break
                tail.insert(0, units[i])
            body = tail + body
        parts.append(" ".join(body))
    return [q for p in parts for q in _fit(p, budget, count)]


def split_lines(text: str, budget: int, header: Sequence[str] = (), count: Count = estimate_tokens) -> list[str]:
    """Code or other line-oriented text over the budget, cut between lines."""
    lines = text.split("\n")
    head = list(header)
    room = max(8, budget - (count("\n".join(head)) if head else 0))
    units: list[str] = []
    for line in lines:
        units.extend(hard_split(line, room, count) if count(line) > room else [line])
    sizes = [count(u) for u in units]
    # Blank lines (between functions, between logical steps) are the natural cuts.
    anchors = [not u.strip() or is_anchor(u) for u in units]
    groups = _comments_forward(pack(sizes, anchors, room, min_fill=room // 2), units, sizes, room)
    return [t for g in groups if (t := "\n".join(head + [units[i] for i in g]).strip("\n"))]


# A whole-line comment in the common syntaxes: ``#`` (Python, shell, YAML), ``//`` and ``/*`` (C family), ``--`` (SQL).
# Not ``*``: a list item in line-split prose starts so.
_COMMENT = re.compile(r"\s*(?:#|//|/\*|--\s)")


def _comments_forward(groups: list[list[int]], units: Sequence[str], sizes: Sequence[int],
                      room: int) -> list[list[int]]:
    """A comment that ends a group moves to the start of the next one, with the code it introduces.

    A comment explains the lines below it; a cut between them leaves one chunk
    with the explanation and the next with the code, and neither answers a
    question about it.  The trailing run of comment (and blank) lines moves
    when the next group still fits ``room`` and the group keeps a line of its own.
    """
    out = [list(g) for g in groups]
    for k in range(len(out) - 1):
        cur, nxt = out[k], out[k + 1]
        cut = len(cur)
        while cut > 1 and (not units[cur[cut - 1]].strip() or _COMMENT.match(units[cur[cut - 1]])):
            cut -= 1
        moved = cur[cut:]
        if not any(units[i].strip() for i in moved):
            continue
        if sum(sizes[i] for i in moved) + sum(sizes[i] for i in nxt) > room:
            continue
        out[k], out[k + 1] = cur[:cut], moved + nxt
    return out


@dataclass
class Piece:
    """A chunk before it has an id: its text, where it sits, and its provenance.

    ``group`` names the unit a piece was split from; the pieces of one group
    are linked to each other (part n of m, previous and next ids)."""

    text: str
    kind: str
    heading_path: tuple[str, ...]
    page: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    group: str | None = None
