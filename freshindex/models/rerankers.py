"""Rerank models: a sentence-transformers cross-encoder with the ``score_pairs`` shape the query line takes.

The query line's cross-encoder link (``injection.cross_encoder``) takes any
object with ``score_pairs(pairs) -> scores``; this module is where a model
that has another shape is adapted.  :class:`CrossEncoderScorer` loads a
``sentence_transformers.CrossEncoder`` from a local path (or an installed
model name, as :mod:`models.sentence_transformers` does) on the CPU and
scores pairs with ``predict`` in batches of ``batch_size``::

    client = InjectionClient(store, embedder, QueryTuning(
        reranker=cross_encoder_reranker(CrossEncoderScorer("/models/ms-marco-MiniLM-L6-v2"))))

What it does not do: download a model (sentence-transformers may, for a
hub name that is not a local path: pass a path), cap the text length it is
given (the model truncates to its own maximum), cache scores, or rerank: the
link in ``injection`` turns scores into an order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from freshindex.core.errors import ConfigError

__all__ = ["CrossEncoderScorer"]


class CrossEncoderScorer:
    """A sentence-transformers ``CrossEncoder`` as a pair scorer: one float per (question, passage), in order."""

    def __init__(self, name: str, *, batch_size: int = 32, max_length: int | None = None) -> None:
        try:
            from sentence_transformers import CrossEncoder
        except ImportError as exc:
            raise ConfigError("a cross-encoder reranker needs `pip install sentence-transformers`") from exc
        self.name = name
        self._batch = batch_size
        self._model: Any = CrossEncoder(name, device="cpu", max_length=max_length)

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """The model's relevance of each pair, higher is more relevant (raw logits: comparable within a model)."""
        if not pairs:
            return []
        scores = self._model.predict([list(p) for p in pairs], batch_size=self._batch, show_progress_bar=False)
        out = [float(s) for s in scores]
        if len(out) != len(pairs):
            raise ValueError(f"the cross-encoder returned {len(out)} scores for {len(pairs)} pairs")
        return out
