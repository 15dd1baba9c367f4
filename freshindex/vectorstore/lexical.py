"""The lexical side of hybrid retrieval: tokens, and BM25 term weights as a sparse vector.

Pure functions, standard library only, the same on every engine.  A point's
*lexical text* (:func:`lexical_text`: title, heading path, text, the
identifiers the parsers recorded, and the document's file name; for a source
file's chunk its path and module-qualified symbol, :func:`code_names`) becomes a
sparse vector whose indices are hashed tokens and whose values are BM25's
term-frequency part; the engine multiplies in the IDF (the sparse vector is
configured with Qdrant's ``idf`` modifier), so the corpus statistics stay
exact as points come and go, and nothing is computed client-side that the
engine can do.  A query is its unique tokens, each with weight 1.

Tokens keep what documentation readers search for whole: ``DATABASES``,
``get_object_or_404``, ``max_connections``, ``--no-input``,
``django.db.models``, ``HttpResponse``, and also emit their parts
(``get``, ``object``, ``404``; ``no``, ``input``; ``http``, ``response``), so a
question naming the identifier exactly matches the one chunk that defines
it, and one naming its words still matches.  Everything is lower-cased;
there is no stemmer, only a symmetric plural fold (``connections`` and
``connection`` are one token).  Runs of CJK characters become character
bigrams (no word segmenter is needed).

What this does not guarantee: the hash is 32 bits, so two tokens can share
an index (for a 100k-token vocabulary the chance that a given query token
collides with some other token is about 2e-5); and scores are BM25 only up to
the engine's IDF formula, not another library's.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

#: Bumped whenever tokens or weights change: vectors of another version do not match.
#: 2: an upper-case plain plural (``DATABASES``) keeps its whole form beside the folded one.
#: 3: a name led by underscores keeps its dotted tail (``_base.py``, ``__init__.py``); a code chunk's lexical
#: text holds its file's path and its module-qualified symbol.
LEXICAL_VERSION = "3"

#: BM25 parameters (the classic defaults; ``AVG_LEN`` in tokens, near a chunk's length here).
K1 = 1.2
B = 0.75
AVG_LEN = 256.0

#: A lexical text longer than this is cut (a chunk is bounded long before it).
MAX_CHARS = 50_000
#: Raw words up to this long have their tokens memoised (a corpus repeats its words; longer ones rarely recur).
_MEMO_CHARS = 64
#: Longer whole tokens are dropped (their parts still count): no one searches for them.
MAX_TOKEN_LEN = 64

# A raw token: letters/digits joined by _ . - : / (an identifier, a dotted path, a flag),
# optionally led by one or two dashes (a command-line option).
_RAW = re.compile(r"-{0,2}[^\W_][\w]*(?:[.:\-/][\w]+)*|_+[^\W_][\w]*(?:[.:\-/][\w]+)*", re.UNICODE)
_PART = re.compile(r"[^\W_]+", re.UNICODE)
# camelCase and letter/digit boundaries inside one part: HttpResponse -> Http Response, utf8 stays.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_A-Za-z]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")

#: Words too common to say anything (English); IDF would weigh them near zero anyway,
#: but leaving them out of a query keeps an unanswerable question from matching on them.
STOPWORDS = frozenset(
    """a an and are as at be but by can could did do does doing for from had has have how i if in into is it
    its me my no not of on or our should so than that the their them then there these they this those to
    was we were what when where which who whom why will with would you your""".split()
)


@dataclass(frozen=True)
class SparseVector:
    """Indices (hashed tokens, unsigned 32-bit) and their weights, indices ascending."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __bool__(self) -> bool:
        return bool(self.indices)


def _fold(word: str) -> str:
    """The symmetric plural fold: ``connections`` -> ``connection``, ``policies`` -> ``policy``."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) and word.isalpha():
        return word[:-1]
    return word


def _cjk_tokens(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def tokenize(text: str) -> list[str]:
    """The lexical tokens of ``text``, in order, repeats kept (term frequency counts them)."""
    text = text[:MAX_CHARS]
    out: list[str] = []
    if not _CJK.search(text):  # most texts: no word needs the CJK split, so none is searched for it
        cached, extend = _word_tokens_cached, out.extend
        for raw in _RAW.findall(text):
            extend(cached(raw) if len(raw) <= _MEMO_CHARS else _word_tokens_uncached(raw))
        return out
    for m in _RAW.finditer(text):
        raw = m.group(0)
        if _CJK.search(raw):
            for piece in _PART.findall(raw):
                for run in _CJK.split(piece):
                    if run:
                        out.extend(_word_tokens(run))
                for run in _CJK.findall(piece):
                    out.extend(_cjk_tokens(run))
            continue
        out.extend(_word_tokens(raw))
    return out


def _word_tokens(raw: str) -> Sequence[str]:
    """The tokens of one raw word; memoised up to 64 characters (a corpus repeats its words,
    and a build tokenises every chunk for its sparse vector and again for the refusal's evidence)."""
    return _word_tokens_cached(raw) if len(raw) <= _MEMO_CHARS else _word_tokens_uncached(raw)


@lru_cache(maxsize=1 << 17)
def _word_tokens_cached(raw: str) -> tuple[str, ...]:
    return tuple(_word_tokens_uncached(raw))


def _word_tokens_uncached(raw: str) -> list[str]:
    if raw.isalpha() and (raw.islower() or raw.isupper() or raw[1:].islower()):
        # The common case, a plain word: no parts (fast path, same result as below).
        whole = raw.lower()
        if whole in STOPWORDS or len(whole) > MAX_TOKEN_LEN:
            return []
        folded = _fold(whole)
        if folded != whole and raw.isupper() and len(raw) > 3:
            # An upper-case plural is a name (the STORAGES or CACHES setting): kept whole beside the fold,
            # so the name matches itself and not only the common word.
            return [whole, folded]
        return [folded]
    whole = raw.lower().rstrip(".:-/")
    parts: list[str] = []
    for piece in _PART.findall(raw):
        sub = _CAMEL.findall(piece) or [piece]
        if len(sub) > 1:
            parts.append(piece.lower())
        parts.extend(s.lower() for s in sub)
    # A lone letter says nothing (``v`` of ``v2``, ``e`` of ``e.g``); a lone digit may (``404``).
    parts = [_fold(p) for p in parts if p not in STOPWORDS and (len(p) > 1 or p.isdigit() or _CJK.match(p))]
    compound = len(parts) != 1 or parts[0] != _fold(whole)
    tokens = []
    if compound and len(whole) <= MAX_TOKEN_LEN and whole not in STOPWORDS:
        tokens.append(whole)
    # A plain word is its folded self; a compound is itself plus its parts.
    if not compound:
        return [] if whole in STOPWORDS or len(whole) > MAX_TOKEN_LEN else [_fold(whole)]
    seen: set[str] = set(tokens)
    for p in parts:
        if p and len(p) <= MAX_TOKEN_LEN and p not in seen:
            seen.add(p)
            tokens.append(p)
    return tokens


@lru_cache(maxsize=1 << 16)
def token_index(token: str) -> int:
    """The sparse index of ``token``: 32 bits of its BLAKE2b hash (stable across processes and hosts)."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "big")


def _vector(weights: Mapping[int, float]) -> SparseVector:
    items = sorted(weights.items())
    return SparseVector(tuple(i for i, _ in items), tuple(float(w) for _, w in items))


def document_vector(text: str, *, k1: float = K1, b: float = B, avg_len: float = AVG_LEN) -> SparseVector:
    """BM25's term-frequency part for each token of ``text`` (the engine applies IDF)."""
    tokens = tokenize(text)
    if not tokens:
        return SparseVector((), ())
    norm = k1 * (1 - b + b * len(tokens) / avg_len)
    weights: dict[int, float] = {}
    for token, tf in Counter(tokens).items():
        idx = token_index(token)
        # On a hash collision the weights add: the index stands for both tokens.
        weights[idx] = weights.get(idx, 0.0) + tf * (k1 + 1) / (tf + norm)
    return _vector(weights)


def document_vectors(texts: Sequence[str],
                     version: str = LEXICAL_VERSION) -> list[tuple[tuple[int, ...], tuple[float, ...]]] | None:
    """:func:`document_vector` of each of ``texts`` as plain (indices, values) pairs, which pickle compactly:
    what a build's worker process sends back (:mod:`snapshots.sparse_ahead`).  None when ``version`` is not
    this module's :data:`LEXICAL_VERSION`: a worker running other code must not have its vectors written."""
    if version != LEXICAL_VERSION:
        return None
    out = []
    for text in texts:
        sv = document_vector(text)
        out.append((sv.indices, sv.values))
    return out


def query_vector(text: str) -> SparseVector:
    """Each unique token of ``text`` with weight 1."""
    return _vector({token_index(t): 1.0 for t in set(tokenize(text))})


def identifiers(meta: Mapping[str, Any] | None) -> list[str]:
    """Names the parsers recorded for a chunk: code symbols, members, signatures, table columns, captions."""
    if not meta:
        return []
    out: list[str] = []
    for key in ("symbol", "signature", "caption"):
        value = meta.get(key)
        if isinstance(value, str) and value and not value.startswith("<"):
            out.append(value)
    for key in ("members", "columns"):
        values = meta.get(key)
        if isinstance(values, list):
            out.extend(str(v) for v in values if isinstance(v, str | int) and str(v))
    return out


def lexical_text(*, text: str, title: str | None = None, heading_path: Sequence[str] = (), key: str = "",
                 meta: Mapping[str, Any] | None = None, extra: Iterable[str] = ()) -> str:
    """What the lexical side of a point indexes.

    Title, heading path and text, then the identifiers of :func:`identifiers`
    (a symbol name counts again, so a chunk defining it outweighs one that
    mentions it) and the document key's file name.  The path is lexical only:
    it never enters the dense text.
    """
    parts: list[str] = []
    if title:
        parts.append(title)
    parts.extend(h for h in heading_path if h)
    parts.append(text)
    parts.extend(identifiers(meta))
    parts.extend(x for x in extra if x)
    if key and _is_code(meta):
        # A source file's title is usually its path already: the path is not counted twice.
        parts.extend(n for n in code_names(key, meta) if n != title)
    elif key:
        parts.append(PurePosixPath(key).name)
    return "\n".join(parts)


def _is_code(meta: Mapping[str, Any] | None) -> bool:
    """Whether a chunk is a source file's (the code parser records its language and symbol)."""
    return meta is not None and isinstance(meta.get("language"), str) and isinstance(meta.get("symbol"), str)


#: Leading folders that hold a package rather than name it (``src/structlog/dev.py`` is ``structlog.dev``).
_SOURCE_ROOTS = frozenset({"src", "lib", "source", "sources", "pkg"})


def code_names(key: str, meta: Mapping[str, Any] | None) -> list[str]:
    """What a code chunk is called besides its text: its file's path (``src/structlog/dev.py``: the
    folders say what part of the project it is) and its module-qualified symbol
    (``structlog.dev.ConsoleRenderer``), so a question naming the module, the folder or the full
    dotted name finds it (:func:`lexical_text` leaves out the path when it is the chunk's title).  The module is the path without its suffix, a leading source folder or a
    package's ``__init__``: a guess for Python and JavaScript layouts, not an import path resolved."""
    path = PurePosixPath(key)
    out = [key] if path.name == key else [key, path.name]
    folders = [p for p in path.parent.parts if p not in ("", ".", "/")]
    if folders and folders[0] in _SOURCE_ROOTS:
        folders = folders[1:]
    stem = path.name.split(".", 1)[0]
    module = ".".join([*folders, *([stem] if stem and stem not in ("__init__", "index", "mod") else [])])
    symbol = (meta or {}).get("symbol")
    if module and isinstance(symbol, str) and symbol and not symbol.startswith("<"):
        out.append(f"{module}.{symbol}")
    elif module and "." in module:
        out.append(module)
    return out


def idf_from_hits(tokens: Sequence[str], indices: Sequence[int], answers: Sequence[Sequence[Any]],
                  sparse_of: Any) -> dict[str, float]:
    """token -> score / stored weight of its top hit: the engine's IDF, for tokens that have a hit.

    ``answers`` holds one ranked hit list per token, of single-token queries with weight 1;
    ``sparse_of`` reads a hit's lexical vector (``.indices``, ``.values``) from its ``vector``.
    """
    out: dict[str, float] = {}
    for token, index, hits in zip(tokens, indices, answers, strict=True):
        if not hits:
            continue
        vec = sparse_of(hits[0].vector)
        if vec is None:
            continue
        weights = dict(zip(vec.indices, vec.values, strict=False))
        weight = weights.get(index)
        if weight:
            out[token] = float(hits[0].score) / float(weight)
    return out



__all__ = ["LEXICAL_VERSION", "STOPWORDS", "SparseVector", "code_names", "document_vector", "document_vectors",
           "identifiers", "idf_from_hits", "lexical_text", "query_vector", "token_index", "tokenize"]
