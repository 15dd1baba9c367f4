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


@dataclass(frozen=True)
class Lookup:
    """What the cache (and vectors embedded ahead) hold of some texts, and what is left for the model."""

    texts: Mapping[str, str]  # content hash -> the text the model sees
    found: dict[str, np.ndarray]  # served by the vector cache
    given: dict[str, np.ndarray]  # embedded ahead, not cached yet
    todo: list[str]  # hashes the model must embed, in order


def look_up(texts: Mapping[str, str], embedder: Embedder, cache: VectorCacheLike, *,
            ahead: Mapping[str, np.ndarray] | None = None) -> Lookup:
    """The first half of :func:`vectors_for`: what the cache and ``ahead`` hold, and the hashes left to embed."""
    dim = embedder.dimension
    # A cached vector of another size (written under this key by a misconfigured model) is not served.
    found = {h: v for h, v in cache.cached_vectors(embedder.model_id, list(texts)).items() if v.shape[0] == dim}
    missing = [h for h in texts if h not in found]
    given = {h: ahead[h] for h in missing if h in ahead and ahead[h].shape == (dim,)} if ahead else {}
    return Lookup(texts, found, given, [h for h in missing if h not in given])


def embed_texts(embedder: Embedder, texts: Sequence[str]) -> tuple[np.ndarray, float]:
    """``embedder.embed(texts)`` and its wall time; vectors of another shape are a :class:`ConfigError`."""
    start = time.perf_counter()
    computed = embedder.embed(list(texts))
    seconds = time.perf_counter() - start
    if computed.shape != (len(texts), embedder.dimension):
        raise ConfigError(f"embedding model {embedder.model_id} declares {embedder.dimension} dimensions but "
                          f"returned vectors of shape {tuple(computed.shape)} for {len(texts)} texts; nothing was "
                          "cached")
    return computed, seconds


def complete(lookup: Lookup, computed: Mapping[str, np.ndarray], embedder: Embedder, cache: VectorCacheLike, *,
             seconds: float = 0.0) -> EmbedResult:
    """The second half of :func:`vectors_for`: the vectors embedded ahead and ``computed`` (for
    ``lookup.todo``) written to the cache; every vector of the texts, with the counts."""
    given = {**lookup.given, **computed}
    found = dict(lookup.found)
    if given:
        cache.cache_vectors(embedder.model_id, given)
        found.update(given)
    embedded = len(lookup.given) + len(lookup.todo)
    return EmbedResult(vectors=found, embedded=embedded, reused=len(lookup.texts) - embedded, seconds=seconds)


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
    builder writes a point).  The inline sync embeds the chunks of many
    documents in one call instead (:mod:`workers.embed_batch`), with
    :func:`look_up`, :func:`embed_texts` and :func:`complete`, the two halves of this.
    """
    lookup = look_up(texts, embedder, cache, ahead=ahead)
    if not lookup.todo:
        return complete(lookup, {}, embedder, cache)
    computed, seconds = embed_texts(embedder, [texts[h] for h in lookup.todo])
    return complete(lookup, dict(zip(lookup.todo, computed, strict=True)), embedder, cache, seconds=seconds)


__all__ = ["EmbedResult", "Lookup", "VectorCacheLike", "complete", "embed_texts", "look_up", "vectors_for"]
