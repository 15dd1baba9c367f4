"""The pipeline's embed step: vectors for a document's chunks, from the vector cache or the model.

The models themselves (ONNX MiniLM, sentence-transformers, remote servers,
the hashing stand-in), their factory and their token counters live in the
``models`` part (:mod:`freshindex.models`), which the query line imports
too.  What this step does not do: choose or load a model (the composition
root passes one in), cut chunks to the model's limit (the chunker does,
with the model's own counter), or write vectors to a store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from freshindex.core.types import ChunkDraft, Embedder
from freshindex.core.vector_cache import EmbedResult, VectorCacheLike, vectors_for

if TYPE_CHECKING:
    import numpy as np


def embed_with_cache(chunks: Sequence[ChunkDraft], embedder: Embedder, cache: VectorCacheLike, *,
                     ahead: Mapping[str, np.ndarray] | None = None) -> EmbedResult:
    """Vectors for ``chunks``: from the cache by (model id, content hash), the
    rest from the model (then cached).  Identical chunks are embedded once.

    A thin adapter over :func:`core.vector_cache.vectors_for`, the one
    cache-or-embed rule the snapshot builder follows too."""
    return vectors_for({c.content_hash: c.embed_text for c in chunks}, embedder, cache, ahead=ahead)


__all__ = ["EmbedResult", "VectorCacheLike", "embed_with_cache"]
