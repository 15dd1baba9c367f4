"""Embedding models and the vector-cache step of the pipeline."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from freshindex.core.types import ChunkDraft, Embedder


def build_embedder(provider: str, *, model: str = "", batch_size: int = 32, threads: int = 0) -> Embedder:
    if provider == "onnx":
        from freshindex.workers.embedding.onnx import OnnxMiniLM

        return OnnxMiniLM(batch_size=batch_size, threads=threads)
    if provider == "hashing":
        from freshindex.workers.embedding.hashing import HashingEmbedder

        return HashingEmbedder()
    if provider == "sentence-transformers":
        from freshindex.workers.embedding.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(model, batch_size=batch_size)
    from freshindex.core.errors import ConfigError

    raise ConfigError(f"unknown embedding provider {provider!r}")


@dataclass(frozen=True)
class EmbedResult:
    vectors: dict[str, np.ndarray]  # by content hash
    embedded: int  # computed by the model now
    reused: int  # served by the vector cache
    seconds: float  # wall time inside the model


class VectorCacheLike(Protocol):
    """What :func:`embed_with_cache` needs of the registry."""

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    def cache_vectors(self, model_id: str, vectors: dict[str, np.ndarray]) -> None: ...


def embed_with_cache(chunks: Sequence[ChunkDraft], embedder: Embedder, cache: VectorCacheLike) -> EmbedResult:
    """Vectors for ``chunks``: from the cache by (model id, content hash), the
    rest from the model (then cached).  Identical chunks are embedded once."""
    wanted = {c.content_hash: c for c in chunks}
    found = cache.cached_vectors(embedder.model_id, list(wanted))
    missing = [h for h in wanted if h not in found]
    seconds = 0.0
    if missing:
        start = time.perf_counter()
        computed = embedder.embed([wanted[h].embed_text for h in missing])
        seconds = time.perf_counter() - start
        fresh = {h: computed[i] for i, h in enumerate(missing)}
        cache.cache_vectors(embedder.model_id, fresh)
        found.update(fresh)
    return EmbedResult(vectors=found, embedded=len(missing), reused=len(wanted) - len(missing), seconds=seconds)
