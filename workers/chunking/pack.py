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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[A-Za-z0-9_]+|[^\sA-Za-z0-9_]")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=\S)|(?<=[。！？；])")
#: One unit in ANCHOR_EVERY ends a chunk (once it holds min_fill tokens).
ANCHOR_EVERY = 3


def estimate_tokens(text: str) -> int:
    """WordPiece-like count without loading a tokenizer (within ~20 %)."""
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


def hard_split(text: str, budget: int) -> list[str]:
    """Text with no sentence ends (or one huge sentence) cut by token count."""
    tokens = list(_TOKEN.finditer(text))
    per = max(1, int(budget / 1.15) - 1)
    out = []
    for start in range(0, len(tokens), per):
        window = tokens[start : start + per]
        end = tokens[start + per].start() if start + per < len(tokens) else len(text)
        out.append(text[window[0].start() : end].strip())
    return [p for p in out if p]


def split_prose(text: str, budget: int, overlap: int) -> list[str]:
    """Prose over the budget as parts cut at sentence ends, each part after the
    first starting with the last sentence(s) of the one before (up to ``overlap`` tokens)."""
    units: list[str] = []
    for s in sentences(text):
        units.extend(hard_split(s, max(16, budget - overlap)) if estimate_tokens(s) > budget - overlap else [s])
    if len(units) <= 1:
        return units or [text]
    sizes = [estimate_tokens(u) for u in units]
    groups = pack(sizes, [is_anchor(u) for u in units], max(16, budget - overlap), min_fill=budget // 2)
    parts: list[str] = []
    for g, group in enumerate(groups):
        body = [units[i] for i in group]
        if g and overlap:
            tail: list[str] = []
            for i in reversed(groups[g - 1]):
                if estimate_tokens(" ".join([units[i], *tail])) > overlap:
                    break
                tail.insert(0, units[i])
            body = tail + body
        parts.append(" ".join(body))
    return parts


def split_lines(text: str, budget: int, header: Sequence[str] = ()) -> list[str]:
    """Code or other line-oriented text over the budget, cut between lines."""
    lines = text.split("\n")
    head = list(header)
    room = max(16, budget - estimate_tokens("\n".join(head)))
    units: list[str] = []
    for line in lines:
        units.extend(hard_split(line, room) if estimate_tokens(line) > room else [line])
    sizes = [estimate_tokens(u) for u in units]
    # Blank lines (between functions, between logical steps) are the natural cuts.
    anchors = [not u.strip() or is_anchor(u) for u in units]
    groups = pack(sizes, anchors, room, min_fill=room // 2)
    return ["\n".join(head + [units[i] for i in g]).strip("\n") for g in groups]


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
