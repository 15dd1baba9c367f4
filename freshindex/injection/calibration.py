"""Per-knowledge-base refusal calibration, computed from the knowledge base itself.

The refusal's weights (:mod:`injection.refusal`) were fitted on one corpus;
its threshold (the bias) does not transfer: how much of an answerable
question's wording the evidence holds, and how high BM25 scores per term,
depend on the corpus's vocabulary and chunk sizes.  So when a snapshot is
built (and by ``freshindex snapshots calibrate`` for one built before), the
bias is refitted on pseudo-questions made from the snapshot's own chunks:

* a deterministic sample (seeded by the snapshot id) of up to ``sample``
  chunks, drawn per content kind (:func:`content_kind`: code, prose, table)
  in proportion to the kind's share of the knowledge base (estimated on a
  seeded survey of :data:`SURVEY` times the sample; every kind present gets
  at least one), so a code-heavy repository is calibrated on code questions;
* for each, an *answerable* pseudo-question phrased as a reader would ask
  it, not in the chunk's own spelling: the words of its section (heading
  path, title) and two of its distinctive words, where an identifier is
  written as the words it is made of (``add_log_level`` -> "add log level")
  and one word, half the time, in another form of the same stem
  (``cache`` -> "caching", :func:`reader_form`); code asks what does a
  thing, prose what a section says, a table what a column holds; plus one
  or two words of other sampled chunks it does not hold (drawn uniformly
  over their vocabulary: a reader's wording, which real questions have),
  and a *perturbed* one that names an identifier the collection does not contain:
  one of the chunk's compound identifiers with its last part swapped for a
  distinctive word of another sampled chunk (``django.db.models`` ->
  ``django.db.<word>``; a chunk without one gets ``<its word>_<other word>``),
  kept only when the engine's IDF says no point holds it;
* each asked through the real query path (:class:`InjectionClient` over the
  new collection, refusal disabled, as a principal that may read the chunk),
  recording the score the refusal would give without its bias;
* only ``perturbed`` (``context.refusal_calibration_perturbed``) of the perturbed questions are asked, at
  even steps over the sample: they report what the bias buys and are never fitted on;
* the bias is the largest that refuses at most ``target`` of the answerable
  pseudo-questions that reached the decision (one with no admitted evidence
  is refused whatever the bias; counted apart as ``no_evidence_*``).  The
  record keeps the bias, the false-refusal share on the answerable ones and
  the refused share of the perturbed ones at it (and at the shipped bias),
  the same per content kind (``kinds``: the kind's share of the survey, its
  questions and their false-refusal share at the bias), the counts and the
  seconds it took.

A knowledge base with fewer than ``min_chunks`` points keeps the shipped
policy (status ``too_small``): its refusal is never less conservative than
the no-admitted-evidence refusal, which applies whatever the bias.

What this does not guarantee: pseudo-questions are still made of the chunk's
and its section's words (respelt, never paraphrased by meaning), so they are
easier than real questions written in a reader's words; the fitted bias may
refuse more real answerable questions than ``target``.  One bias is fitted
for all kinds together: the per-kind figures say where it refuses most.
The perturbed share is reported to show what the bias buys, not fitted on.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from freshindex.acl import PUBLIC, Principal
from freshindex.acl.principal import USER_PREFIX
from freshindex.core.naming import Naming
from freshindex.core.payload import PayloadError, PointPayload
from freshindex.core.types import Embedder
from freshindex.injection.client import InjectionClient, QueryHooks, QueryTuning
from freshindex.injection.refusal import (
    FUNCTION_WORDS,
    RefusalPolicy,
    Signals,
    forget_evidence,
    ordinary_words,
    question_terms,
    stem,
)
from freshindex.settings.sections.context import ContextSettings
from freshindex.vectorstore import lexical
from freshindex.vectorstore.base import LexicalStats, VectorStore

__all__ = ["CALIBRATION_VERSION", "KINDS", "SURVEY", "Calibration", "PseudoSignals", "calibrate", "content_kind",
           "fit_bias", "pseudo_signals", "reader_form"]

#: Bumped when the pseudo-questions or the fit change: a record of another version is recomputed on request.
CALIBRATION_VERSION = 5  # 2: answerable pseudo-questions carry a reader's words; 3: the record says its weights;
#: 4: sampled per content kind, phrased in a reader's spelling; 5: ``perturbed_sample`` of the perturbed ones asked

#: Distinctive-term candidates looked up per sampled chunk (one IDF batch for the whole sample).
_CANDIDATES = 12
_WORD = re.compile(r"^[^\W\d_]{4,}$", re.UNICODE)
#: The content kinds sampled apart, in proportion to their share of the knowledge base.
KINDS = ("code", "prose", "table")
#: The survey that estimates each kind's share: this many times the sample, seeded like it.
SURVEY = 4
#: The defaults, read from the ``context`` settings section (their one home).
_DEFAULTS = ContextSettings()


@dataclass(frozen=True)
class Calibration:
    """How to calibrate: the ``refusal_calibration_*`` settings of ``settings.context``.

    ``min_score`` is the dense floor the pseudo-questions are asked with: ``context.min_score``, the floor the
    knowledge base's real questions are asked with, so the fitted bias is fitted on the signals it will judge.
    """

    enabled: bool = _DEFAULTS.refusal_calibration
    sample: int = _DEFAULTS.refusal_calibration_sample
    perturbed: int | None = _DEFAULTS.refusal_calibration_perturbed  # None: every perturbed question
    min_chunks: int = _DEFAULTS.refusal_calibration_min_chunks
    target_false_rate: float = _DEFAULTS.refusal_target_false_rate
    min_score: float = _DEFAULTS.min_score

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(enabled=bool(data.get("refusal_calibration", cls.enabled)),
                   sample=int(data.get("refusal_calibration_sample", cls.sample)),
                   perturbed=int(data.get("refusal_calibration_perturbed", cls.perturbed)),
                   min_chunks=int(data.get("refusal_calibration_min_chunks", cls.min_chunks)),
                   target_false_rate=float(data.get("refusal_target_false_rate", cls.target_false_rate)),
                   min_score=float(data.get("min_score", cls.min_score)))


class _Pinned:
    """A store whose every alias points at one collection: the client queries a version before it serves."""

    def __init__(self, store: VectorStore, collection: str) -> None:
        self._store, self._collection = store, collection

    def get_alias(self, alias: str) -> str | None:
        return self._collection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _principal(payload: PointPayload) -> Principal:
    """A principal that may read ``payload``'s point: its groups, its user, its tenant."""
    acl = [a for a in payload.acl if a != PUBLIC]
    users = [a[len(USER_PREFIX):] for a in acl if a.startswith(USER_PREFIX)]
    return Principal.of(users[0] if users else "calibration", [a for a in acl if ":" not in a],
                        tenant=payload.tenant)


def _seed(snapshot_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(snapshot_id.encode(), digest_size=8).digest(), "big")


def _heading(p: PointPayload) -> str:
    for h in reversed(tuple(p.heading_path or ())):
        if h and h.strip():
            return " ".join(h.split()[:8])
    if p.title:
        return " ".join(p.title.split()[:8])
    return p.key.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def _compounds(p: PointPayload) -> list[str]:
    """The chunk's compound identifiers (whole tokens with parts), symbols the parser recorded first."""
    text = lexical.lexical_text(text=p.text, meta=p.meta)
    _terms, compounds = question_terms(text)
    symbols = [t for s in lexical.identifiers(p.meta) for t in question_terms(s)[1]]
    return list(dict.fromkeys([*symbols, *compounds]))


def _mutations(whole: str, parts: Sequence[str], other: str) -> list[str]:
    """``whole`` with its last part replaced by ``other`` (keeping the separator), then appended."""
    out = []
    last = parts[-1] if parts else ""
    if last and whole.endswith(last) and len(whole) > len(last):
        out.append(whole[: len(whole) - len(last)] + other)
    sep = "." if "." in whole else "_"
    out.append(f"{whole}{sep}{other}")
    return out


def fit_bias(answerable: Sequence[float], target: float) -> float | None:
    """The largest bias that refuses at most ``target`` of ``answerable`` (scores without bias; -inf: refused anyway).

    Refusal is ``bias + score < 0``.  None when no score is finite.
    """
    finite = sorted(s for s in answerable if math.isfinite(s))
    if not finite:
        return None
    allowed = max(math.floor(target * len(answerable) + 1e-9) - (len(answerable) - len(finite)), 0)
    return -finite[min(allowed, len(finite) - 1)]


def calibrate(store: VectorStore, embedder: Embedder, *, collection: str, snapshot_id: str, policy: RefusalPolicy,
              settings: Calibration = Calibration(), naming: Naming = Naming(),
              clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """The calibration record of ``collection`` (see the module docstring); never raises for a small corpus."""
    started = clock()
    base = {"version": CALIBRATION_VERSION, "snapshot_id": snapshot_id, "shipped_bias": policy.bias,
            "policy": policy.scoring(), "target_false_rate": settings.target_false_rate, "sample": settings.sample,
            "perturbed_sample": settings.perturbed}
    points = store.count(collection)

    def done(status: str, **fields: Any) -> dict[str, Any]:
        return {**base, "status": status, "bias": None, "points": points, **fields,
                "seconds": round(clock() - started, 3)}

    if not settings.enabled:
        return done("skipped")
    if not isinstance(store, LexicalStats):  # distinctive words need the engine's IDF
        return done("skipped", reason="the vector store has no lexical statistics")
    if points < settings.min_chunks:
        return done("too_small", min_chunks=settings.min_chunks)
    try:
        asked = pseudo_signals(store, embedder, collection=collection, snapshot_id=snapshot_id, policy=policy,
                               settings=settings, naming=naming)
    finally:
        # The memo the questions filled (about 20 MB of chunk texts and token sets on a 14k-chunk manual) is
        # let go: a process that goes on to sync would carry it into its next build.  A reader tokenizes again.
        forget_evidence()
    every_ans, every_per = asked.scores(policy, "answerable"), asked.scores(policy, "perturbed")
    # Only questions that reached the decision say anything about the bias: one with no admitted evidence
    # is refused whatever the bias (counted apart, as no_evidence).
    ans = [x for x in every_ans if math.isfinite(x)]
    per = [x for x in every_per if math.isfinite(x)]
    counts = {"answerable": len(ans), "perturbed": len(per), "no_evidence_answerable": len(every_ans) - len(ans),
              "no_evidence_perturbed": len(every_per) - len(per)}
    bias = fit_bias(ans, settings.target_false_rate)
    if bias is None:
        return done("no_signal", **counts)
    return {**base, "status": "calibrated", "bias": round(bias, 4), "points": points, "sampled": asked.sampled,
            **counts, "false_refusals": _refused(ans, bias), "perturbed_refused": _refused(per, bias),
            "shipped_false_refusals": _refused(ans, policy.bias),
            "shipped_perturbed_refused": _refused(per, policy.bias), "kinds": _by_kind(asked, policy, bias),
            "seconds": round(clock() - started, 3)}


def _by_kind(asked: PseudoSignals, policy: RefusalPolicy, bias: float) -> dict[str, dict[str, Any]]:
    """Per content kind sampled: its share of the survey, its questions, and their refused shares at ``bias``."""
    total = sum(asked.surveyed.values())
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        if not asked.surveyed.get(kind):
            continue
        every = asked.scores(policy, "answerable", kind)
        ans = [x for x in every if math.isfinite(x)]
        per = [x for x in asked.scores(policy, "perturbed", kind) if math.isfinite(x)]
        out[kind] = {"share": round(asked.surveyed[kind] / total, 4), "answerable": len(ans),
                     "no_evidence_answerable": len(every) - len(ans), "false_refusals": _refused(ans, bias),
                     "perturbed": len(per), "perturbed_refused": _refused(per, bias)}
    return out


def content_kind(p: PointPayload) -> str:
    """What a chunk is, as the calibration samples it: ``code`` (a code block, a source file's symbol), ``table``
    (a table, a row of a CSV file) or ``prose`` (everything else: paragraphs, lists, headings, mixed)."""
    if p.kind == "code" or p.meta.get("symbol"):
        return "code"
    if p.kind in ("table", "table_row"):
        return "table"
    return "prose"


def _quotas(counts: Mapping[str, int], size: int) -> dict[str, int]:
    """``size`` shared among the kinds in proportion to ``counts`` (largest remainder), at least one per kind present."""
    total = sum(counts.values())
    present = [k for k in KINDS if counts.get(k)]
    if not total or size <= 0:
        return dict.fromkeys(KINDS, 0)
    raw = {k: size * counts[k] / total for k in present}
    out = {k: max(1, math.floor(raw[k])) for k in present}
    for k in sorted(present, key=lambda k: (-(raw[k] - math.floor(raw[k])), k)):
        if sum(out.values()) >= size:
            break
        out[k] += 1
    return {k: min(out.get(k, 0), counts.get(k, 0)) for k in KINDS}


def _sample(store: VectorStore, collection: str, size: int,
            rng: random.Random) -> tuple[list[PointPayload], dict[str, int]]:
    """A deterministic sample of up to ``size`` of the collection's points the builder wrote, per content kind in
    proportion to a seeded survey of :data:`SURVEY` times as many (and that survey's count per kind)."""
    ids = sorted(store.iter_ids(collection))
    surveyed_ids = rng.sample(ids, min(size * SURVEY, len(ids)))
    by_id: dict[str, PointPayload] = {}
    for rec in store.retrieve(collection, surveyed_ids):
        try:
            by_id[rec.id] = PointPayload.from_dict(rec.payload)
        except PayloadError:  # not a point the builder wrote: nothing to ask about
            continue
    surveyed = [by_id[i] for i in surveyed_ids if i in by_id]
    counts = Counter(content_kind(p) for p in surveyed)
    left = _quotas(counts, min(size, len(surveyed)))
    chosen = []
    for p in surveyed:  # the survey's (seeded) order, each kind up to its quota
        kind = content_kind(p)
        if left[kind] > 0:
            left[kind] -= 1
            chosen.append(p)
    return chosen, {k: counts.get(k, 0) for k in KINDS}


Asked = list[tuple[str, PointPayload]]

_LETTERS = re.compile(r"[^\W\d_]+", re.UNICODE)
_CAMEL_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
#: Endings a reader's form of a word may swap (``cache`` -> "caching", "cached"; ``parsing`` -> "parse").
_ENDINGS = ("ing", "ed", "er", "ion", "e")


def _as_words(text: str, limit: int = 6) -> str:
    """``text`` as a reader writes it: identifiers split into their words (``add_log_level``, ``addLogLevel``
    -> "add log level"), lower case, function words out, at most ``limit`` words."""
    words = [w.lower() for piece in _LETTERS.findall(text) for w in _CAMEL_WORDS.findall(piece) or [piece]]
    return " ".join([w for w in words if w not in FUNCTION_WORDS and w not in lexical.STOPWORDS][:limit])


def reader_form(word: str, rng: random.Random, vocabulary: AbstractSet[str]) -> str:
    """Another spelling of ``word`` with the same stem (``cache`` -> "caching"), as a reader may write it: a
    word of ``vocabulary`` (general English and the knowledge base's own words); ``word`` when none is."""
    base = stem(word)
    roots = {word, word[:-1] if word.endswith("e") else word, word + word[-1]}  # emit -> emitting
    roots |= {word[: -len(e)] for e in _ENDINGS if word.endswith(e) and len(word) - len(e) >= 3}
    forms = {r + e for r in roots for e in ("", *_ENDINGS)} - {word}
    known = sorted(f for f in forms if f in vocabulary and stem(f) == base)
    return rng.choice(known) if known else word


def _section(p: PointPayload) -> str:
    """The words of the chunk's section: its heading path (innermost last) or title, written as words."""
    return _as_words(" ".join([*(p.heading_path or ())[-2:], p.title or ""]) or _heading(p)) or _as_words(_heading(p))


def _phrase(kind: str, section: str, a: str, b: str, reader: str, p: PointPayload, rng: random.Random) -> str:
    """An answerable pseudo-question of one content kind, in a reader's words."""
    if kind == "code":
        return rng.choice((f"How do I {a} the {b} {reader} in {section}?",
                           f"Which function handles {a} and {b} {reader} for {section}?",
                           f"{section}: what does it do with {a} {b} {reader}?"))
    if kind == "table":
        columns = [str(c) for c in p.meta.get("columns") or [] if str(c).strip()]
        column = _as_words(rng.choice(columns), 3) if columns else "value"
        return rng.choice((f"What {column} does the {section} table give for {a} {b} {reader}?",
                           f"In the {section} table, which {column} goes with {a} and {b} {reader}?"))
    return rng.choice((f"What does {section} say about {a} and {b} {reader}?",
                       f"How do {a} and {b} {reader} work in {section}?",
                       f"{section}: {reader} {a} {b}"))


def _distinctive(store: LexicalStats, collection: str, chunks: Sequence[PointPayload]) -> tuple[list[list[str]], list[list[str]]]:
    """(each chunk's plain words, its three most distinctive: rarest in the sample, then by engine IDF).

    Words only, never an identifier whole: a reader names ``add_log_level`` as "add log level", so the parts
    of a compound count and the compound does not."""
    words = []
    for p in chunks:
        _terms, compounds = question_terms(p.text)
        words.append([t for t in dict.fromkeys(lexical.tokenize(p.text))
                      if _WORD.match(t) and t not in FUNCTION_WORDS and t not in compounds])
    df = Counter(t for ws in words for t in ws)
    candidates = [sorted(ws, key=lambda t: (df[t], t))[:_CANDIDATES] for ws in words]
    idf = store.lexical_idf(collection, sorted({t for c in candidates for t in c}))
    return words, [sorted((t for t in c if t in idf), key=lambda t: (-idf[t], t))[:3] for c in candidates]


def _questions(store: LexicalStats, collection: str, chunks: Sequence[PointPayload],
               rng: random.Random) -> tuple[Asked, Asked]:
    """(answerable, perturbed) pseudo-questions of ``chunks`` (the module docstring says how)."""
    words, distinct = _distinctive(store, collection, chunks)
    # A reader's words: real questions hold words their answer does not use, most of them ordinary words
    # rare in any one corpus ("opposed", "entirely"). Words of other sampled chunks, drawn uniformly over
    # the vocabulary (so mostly such rare ones), stand for them: one or two per question.
    common = sorted({t for ws in words for t in ws})
    vocabulary = ordinary_words() | set(common)
    answerable: Asked = []
    perturbed: Asked = []
    proposals: list[tuple[list[str], str, PointPayload]] = []
    for i, (p, terms) in enumerate(zip(chunks, distinct, strict=True)):
        if len(terms) < 2:
            continue
        heading = _heading(p)
        own = set(words[i])
        foreign = [t for t in rng.sample(common, min(len(common), 20)) if t not in own][: rng.choice((1, 2))]
        a, b = terms[0], terms[1]
        if rng.random() < 0.5:  # one word in another form of its stem, as readers write it
            a = reader_form(a, rng, vocabulary)
        answerable.append((_phrase(content_kind(p), _section(p) or heading, a, b, " ".join(foreign), p, rng), p))
        others = [w for j, d in enumerate(distinct) if j != i for w in d[:1]]
        if not others:
            continue
        other = rng.choice(others)
        compounds = _compounds(p)
        forms: list[str] = []
        if compounds:
            whole = rng.choice(compounds)
            forms = _mutations(whole, question_terms(whole)[1].get(whole, ()), other)
        forms.append(f"{terms[0]}_{other}")
        proposals.append((forms, heading, p))
    present = store.lexical_idf(collection, sorted({f.lower() for forms, _h, _p in proposals for f in forms}))
    for forms, heading, p in proposals:
        absent = [f for f in forms if f.lower() not in present and lexical.tokenize(f)[:1] == [f.lower()]]
        if absent:
            perturbed.append((f"What does {absent[0]} do in {heading}?", p))
    return answerable, perturbed


@dataclass(frozen=True)
class PseudoSignals:
    """The refusal's signals of a collection's pseudo-questions (None: no admitted evidence, refused anyway).

    ``*_kinds``: each question's content kind (:func:`content_kind` of its chunk), in the same order;
    ``surveyed``: the survey's count of points per kind (the shares the sample follows)."""

    answerable: list[Signals | None]
    perturbed: list[Signals | None]
    sampled: int
    answerable_kinds: list[str] = field(default_factory=list)
    answerable_questions: list[str] = field(default_factory=list)
    perturbed_kinds: list[str] = field(default_factory=list)
    surveyed: dict[str, int] = field(default_factory=dict)

    def scores(self, policy: RefusalPolicy, which: str, kind: str | None = None) -> list[float]:
        """Each pseudo-question's score under ``policy`` without its bias; ``-inf`` for one with no evidence
        (``kind``: only the questions of that content kind)."""
        kinds = getattr(self, f"{which}_kinds") or [None] * len(getattr(self, which))
        return [policy.score(s) - policy.bias if s is not None else -math.inf
                for s, k in zip(getattr(self, which), kinds, strict=True) if kind is None or k == kind]


def pseudo_signals(store: VectorStore, embedder: Embedder, *, collection: str, snapshot_id: str,
                   policy: RefusalPolicy, settings: Calibration = Calibration(),
                   naming: Naming = Naming()) -> PseudoSignals:
    """The pseudo-questions of ``collection`` (the module docstring says how) asked through the real query path.

    The same sample and questions for the same ``snapshot_id``: a benchmark
    refitting the weights reads the signals the build's calibration read.
    ``policy`` gives what the signals depend on (depth, key-term rarity),
    not the weights.  ``settings``: the sample's size, the dense floor the questions are asked with, and how
    many of the perturbed questions are asked, spread evenly over the sample (``perturbed`` None: all; the
    answerable ones, the only ones the bias is fitted on, are the same either way).
    """
    if not isinstance(store, LexicalStats):
        raise TypeError("pseudo-questions need the engine's lexical statistics (a LexicalStats store)")
    rng = random.Random(_seed(snapshot_id))
    chunks, surveyed = _sample(store, collection, settings.sample, rng)
    answerable, absent = _questions(store, collection, chunks, rng)
    absent = _spread(absent, settings.perturbed)
    ask = _asker(store, embedder, collection, policy, settings.min_score, naming)
    return PseudoSignals(ask(answerable), ask(absent), len(chunks),
                         answerable_kinds=[content_kind(p) for _q, p in answerable],
                         answerable_questions=[q for q, _p in answerable],
                         perturbed_kinds=[content_kind(p) for _q, p in absent], surveyed=surveyed)


def _spread(items: Asked, k: int | None) -> Asked:
    """``k`` of ``items`` at even steps, in the sample's seeded order: each kind keeps about its share (a kind
    sampled once may lose its one perturbed question, and its ``kinds`` row then reports none)."""
    if k is None or k >= len(items):
        return list(items)
    return [items[i * len(items) // k] for i in range(k)]


def _asker(store: VectorStore, embedder: Embedder, collection: str, policy: RefusalPolicy, min_score: float,
           naming: Naming) -> Callable[[Asked], list[Signals | None]]:
    """Asks questions through the real query path on ``collection``; each one's refusal signals.

    The path up to the refusal's signals (:meth:`InjectionClient.evidence_signals`: search, recheck,
    admission), not the assembly after it.  None for a question with no admitted evidence (refused
    whatever the bias).
    """
    batched = _Batched(embedder)
    client = InjectionClient(_Pinned(store, collection), batched,
                             QueryTuning(min_score=min_score, refusal=replace(policy, enabled=False)),
                             QueryHooks(naming=naming))

    def ask(questions: Asked) -> list[Signals | None]:
        batched.prepare([question for question, _p in questions])
        return [client.evidence_signals(question, kb=p.kb, principal=_principal(p), limit=5)
                for question, p in questions]

    return ask


class _Batched:
    """An embedder whose vectors for the questions about to be asked come from one batched call.

    The client embeds one question per query; a remote embedder would make
    one request per pseudo-question.  :meth:`prepare` embeds them all in one
    call (the embedder batches by its own limits) and :meth:`embed` answers
    from it, asking the model only for a text it was not given.
    """

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._ready: dict[str, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    def prepare(self, texts: Sequence[str]) -> None:
        todo = list(dict.fromkeys(texts))
        self._ready = dict(zip(todo, self._embedder.embed(todo), strict=True)) if todo else {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if all(t in self._ready for t in texts):
            return np.stack([self._ready[t] for t in texts]) if texts else self._embedder.embed(texts)
        return self._embedder.embed(texts)


def _refused(values: Sequence[float], bias: float) -> float | None:
    """The share of ``values`` (scores without bias) that ``bias`` refuses."""
    return round(sum(1 for s in values if bias + s < 0) / len(values), 4) if values else None
