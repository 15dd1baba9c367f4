"""Models that both lines use: embedders, the token counters that match them, rerank models.

The document line embeds chunks and cuts them to the model's token limit;
the query line embeds questions, fits its context to a token budget and may
rerank with a pair-scoring model.  Both import the models from here, so a
model and its tokenizer have one home:

- :mod:`models.factory`: the embedder the ``embedding`` settings name
  (:func:`embedder_from_settings`, :func:`build_embedder`);
- :mod:`models.onnx`, :mod:`models.sentence_transformers`,
  :mod:`models.remote`, :mod:`models.hashing`: the embedders;
- :mod:`models.tokens`: token counting (one :class:`~models.tokens.WordPieceCounter`
  for the chunker and the context budget, and the stdlib upper bounds);
- :mod:`models.rerankers`: adapters that give a rerank model the
  ``score_pairs`` shape the query line's cross-encoder link takes.

What this part does not do: the pipeline's embed step and vector cache
(``workers.embedding``), the rerank chain (``injection``), or downloading a
model: every model here loads from an installed package or a local path.
Importing this package loads no model library (onnxruntime, tokenizers,
sentence-transformers are imported when a model is built).
"""

from __future__ import annotations

from freshindex.models.factory import build_embedder, embedder_from_settings

__all__ = ["build_embedder", "embedder_from_settings"]
