"""A cross-encoder reranker: a model that scores (question, passage) pairs, as one link of the rerank chain.

The line's ``rerank`` stage runs a chain (:data:`injection.stages.STAGES`):
the coverage reranker first (``context.lexical_rerank``), then whatever an
application passes as ``QueryTuning(reranker=...)``.  Adding a model is
this module and one argument::

    client = InjectionClient(store, embedder, QueryTuning(reranker=cross_encoder_reranker(model)))

``model`` is anything with ``score_pairs(pairs) -> scores`` (a
sentence-transformers ``CrossEncoder.predict`` wrapped, a remote scoring
service); it sees the pool in the coverage reranker's order and its scores
order the packet.  ``top`` scores only the first ``top`` of that order (the
model's cost grows with the pool); the rest keep their order below them.
What it does not do: load or download a model, batch across queries, or
admit or drop a candidate (the chain reorders; select and fit decide).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from freshindex.injection.assemble import Candidate, Reranker

__all__ = ["PairScorer", "cross_encoder_reranker", "passage"]


class PairScorer(Protocol):
    """Scores (question, passage) pairs, higher is more relevant; one score per pair, in order."""

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> Sequence[float]: ...


def passage(c: Candidate) -> str:
    """What the model reads of a candidate: its title and heading path, then its text."""
    e = c.evidence
    head = " > ".join(p for p in (e.title, *e.heading_path) if p)
    return f"{head}\n{e.text}" if head else e.text


def cross_encoder_reranker(model: PairScorer, *, top: int | None = None) -> Reranker:
    """A :data:`~injection.assemble.Reranker` scoring the first ``top`` of the pool (all: None) with ``model``."""

    def rerank(question: str, pool: Sequence[Candidate]) -> list[float]:
        n = len(pool) if top is None else max(0, min(top, len(pool)))
        scores = [float(s) for s in model.score_pairs([(question, passage(c)) for c in pool[:n]])]
        if len(scores) != n:
            raise ValueError(f"the cross-encoder returned {len(scores)} scores for {n} pairs")
        floor = min(scores, default=0.0) - 1.0  # the unscored tail stays below, in the order it came
        return [*scores, *(floor - i * 1e-6 for i in range(len(pool) - n))]

    return rerank
