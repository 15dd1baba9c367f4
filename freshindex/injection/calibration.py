"""Per-knowledge-base refusal calibration, computed from the knowledge base itself.

The refusal's weights (:mod:`injection.refusal`) were fitted on one corpus;
its threshold (the bias) does not transfer: how much of an answerable
question's wording the evidence holds, and how high BM25 scores per term,
depend on the corpus's vocabulary and chunk sizes.  So when a snapshot is
built (and by ``freshindex snapshots calibrate`` for one built before), the
bias is refitted on pseudo-questions made from the snapshot's own chunks:

* a deterministic sample (seeded by the snapshot id) of up to ``sample``
  chunks;
* for each, an *answerable* pseudo-question from its heading and its most
  distinctive terms (highest engine IDF among its own words) plus one or two
  words of other sampled chunks it does not hold (drawn uniformly over their
  vocabulary: a reader's wording, which real questions have), and a
  *perturbed* one that names an identifier the collection does not contain:
  one of the chunk's compound identifiers with its last part swapped for a
  distinctive word of another sampled chunk (``django.db.models`` ->
  ``django.db.<word>``; a chunk without one gets ``<its word>_<other word>``),
  kept only when the engine's IDF says no point holds it;
* each asked through the real query path (:class:`InjectionClient` over the
  new collection, refusal disabled, as a principal that may read the chunk),
  recording the score the refusal would give without its bias;
* the bias is the largest that refuses at most ``target`` of the answerable
  pseudo-questions that reached the decision (one with no admitted evidence
  is refused whatever the bias; counted apart as ``no_evidence_*``).  The
  record keeps the bias, the false-refusal share on the answerable ones and
  the refused share of the perturbed ones at it (and at the shipped bias),
  the counts and the seconds it took.

A knowledge base with fewer than ``min_chunks`` points keeps the shipped
policy (status ``too_small``): its refusal is never less conservative than
the no-admitted-evidence refusal, which applies whatever the bias.

What this does not guarantee: pseudo-questions are made of the chunk's own
words, so they are easier than real questions written in a reader's words;
the fitted bias may refuse more real answerable questions than ``target``.
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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from freshindex.acl import PUBLIC, Principal
from freshindex.acl.principal import USER_PREFIX
from freshindex.core.naming import Naming
from freshindex.core.payload import PayloadError, PointPayload
from freshindex.core.types import Embedder
from freshindex.injection.client import InjectionClient, QueryHooks, QueryTuning
from freshindex.injection.refusal import FUNCTION_WORDS, RefusalPolicy, Signals, question_terms
from freshindex.settings.sections.context import ContextSettings
from freshindex.vectorstore import lexical
from freshindex.vectorstore.base import LexicalStats, VectorStore

__all__ = ["CALIBRATION_VERSION", "Calibration", "PseudoSignals", "calibrate", "fit_bias", "pseudo_signals"]

#: Bumped when the pseudo-questions or the fit change: a record of another version is recomputed on request.
CALIBRATION_VERSION = 3  # 2: answerable pseudo-questions carry a reader's words; 3: the record says its weights

#: Distinctive-term candidates looked up per sampled chunk (one IDF batch for the whole sample).
_CANDIDATES = 12
_WORD = re.compile(r"^[^\W\d_]{4,}$", re.UNICODE)
#: The defaults, read from the ``context`` settings section (their one home).
_DEFAULTS = ContextSettings()


@dataclass(frozen=True)
class Calibration:
    """How to calibrate: the ``refusal_calibration_*`` settings of ``settings.context``."""

    enabled: bool = _DEFAULTS.refusal_calibration
    sample: int = _DEFAULTS.refusal_calibration_sample
    min_chunks: int = _DEFAULTS.refusal_calibration_min_chunks
    target_false_rate: float = _DEFAULTS.refusal_target_false_rate

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(enabled=bool(data.get("refusal_calibration", cls.enabled)),
                   sample=int(data.get("refusal_calibration_sample", cls.sample)),
                   min_chunks=int(data.get("refusal_calibration_min_chunks", cls.min_chunks)),
                   target_false_rate=float(data.get("refusal_target_false_rate", cls.target_false_rate)))


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
              settings: Calibration = Calibration(), min_score: float = _DEFAULTS.min_score, naming: Naming = Naming(),
              clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """The calibration record of ``collection`` (see the module docstring); never raises for a small corpus."""
    started = clock()
    base = {"version": CALIBRATION_VERSION, "snapshot_id": snapshot_id, "shipped_bias": policy.bias,
            "policy": policy.scoring(), "target_false_rate": settings.target_false_rate, "sample": settings.sample}
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
    asked = pseudo_signals(store, embedder, collection=collection, snapshot_id=snapshot_id, policy=policy,
                           sample=settings.sample, min_score=min_score, naming=naming)
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
            "shipped_perturbed_refused": _refused(per, policy.bias), "seconds": round(clock() - started, 3)}


def _sample(store: VectorStore, collection: str, size: int, rng: random.Random) -> list[PointPayload]:
    """A deterministic sample of up to ``size`` of the collection's points the builder wrote."""
    ids = sorted(store.iter_ids(collection))
    chosen = rng.sample(ids, min(size, len(ids)))
    by_id: dict[str, PointPayload] = {}
    for rec in store.retrieve(collection, chosen):
        try:
            by_id[rec.id] = PointPayload.from_dict(rec.payload)
        except PayloadError:  # not a point the builder wrote: nothing to ask about
            continue
    return [by_id[i] for i in chosen if i in by_id]


Asked = list[tuple[str, PointPayload]]


def _questions(store: LexicalStats, collection: str, chunks: Sequence[PointPayload],
               rng: random.Random) -> tuple[Asked, Asked]:
    """(answerable, perturbed) pseudo-questions of ``chunks`` (the module docstring says how)."""
    # Distinctive words: plain words of the chunk's text, rarest in the sample first, then by engine IDF.
    words = [[t for t in dict.fromkeys(lexical.tokenize(p.text)) if _WORD.match(t) and t not in FUNCTION_WORDS]
             for p in chunks]
    df = Counter(t for ws in words for t in ws)
    candidates = [sorted(ws, key=lambda t: (df[t], t))[:_CANDIDATES] for ws in words]
    idf = store.lexical_idf(collection, sorted({t for c in candidates for t in c}))
    distinct = [sorted((t for t in c if t in idf), key=lambda t: (-idf[t], t))[:3] for c in candidates]

    # A reader's words: real questions hold words their answer does not use, most of them ordinary words
    # rare in any one corpus ("opposed", "entirely"). Words of other sampled chunks, drawn uniformly over
    # the vocabulary (so mostly such rare ones), stand for them: one or two per question.
    common = sorted(df)
    answerable: Asked = []
    perturbed: Asked = []
    proposals: list[tuple[list[str], str, PointPayload]] = []
    for i, (p, terms) in enumerate(zip(chunks, distinct, strict=True)):
        if len(terms) < 2:
            continue
        heading = _heading(p)
        own = set(words[i])
        foreign = [t for t in rng.sample(common, min(len(common), 20)) if t not in own][: rng.choice((1, 2))]
        reader = " ".join(foreign)
        answerable.append((rng.choice((
            f"What does {heading} say about {terms[0]} and {terms[1]} {reader}?",
            f"How do {terms[0]} and {terms[1]} {reader} work in {heading}?",
            f"{heading}: {reader} {terms[0]} {terms[1]}",
        )), p))
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
    """The refusal's signals of a collection's pseudo-questions (None: no admitted evidence, refused anyway)."""

    answerable: list[Signals | None]
    perturbed: list[Signals | None]
    sampled: int

    def scores(self, policy: RefusalPolicy, which: str) -> list[float]:
        """Each pseudo-question's score under ``policy`` without its bias; ``-inf`` for one with no evidence."""
        return [policy.score(s) - policy.bias if s is not None else -math.inf for s in getattr(self, which)]


def pseudo_signals(store: VectorStore, embedder: Embedder, *, collection: str, snapshot_id: str,
                   policy: RefusalPolicy, sample: int = _DEFAULTS.refusal_calibration_sample,
                   min_score: float = _DEFAULTS.min_score, naming: Naming = Naming()) -> PseudoSignals:
    """The pseudo-questions of ``collection`` (the module docstring says how) asked through the real query path.

    The same sample and questions for the same ``snapshot_id``: a benchmark
    refitting the weights reads the signals the build's calibration read.
    ``policy`` gives what the signals depend on (depth, key-term rarity),
    not the weights.
    """
    if not isinstance(store, LexicalStats):
        raise TypeError("pseudo-questions need the engine's lexical statistics (a LexicalStats store)")
    rng = random.Random(_seed(snapshot_id))
    chunks = _sample(store, collection, sample, rng)
    answerable, perturbed = _questions(store, collection, chunks, rng)
    ask = _asker(store, embedder, collection, policy, min_score, naming)
    return PseudoSignals(ask(answerable), ask(perturbed), len(chunks))


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
