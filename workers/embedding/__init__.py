"""Embedding models and the vector-cache step of the pipeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from freshindex.core.types import ChunkDraft, Embedder
from freshindex.core.vector_cache import EmbedResult, VectorCacheLike, vectors_for
from freshindex.settings.sections.ingest import REMOTE_PROVIDERS

if TYPE_CHECKING:
    import numpy as np

    from freshindex.settings.model import EmbeddingSettings


def embedder_from_settings(e: EmbeddingSettings, *, metrics: Any = None) -> Embedder:
    """The embedder ``embedding.*`` names: in process (onnx, sentence-transformers, hashing) or remote
    (openai, tei: :mod:`workers.embedding.remote`, whose requests ``metrics`` counts)."""
    if e.remote:
        from freshindex.workers.embedding.remote import RemoteEmbedder, RemoteOptions

        return RemoteEmbedder(RemoteOptions.from_settings(e), metrics=metrics)
    return build_embedder(e.provider, model=e.model, batch_size=e.batch_size, threads=e.threads)


def build_embedder(provider: str, *, model: str = "", batch_size: int = 32, threads: int = 0) -> Embedder:
    """An in-process embedder by name; the remote providers need their settings (:func:`embedder_from_settings`)."""
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

    if provider in REMOTE_PROVIDERS:
        raise ConfigError(f"embedding.provider={provider} is a remote embedder: build it from its settings "
                          "(embedder_from_settings)")
    raise ConfigError(f"unknown embedding provider {provider!r}")


def embed_with_cache(chunks: Sequence[ChunkDraft], embedder: Embedder, cache: VectorCacheLike, *,
                     ahead: Mapping[str, np.ndarray] | None = None) -> EmbedResult:
    """Vectors for ``chunks``: from the cache by (model id, content hash), the
    rest from the model (then cached).  Identical chunks are embedded once.

    A thin adapter over :func:`core.vector_cache.vectors_for`, the one
    cache-or-embed rule the snapshot builder follows too."""
    return vectors_for({c.content_hash: c.embed_text for c in chunks}, embedder, cache, ahead=ahead)


__all__ = ["EmbedResult", "VectorCacheLike", "build_embedder", "embed_with_cache", "embedder_from_settings"]
