"""The embedder that the ``embedding`` settings name, built by provider.

One place turns ``embedding.provider`` into a model object: the in-process
models (onnx, sentence-transformers, hashing) by name, the remote ones
(openai, tei) from their whole settings section.  Each model module is
imported only when its provider is asked for, so naming no model loads no
model library.  What it does not do: cache embedders (every call builds a
new one; the composition root keeps one per process), batch, or touch the
vector cache (that is the pipeline's embed step, ``workers.embedding``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from freshindex.core.errors import ConfigError
from freshindex.core.types import Embedder
from freshindex.settings.sections.ingest import REMOTE_PROVIDERS

if TYPE_CHECKING:
    from freshindex.settings.model import EmbeddingSettings

__all__ = ["build_embedder", "embedder_from_settings"]


def embedder_from_settings(e: EmbeddingSettings, *, metrics: Any = None) -> Embedder:
    """The embedder ``embedding.*`` names: in process (onnx, sentence-transformers, hashing) or remote
    (openai, tei: :mod:`models.remote`, whose requests ``metrics`` counts)."""
    if e.remote:
        from freshindex.models.remote import RemoteEmbedder, RemoteOptions

        return RemoteEmbedder(RemoteOptions.from_settings(e), metrics=metrics)
    return build_embedder(e.provider, model=e.model, batch_size=e.batch_size, threads=e.threads)


def build_embedder(provider: str, *, model: str = "", batch_size: int = 32, threads: int = 0) -> Embedder:
    """An in-process embedder by name; the remote providers need their settings (:func:`embedder_from_settings`)."""
    if provider == "onnx":
        from freshindex.models.onnx import OnnxMiniLM

        return OnnxMiniLM(batch_size=batch_size, threads=threads)
    if provider == "hashing":
        from freshindex.models.hashing import HashingEmbedder

        return HashingEmbedder()
    if provider == "sentence-transformers":
        from freshindex.models.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(model, batch_size=batch_size)
    if provider in REMOTE_PROVIDERS:
        raise ConfigError(f"embedding.provider={provider} is a remote embedder: build it from its settings "
                          "(embedder_from_settings)")
    raise ConfigError(f"unknown embedding provider {provider!r}")
