"""The citation check's input limits: bounded work per answer, and brackets that are not citations.

Review findings 3 (chained ranges made the check quadratic) and 4 (a
bracketed date raised ValueError instead of being read as text).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from freshindex.injection.citations import (
    MAX_ANSWER_CHARS,
    MAX_CITED_NUMBERS,
    MAX_DISTINCT_CITED,
    CitationInputError,
    check_answer,
    check_citations,
    cited_numbers,
    malformed_citations,
)

PACKET = {"evidence": [{"n": 1, "chunk_id": "c1", "score": 0.9, "text": "Backups run nightly at two.", "key": "k",
                        "snapshot_id": "kb-v1"}]}


def _chained_ranges() -> str:
    """A 50 KB answer of 100-wide ranges: every number up to 9999, then the tail range again and again."""
    s, lo = "word word ", 0
    while len(s) < MAX_ANSWER_CHARS - 20:
        if lo + 100 <= 9999:
            s, lo = s + f"[{lo}-{lo + 100}]", lo + 101
        else:
            s += "[9899-9999]"
    return s


def test_an_answer_of_chained_ranges_is_refused_before_it_is_expanded() -> None:
    heard: list[object] = []
    with pytest.raises(CitationInputError, match="more than"):
        check_answer(_chained_ranges(), PACKET, on_report=heard.append)
    assert heard == []  # nothing counted


def test_too_many_distinct_numbers_are_refused() -> None:
    answer = "Backups run nightly " + "".join(f"[{n}]" for n in range(1, MAX_DISTINCT_CITED + 2)) + "."
    with pytest.raises(CitationInputError, match="distinct"):
        check_answer(answer, PACKET)
    ok = "Backups run nightly " + "".join(f"[{n}]" for n in range(1, MAX_DISTINCT_CITED + 1)) + "."
    assert len(check_answer(ok, PACKET).cited) == MAX_DISTINCT_CITED


def test_the_expansion_limit_counts_every_citation_and_a_long_honest_answer_passes() -> None:
    with pytest.raises(CitationInputError):
        cited_numbers("[1]" * (MAX_CITED_NUMBERS + 1), limit=MAX_CITED_NUMBERS)
    assert cited_numbers("[1-101]", limit=101) == list(range(1, 102))
    honest = "Backups run nightly at two [1]. " * 1500  # 1,500 citations, 48 KB
    report = check_answer(honest[:MAX_ANSWER_CHARS], PACKET)
    assert report.ok and report.cited == (1,)


def test_a_bracketed_date_is_text_not_a_citation() -> None:
    assert cited_numbers("released [2024-01-15], see [1]") == [1]
    assert cited_numbers("[1-2-3] [1, 2-3-4] [3-4]") == [3, 4]
    report = check_answer("Backups run nightly at two [1]. The policy changed [2024-01-15].", PACKET)
    assert report.cited == (1,) and report.missing == () and report.uncited_sentences == 1


_BRACKETS = st.lists(st.sampled_from(["[", "]", "-", "–", ",", ";", " ", "1", "7", "2024", "01", "a", "."]),
                     max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(_BRACKETS)
@example("[2024-01-15] [1-2-3, 4]")
def test_any_bracket_text_is_read_or_refused_never_a_crash(text: str) -> None:
    numbers = cited_numbers(text)
    assert all(isinstance(n, int) and 0 <= n <= 9999 for n in numbers)
    try:
        report = check_answer("word " + text, PACKET)
    except CitationInputError:
        return
    assert set(report.missing) <= set(report.cited)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9999), st.integers(0, 9999)), min_size=1, max_size=40))
def test_ranges_expand_as_written(pairs: list[tuple[int, int]]) -> None:
    text = " ".join(f"[{a}-{b}]" for a, b in pairs)
    expected: list[int] = []
    malformed = 0
    for a, b in pairs:
        if b < a or a == 0 or b - a + 1 > MAX_DISTINCT_CITED:  # reversed, zero, over the cap: cite nothing
            malformed += 1
            continue
        expected += list(range(a, b + 1)) if b - a <= 100 else [a, b]
    assert cited_numbers(text) == expected
    assert len(malformed_citations(text)) == malformed
    if len(set(expected)) > MAX_DISTINCT_CITED:
        with pytest.raises(CitationInputError):
            check_citations("Backups run " + text, [])
        return
    report = check_citations("Backups run " + text, [])
    assert list(report.cited) == list(dict.fromkeys(expected))
    assert len(report.malformed) == malformed and (report.ok is False or not pairs)
