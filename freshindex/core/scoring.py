"""The one scorer of a question's evidence: is it on the expected page, does it hold the passage, at what rank.

``freshindex eval``, the canaries that gate a swap (``snapshots.verify``) and the benchmarks
(``bench.transfer``, ``bench.versions``) score through these functions, so a hit means the same everywhere.
It lives in ``core`` because both the evaluation part and ``snapshots`` use it:

* an item is ON the expected document when its key is the expected key or ends with ``/`` + it (a key
  given relative to the source's root); with an expected ``page`` (a PDF page), the item's cited page
  range must also contain it;
* a passage is HELD by an item when, with whitespace and table pipes removed (:func:`norm`: the chunker
  lays tables out as Markdown and the code highlighter splits tokens), it is inside the item's text; on
  an item read by OCR, when :data:`OCR_PASSAGE_MATCH` of its characters align in order (OCR misreads
  glyphs that a passage copied from a text layer has);
* rank: the 1-based position of the first item on the expected document; reciprocal rank 0 without one.

An item is anything with ``key``, ``text`` and optionally ``page``, ``page_end``, ``ocr``: an
:class:`~injection.types.Evidence` or a mapping with those keys (a benchmark's recorded row).  What this
module does not do: ask the question (the evaluator does) or decide what a miss means (the diagnosis does).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["OCR_PASSAGE_MATCH", "QuestionScore", "holds", "key_matches", "norm", "on_expected", "rank_of",
           "score_items"]

#: An OCR-read item holds a passage when this share of the passage's characters aligns with its text in order.
OCR_PASSAGE_MATCH = 0.9


#: What the chunker's layout adds around a page's words: whitespace, a Markdown table's pipes (and the backslash
#: escaping a pipe inside a cell, ``a \\| b``), and the colon after a definition-list term (``SEND_ERROR: CMake
#: Error, ...`` for ``<dt>SEND_ERROR</dt><dd>CMake Error, ...</dd>``).
_LAYOUT = re.compile(r"[\s|:]+|\\(?=\|)")


def norm(text: str) -> str:
    """The layout removed (:data:`_LAYOUT`): a passage matches however the chunker laid the text out."""
    return _LAYOUT.sub("", text)


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def key_matches(key: str, expected_key: str) -> bool:
    """Whether document ``key`` is ``expected_key`` (equal, or ending with ``/`` + it)."""
    return key == expected_key or key.endswith("/" + expected_key)


def on_expected(item: Any, expected_key: str, page: int | None = None) -> bool:
    """Whether ``item`` is on the expected document (and, with ``page``, cites a page range holding it)."""
    if not key_matches(str(_get(item, "key") or ""), expected_key):
        return False
    if page is None:
        return True
    first = _get(item, "page")
    if first is None:
        return False
    return int(first) <= page <= int(_get(item, "page_end") or first)


def holds(passage: str, item: Any) -> bool:
    """Whether ``item``'s text holds ``passage`` (either form: it is normalised here), exactly or up to OCR."""
    wanted = norm(passage)
    text = norm(str(_get(item, "text") or ""))
    if wanted in text:
        return True
    if not _get(item, "ocr") or not wanted:
        return False
    blocks = difflib.SequenceMatcher(None, wanted, text, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks) >= OCR_PASSAGE_MATCH * len(wanted)


def rank_of(items: Sequence[Any], expected_keys: Sequence[str], page: int | None = None) -> int | None:
    """1-based position of the first item on one of ``expected_keys``; None when none is."""
    for i, item in enumerate(items, 1):
        if any(on_expected(item, k, page) for k in expected_keys):
            return i
    return None


@dataclass(frozen=True)
class QuestionScore:
    """How one ranked list of items scores against a question's expected document and passage.

    ``hit``: an item within ``k`` is on the document; ``passage``: an item within ``k`` on the document holds
    the passage (None without a passage); ``passage_exact``: the same without the OCR allowance;
    ``passage_any``: an item within ``k`` holds it, on whatever document; ``rank``: the first item on the
    document over the whole list; ``rr``: 1 / ``rank`` (0 without one).
    """

    hit: bool
    passage: bool | None
    passage_exact: bool | None
    passage_any: bool | None
    rank: int | None
    rr: float

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def score_items(items: Sequence[Any], expected_key: str, passage: str | None = None, *, page: int | None = None,
                k: int | None = None) -> QuestionScore:
    """Score ``items`` (best first) against ``expected_key`` (and ``page``) and ``passage``, at cut-off ``k``.

    ``k`` None: the whole list.  The rank and reciprocal rank are read over the whole list (ask a deeper
    list for MRR@10 than for hit@5), the hit and passage within ``k``.
    """
    top = list(items)[:k] if k is not None else list(items)
    rank = rank_of(items, [expected_key], page)
    on = [it for it in top if on_expected(it, expected_key, page)]
    if passage:
        wanted = norm(passage)
        exact: bool | None = any(wanted in norm(str(_get(it, "text") or "")) for it in on)
        held: bool | None = exact or any(holds(passage, it) for it in on)
        any_doc: bool | None = any(wanted in norm(str(_get(it, "text") or "")) for it in top)
    else:
        held = exact = any_doc = None
    return QuestionScore(hit=bool(on), passage=held, passage_exact=exact if passage else None,
                         passage_any=any_doc, rank=rank, rr=1.0 / rank if rank else 0.0)
