"""``vectors_for`` with vectors computed ahead (core/vector_cache.py, workers/ahead.py).

A hash the cache lacks is served from what a thread embedded earlier, counted
as embedded and cached; the model is asked only for the rest; a vector of
the wrong size from ahead is ignored, never cached.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from freshindex.core.vector_cache import vectors_for


class _Model:
    model_id, dimension = "m", 3

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.asked.append(list(texts))
        return np.ones((len(texts), 3), dtype=np.float32)


class _Cache:
    def __init__(self, known: dict[str, np.ndarray]) -> None:
        self.rows = dict(known)

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return {h: self.rows[h] for h in hashes if h in self.rows}

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None:
        self.rows.update(vectors)


def test_vectors_embedded_ahead_are_used_counted_and_cached_and_a_wrong_size_is_not() -> None:
    model, cache = _Model(), _Cache({"a": np.full(3, 0.5, dtype=np.float32)})
    ahead = {"b": np.full(3, 2.0, dtype=np.float32), "c": np.zeros(4, dtype=np.float32)}
    result = vectors_for({"a": "text a", "b": "text b", "c": "text c", "d": "text d"}, model, cache, ahead=ahead)
    # a from the cache, b from ahead, c (ahead had the wrong size) and d from the model
    assert model.asked == [["text c", "text d"]]
    assert (result.embedded, result.reused) == (3, 1)
    assert float(result.vectors["b"][0]) == 2.0 and float(result.vectors["a"][0]) == 0.5
    assert result.vectors["c"].shape == (3,) and float(result.vectors["c"][0]) == 1.0
    assert set(cache.rows) == {"a", "b", "c", "d"} and float(cache.rows["b"][0]) == 2.0
    # Everything ahead: the model is not asked at all
    model.asked.clear()
    again = vectors_for({"e": "text e"}, model, _Cache({}), ahead={"e": np.ones(3, dtype=np.float32)})
    assert model.asked == [] and again.embedded == 1
