"""The embedder contract: what the embed step, the vector cache and the query line rely on from an ``Embedder``.

A subclass gives the embedder (:meth:`EmbedderContract.make_embedder`, or
its own ``embedder`` fixture to share one loaded model).  The suite checks:
``model_id`` names it; ``embed`` returns one float32 row of ``dimension``
per text, L2-normalised; the same text gives the same vector (the vector
cache and content-derived ids depend on it); a batch gives the rows its
texts give one by one (the embed step batches as it likes); no texts give
an empty ``(0, dimension)`` array and an empty or blank text gives one
finite unit row, never an error.

What it does not check: what the vectors mean (retrieval quality is
measured in ``bench/``), token limits, retries or throughput.
"""

from __future__ import annotations

import numpy as np
import pytest

from freshindex.core.types import Embedder

TEXTS = (
    "Rotate the API key every ninety days.",
    "The on-call engineer answers a page within fifteen minutes.",
    "Backups run nightly at 02:00 UTC and are kept for thirty days.",
    "Leave",
)


class EmbedderContract:
    """Subclass as ``TestMyEmbedder(EmbedderContract)`` and implement :meth:`make_embedder`."""

    #: How close a batch's rows must be to the same texts embedded one by one (padding changes float sums).
    batch_atol = 1e-4

    def make_embedder(self) -> Embedder:
        raise NotImplementedError

    @pytest.fixture
    def embedder(self) -> Embedder:
        return self.make_embedder()

    def test_rows_have_the_declared_dimension_and_unit_length(self, embedder: Embedder) -> None:
        assert isinstance(embedder.model_id, str) and embedder.model_id
        vectors = embedder.embed(list(TEXTS))
        assert vectors.shape == (len(TEXTS), embedder.dimension) and embedder.dimension > 0
        assert vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)

    def test_the_same_text_gives_the_same_vector(self, embedder: Embedder) -> None:
        first = embedder.embed([TEXTS[0], TEXTS[1]])
        again = embedder.embed([TEXTS[0], TEXTS[1]])
        assert np.allclose(first, again, atol=1e-6)
        assert not np.allclose(first[0], first[1], atol=1e-3)  # and different texts differ

    def test_a_batch_gives_the_rows_of_its_texts_one_by_one(self, embedder: Embedder) -> None:
        batch = embedder.embed(list(TEXTS))
        single = np.vstack([embedder.embed([text]) for text in TEXTS])
        assert np.allclose(batch, single, atol=self.batch_atol)

    def test_no_text_and_an_empty_text_are_handled(self, embedder: Embedder) -> None:
        assert embedder.embed([]).shape == (0, embedder.dimension)
        vectors = embedder.embed(["", "   "])
        assert vectors.shape == (2, embedder.dimension)
        assert np.isfinite(vectors).all()
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


__all__ = ["TEXTS", "EmbedderContract"]
