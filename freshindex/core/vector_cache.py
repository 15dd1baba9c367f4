"""Cache-or-embed: the one function that turns texts into vectors through the vector cache.

Both the pipeline's embed step (:func:`workers.embedding.embed_with_cache`)
and the snapshot builder (a changed model or a wiped cache) call
:func:`vectors_for`, so "which vectors are reused and which are computed"
is decided in one place.  Vectors are keyed by (model id, content hash):
two models never share a cached vector.

What it does not guarantee: that a cached vector was computed from the text
passed now (the content hash is trusted to cover it), or that two callers
racing on the same hash embed it only once (both write the same vector).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from freshindex.core.errors import ConfigError
from freshindex.core.types import Embedder


@dataclass(frozen=True)
class EmbedResult:
    vectors: dict[str, np.ndarray]  # by content hash
    embedded: int  # computed by the model now
    reused: int  # served by the vector cache
    seconds: float  # wall time inside the model


class VectorCacheLike(Protocol):
    """What :func:`vectors_for` needs of the registry."""

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None: ...


def vectors_for(texts: Mapping[str, str], embedder: Embedder, cache: VectorCacheLike, *,
                ahead: Mapping[str, np.ndarray] | None = None) -> EmbedResult:
    """Vectors for ``texts`` (content hash -> the text the model sees).

    Hashes the cache knows for ``embedder.model_id`` are served from it; the
    rest are embedded in one call and written to the cache, so the next
    caller reuses them.  Each hash is embedded at most once per call.
    ``ahead`` holds vectors the same embedder computed earlier for some of
    these hashes (:mod:`workers.ahead`): a hash the cache lacks is taken from
    it rather than embedded again, and counts as embedded.
    Vectors of another size than ``embedder.dimension`` are a
    :class:`ConfigError` before anything is cached (and so before the
    builder writes a point).
    """
    dim = embedder.dimension
    # A cached vector of another size (written under this key by a misconfigured model) is not served.
    found = {h: v for h, v in cache.cached_vectors(embedder.model_id, list(texts)).items() if v.shape[0] == dim}
    missing = [h for h in texts if h not in found]
    given = {h: ahead[h] for h in missing if h in ahead and ahead[h].shape == (dim,)} if ahead else {}
    todo = [h for h in missing if h not in given]
    seconds = 0.0
    if todo:
        start = time.perf_counter()
        computed = embedder.embed([texts[h] for h in todo])
        seconds = time.perf_counter() - start
        if computed.shape != (len(todo), dim):
            raise ConfigError(f"embedding model {embedder.model_id} declares {dim} dimensions but returned vectors "
                              f"of shape {tuple(computed.shape)} for {len(todo)} texts; nothing was cached")
        given.update((h, computed[i]) for i, h in enumerate(todo))
    if given:
        cache.cache_vectors(embedder.model_id, given)
        found.update(given)
    return EmbedResult(vectors=found, embedded=len(missing), reused=len(texts) - len(missing), seconds=seconds)


__all__ = ["EmbedResult", "VectorCacheLike", "vectors_for"]
