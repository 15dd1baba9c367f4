"""Check a finished answer's citations against the packet it was written from.

Two failures are counted (:class:`CitationReport`):

* ``missing``: numbers the answer cites that its source list does not hold
  (a made-up ``[7]``, or a number from an earlier turn no longer shown);
* ``unsupported``: sources the answer cites where no citing sentence shares
  enough words with the source text (lexical overlap: at least
  ``min_overlap`` of the sentence's content words, and ``min_shared`` of them,
  occur in the source).

Citations may be ``[1]``, ``[1, 3]``, ``[1][2]`` or ``[2-4]``; a citation
standing after the full stop (``... done. [2]``) belongs to the sentence
before it.  What it does not guarantee: that a supported sentence is true to
its source; overlap catches a citation pinned to the wrong source or to none,
not a paraphrase that reverses the meaning.  Standard library only.

``on_report`` (a :data:`CitationSink`, e.g. ``Metrics.count_citations``)
hears every report; the HTTP endpoint passes its metrics, so invalid
citations are counted where they are scraped
(``freshindex_invalid_citations_total{kind}``); the CLI counts nothing.

Citations are ``[n]``, lists and ranges with one dash per part: a bracketed
date (``[2024-01-15]``) is text.  A third failure, ``malformed``, is a
bracket shaped as a citation that no source list can hold, by kind
(:data:`MALFORMED_KINDS`): ``zero_number`` (``[0]``), ``reversed_range``
(``[9-2]``), ``range_too_wide`` (``[1-1000000000]``: more numbers than
:data:`MAX_DISTINCT_CITED`), ``number_too_large`` (over 4 digits).  Such a
citation cites nothing and fails the report, so an absurd range is never
read as plain text.  The work is linear in the answer: an answer citing over
:data:`MAX_CITED_NUMBERS` numbers (ranges expanded) or
:data:`MAX_DISTINCT_CITED` distinct ones is refused.

Over HTTP (``POST /v1/citations/check``) and the CLI (``freshindex
check-citations``) the source list arrives as JSON, the packet ``POST
/v1/query`` or ``query --json`` gave: :func:`sources_from` reads it and
refuses what no packet holds (:class:`CitationInputError`). It checks the
shape, not the content: a caller who edits a source's text only changes its
own report.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from freshindex.core.errors import PermanentError
from freshindex.injection.types import ContextPacket, Evidence

__all__ = ["MALFORMED_KINDS", "MAX_ANSWER_CHARS", "MAX_CITED_NUMBERS", "MAX_DISTINCT_CITED", "MAX_SOURCES",
           "CitationInputError", "CitationReport", "CitationSink", "check_answer", "check_citations", "cited_numbers",
           "malformed_citations", "sources_from"]

#: The longest answer checked (characters), the most sources, and the longest source text a packet may hold.
MAX_ANSWER_CHARS = 50_000
MAX_SOURCES = 200
MAX_SOURCE_CHARS = 200_000
#: The most citation numbers one answer may cite, ranges expanded, and the most distinct ones: the check's work
#: stays linear in them, and an answer beyond either is refused (:class:`CitationInputError`, HTTP 400).
MAX_CITED_NUMBERS = 5_000
MAX_DISTINCT_CITED = 400

#: Each part a number or one range ``a-b``: ``[2024-01-15]`` (a bracketed date) is not a citation.
#: Any number of digits is read, so an absurd number or range is seen (and refused as malformed), not skipped.
_PART = r"\d+(?:\s*[-–]\s*\d+)?"
_CITE = re.compile(rf"\[({_PART}(?:\s*[,;]\s*{_PART})*)\]")
#: The largest citation number read as one: four digits (a packet holds at most :data:`MAX_SOURCES`).
_MAX_NUMBER_DIGITS = 4
#: The kinds of a malformed citation (the ``kind`` label of ``freshindex_invalid_citations_total``, with
#: ``missing`` and ``unsupported``): a bounded set, never the answer's text.
MALFORMED_KINDS = ("zero_number", "reversed_range", "range_too_wide", "number_too_large")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_STOP = frozenset(
    "a an and are as at be by can do does for from has have how i if in into is it its may must not of on or "
    "our should so than that the their then there these this to use used was we were what when where which "
    "who will with you your".split()
)


class CitationInputError(PermanentError):
    """A citation check's input is not an answer and a packet's source list (HTTP 400, CLI exit 2)."""


def _malformed(lo: str, hi: str) -> str | None:
    """The kind of malformed citation part ``lo-hi`` (``hi`` empty for one number), or None when it is sound."""
    lo_d, hi_d = lo.lstrip("0"), hi.lstrip("0")
    if len(lo_d) > _MAX_NUMBER_DIGITS or len(hi_d) > _MAX_NUMBER_DIGITS:
        # Decided on the digits, before int(): a 10,000-digit "number" is never parsed.
        if hi and (len(hi_d), hi_d) < (len(lo_d), lo_d):
            return "reversed_range"
        return "range_too_wide" if hi and len(hi_d) > len(lo_d) else "number_too_large"
    a = int(lo)
    b = int(hi) if hi else a
    if b < a:
        return "reversed_range"
    if a == 0:
        return "zero_number"
    if b - a + 1 > MAX_DISTINCT_CITED:
        return "range_too_wide"
    return None


def _read(text: str, limit: int | None, malformed: list[tuple[str, str]] | None) -> list[int]:
    out: list[int] = []
    for m in _CITE.finditer(text):
        for part in re.split(r"\s*[,;]\s*", m.group(1)):
            lo, _, hi = re.sub(r"\s+", "", part).replace("–", "-").partition("-")
            kind = _malformed(lo, hi)
            if kind is not None:
                if malformed is not None:
                    malformed.append((kind, part))
                continue
            a = int(lo)
            b = int(hi) if hi else a
            numbers = range(a, b + 1) if b - a <= 100 else (a, b)
            if limit is not None and len(out) + len(numbers) > limit:
                raise CitationInputError(f"the answer cites more than {limit} numbers (ranges expanded)")
            out += numbers
    return out


def cited_numbers(text: str, *, limit: int | None = None) -> list[int]:
    """Every ``[n]`` cited in ``text`` in order of appearance (ranges expanded, at most 100 wide).

    Malformed parts (:func:`malformed_citations`) cite nothing.  With
    ``limit``, raises :class:`CitationInputError` before expanding more
    than ``limit`` numbers.
    """
    return _read(text, limit, None)


def malformed_citations(text: str) -> list[tuple[str, str]]:
    """``(kind, part)`` for each citation part in ``text`` no source list can hold (:data:`MALFORMED_KINDS`).

    ``[0]``, ``[9-2]``, ``[1-1000000000]`` and ``[12345]`` are malformed;
    a bracketed date (``[2024-01-15]``) is text, not a citation.
    """
    found: list[tuple[str, str]] = []
    _read(text, None, found)
    return found


def _words(text: str) -> set[str]:
    text = unicodedata.normalize("NFKC", text).casefold()
    words: set[str] = set()
    for w in _WORD.findall(text):
        if _CJK.search(w):
            words |= set(_CJK.findall(w))  # CJK: each character is a word
            continue
        if w in _STOP or (len(w) < 2 and not w.isdigit()):
            continue
        words.add(w[:-1] if len(w) > 3 and w.endswith("s") else w)
    return words


@dataclass(frozen=True)
class CitationReport:
    cited: tuple[int, ...]  # distinct numbers cited, in order of first appearance
    missing: tuple[int, ...]  # cited, not in the source list
    unsupported: tuple[int, ...]  # cited and listed, but no citing sentence overlaps its text
    sentences: int = 0
    uncited_sentences: int = 0  # sentences with content words and no citation
    support: dict[int, float] = field(default_factory=dict)  # best overlap per cited, listed source
    malformed: tuple[tuple[str, str], ...] = ()  # (kind, citation part): shaped as a citation, citing nothing

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unsupported and not self.malformed

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "cited": list(self.cited), "missing": list(self.missing),
                "unsupported": list(self.unsupported),
                "malformed": [{"kind": kind, "citation": f"[{part}]"} for kind, part in self.malformed],
                "sentences": self.sentences, "uncited_sentences": self.uncited_sentences,
                "support": {str(n): s for n, s in sorted(self.support.items())}}

    def counts(self) -> dict[str, int]:
        """How many cited, missing, unsupported, uncited sentences (malformed ones: :meth:`invalid_by_kind`)."""
        return {"cited": len(self.cited), "missing": len(self.missing), "unsupported": len(self.unsupported),
                "uncited_sentences": self.uncited_sentences}

    def invalid_by_kind(self) -> dict[str, int]:
        """Invalid citations by kind (``missing``, ``unsupported`` and each of :data:`MALFORMED_KINDS`), nonzero only."""
        out = {"missing": len(self.missing), "unsupported": len(self.unsupported)}
        for kind, _part in self.malformed:
            out[kind] = out.get(kind, 0) + 1
        return {k: n for k, n in out.items() if n}


def _sentences(answer: str) -> list[str]:
    out: list[str] = []
    for piece in _SENTENCE.split(answer):
        if not piece.strip():
            continue
        if out and not _CITE.sub("", piece).strip(" \t.,;:!?)(*-"):
            out[-1] += " " + piece  # "... done. [2]": the citation belongs to the sentence before
        else:
            out.append(piece)
    return out


#: Receives every :class:`CitationReport` (e.g. the invalid-citation metric); what it raises reaches the caller.
CitationSink = Callable[[CitationReport], None]


def check_citations(answer: str, sources: ContextPacket | Sequence[Evidence], *, min_overlap: float = 0.3,
                    min_shared: int = 2, on_report: CitationSink | None = None) -> CitationReport:
    """What is wrong with the citations of ``answer`` written from ``sources`` (``on_report`` hears it).

    Raises :class:`CitationInputError` (nothing heard) for an answer citing
    more than :data:`MAX_CITED_NUMBERS` numbers or :data:`MAX_DISTINCT_CITED`
    distinct ones.
    """
    evidence = sources.evidence if isinstance(sources, ContextPacket) else tuple(sources)
    by_n = {e.n: e for e in evidence}
    source_words = {n: _words(e.text + " " + e.title + " " + " ".join(e.heading_path)) for n, e in by_n.items()}
    cited: list[int] = []
    best: dict[int, float] = {}
    sentences = _sentences(answer)
    uncited = 0
    seen: set[int] = set()
    budget = MAX_CITED_NUMBERS
    malformed: list[tuple[str, str]] = []
    for sentence in sentences:
        before = len(malformed)
        numbers = _read(sentence, budget, malformed)
        budget -= len(numbers)
        words = _words(_CITE.sub(" ", sentence))
        if not numbers:
            uncited += bool(words) and len(malformed) == before  # a malformed citation is counted as such
            continue
        for n in dict.fromkeys(numbers):  # each distinct number once per sentence
            if n not in seen:
                seen.add(n)
                cited.append(n)
                if len(cited) > MAX_DISTINCT_CITED:
                    raise CitationInputError(f"the answer cites more than {MAX_DISTINCT_CITED} distinct numbers")
            if n not in by_n or not words:
                continue
            shared = len(words & source_words[n])
            score = shared / len(words) if shared >= min(min_shared, len(words)) else 0.0
            best[n] = max(best.get(n, 0.0), score)
    missing = tuple(n for n in cited if n not in by_n)
    unsupported = tuple(n for n in cited if n in by_n and best.get(n, 0.0) < min_overlap)
    report = CitationReport(tuple(cited), missing, unsupported, len(sentences), uncited,
                            {n: round(s, 3) for n, s in best.items()}, tuple(malformed))
    if on_report is not None:
        on_report(report)
    return report


def sources_from(data: Any) -> tuple[Evidence, ...]:
    """The source list of a packet as JSON (``POST /v1/query``'s body, or ``{"evidence": [...]}``).

    Raises :class:`CitationInputError` for anything no packet holds: not an
    object, evidence not a list or over :data:`MAX_SOURCES`, an item that
    is not evidence, a number below 1 or given twice, a text over
    :data:`MAX_SOURCE_CHARS`.
    """
    if not isinstance(data, Mapping):
        raise CitationInputError(f"the packet is a JSON object, not {type(data).__name__}")
    items = data.get("evidence")
    if not isinstance(items, list):
        raise CitationInputError("the packet has no evidence list")
    if len(items) > MAX_SOURCES:
        raise CitationInputError(f"the packet lists {len(items)} sources; at most {MAX_SOURCES}")
    out: list[Evidence] = []
    seen: set[int] = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise CitationInputError(f"evidence[{i}] is not an object")
        if not isinstance(item.get("n"), int) or isinstance(item.get("n"), bool):
            raise CitationInputError(f"evidence[{i}].n is not an integer")
        if not isinstance(item.get("text"), str) or len(item["text"]) > MAX_SOURCE_CHARS:
            raise CitationInputError(f"evidence[{i}].text is not a string of at most {MAX_SOURCE_CHARS} characters")
        try:
            e = Evidence.from_dict(item)
        except (KeyError, TypeError, ValueError) as exc:
            raise CitationInputError(f"evidence[{i}] is not evidence: {type(exc).__name__}: {exc}") from None
        if e.n < 1 or e.n in seen:
            raise CitationInputError(f"evidence[{i}].n = {e.n}: numbers start at 1 and appear once")
        seen.add(e.n)
        out.append(e)
    return tuple(out)


def check_answer(answer: Any, packet: Any, *, on_report: CitationSink | None = None) -> CitationReport:
    """:func:`check_citations` over JSON input (HTTP, CLI): the answer and a packet's source list, both checked.

    Raises :class:`CitationInputError` for an answer that is not a
    non-empty string of at most :data:`MAX_ANSWER_CHARS` (or cites over
    the limits of :func:`check_citations`), or a packet
    :func:`sources_from` refuses; nothing is counted then.
    """
    if not isinstance(answer, str) or not answer.strip():
        raise CitationInputError("the answer is not a non-empty string")
    if len(answer) > MAX_ANSWER_CHARS:
        raise CitationInputError(f"the answer has {len(answer)} characters; at most {MAX_ANSWER_CHARS}")
    return check_citations(answer, sources_from(packet), on_report=on_report)
