"""What page furniture looks like as text.

Volatile boilerplate (version banners, "last updated" dates, page numbers,
copyright lines, previous/next links) changes on every release of a
documentation set without changing what the page says.  Parsers drop it
before chunking, so it is in neither a chunk's text nor its hash, and a
release that only bumps the banner re-embeds nothing.

These patterns only ever judge *short* standalone lines in the places
furniture lives (the first or last blocks of an HTML page, the top and
bottom margins of a PDF page); a sentence that mentions a version inside
the body is content and stays.
"""

from __future__ import annotations

import re

_DATE = r"(\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[./]\d{1,2}[./]\d{2,4}|\d{4}年\d{1,2}月\d{1,2}日|" \
        r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? \d{1,2},? \d{4}|\d{1,2} " \
        r"(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]* \d{4})"

_VOLATILE = [
    re.compile(p, re.I)
    for p in (
        r"^[-–—\s]*(page|seite|p\.)?\s*\d+\s*((/|of|von)\s*\d+)?[-–—\s]*$",
        r"^第\s*\d+\s*页(\s*/?\s*共\s*\d+\s*页)?$",
        r"\b(last|recently)\s+(updated|modified|changed|reviewed)\s*(on|at)?\s*:?\s*" + _DATE,
        r"^(last\s+)?(updated|modified|changed|reviewed)\s*(on|at)?\s*:?\s*" + _DATE,
        r"\b(updated|released|published|generated|built|modified|reviewed)\s*(on|at)?\s*:?\s*" + _DATE,
        r"\b(generated|built|rendered)\s+(by|with)\s+\S+\s*(\d+(\.\d+)+)?\s*$",
        r"(©|\(c\)\s*\d{4}|\bcopyright\s*(©|\(c\))?\s*\d{4}|all rights reserved)",
        r"\byou are (viewing|reading|looking at)\b.*\b(version|docs|documentation|release)\b",
        r"\b(this|these) (is|are)? ?(the )?(docs|documentation|pages?) for\b.*\b(version|release|v\d)",
        r"\b(unreleased|outdated|old|older|previous|latest|development|stable) (version|release)\b.*"
        r"\b(docs|documentation)\b",
        r"^(docs|documentation|manual|guide|handbook)?\s*(version|release|v)\s*:?\s*v?\d+(\.\d+)*"
        r"(\s*\((latest|stable|current)\))?$",
        r"^(switch|select|change) (the )?version\b",
        r"^(edit (this page|on github)|view (page )?source|was this (page|article) helpful\??|"
        r"back to top|skip to (main )?content|on this page|table of contents|in this article)\W*$",
        r"^(«|‹|←)\s*\S",
        r"^(previous|prev|next)(\s+(page|chapter|article|topic|section))?\s*[:»›→]",
        r"(»|›|→)\s*$",
        r"^(上一页|下一页)",
        r"最后更新|更新于\s*\d|版权所有",
    )
]

_DIGITS = re.compile(r"\d+")
_MAX_WORDS = 25


_VERSION_AND_DATE = re.compile(r"\bv(ersion)?\s*\d+(\.\d+)+\b.*" + _DATE + "|" + _DATE + r".*\bv(ersion)?\s*\d+(\.\d+)+\b",
                               re.I)


def is_volatile(text: str) -> bool:
    """A short line that reads like furniture whose words change per release."""
    line = " ".join(text.split())
    words = len(line.split())
    if not line or words > _MAX_WORDS:
        return False
    if words <= 10 and _VERSION_AND_DATE.search(line):  # "Manual · Version 4.2.0 · 2026-11-01"
        return True
    return any(p.search(line) for p in _VOLATILE)


def shape(text: str) -> str:
    """A line with its numbers masked: "Page 3 of 9" and "Page 4 of 9" share a shape."""
    return _DIGITS.sub("#", " ".join(text.split()).lower())


_PREV_NEXT = re.compile(r"^\s*(«|‹|←|»|›|→)?\s*(previous|prev|next|back|forward|上一页|下一页)\b", re.I)


def is_prev_next(link_texts: list[str], text: str) -> bool:
    """A block made of "Previous: X" / "Next: Y" links and nothing else."""
    if not link_texts:
        return False
    leftover = text
    for t in link_texts:
        leftover = leftover.replace(t, " ")
    leftover = re.sub(r"[\s|·•«»‹›←→:-]+", "", leftover)
    return len(leftover) <= 12 and all(_PREV_NEXT.match(t) or len(t) < 80 for t in link_texts) and any(
        _PREV_NEXT.match(t) for t in [*link_texts, text]
    )
