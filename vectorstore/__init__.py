"""Vector stores behind one narrow interface (:class:`VectorStore`)."""

from __future__ import annotations

from freshindex.vectorstore.base import (
    DENSE,
    INDEXED_FIELDS,
    LEXICAL,
    FieldMatch,
    FieldRange,
    Filter,
    PointRecord,
    ScoredHit,
    VectorStore,
)

__all__ = ["DENSE", "INDEXED_FIELDS", "LEXICAL", "FieldMatch", "FieldRange", "Filter", "PointRecord", "ScoredHit",
           "VectorStore", "open_store"]


def open_store(kind: str, *, path=None, url: str | None = None, api_key: str | None = None,
               open_timeout: float = 30.0, layout: dict | None = None) -> VectorStore:
    """Build the configured store (``edge``, ``local`` or ``server``); ``layout`` (the fields of
    :class:`vectorstore.qdrant.CollectionLayout`) is the server's cluster layout."""
    from freshindex.core.errors import ConfigError

    if kind == "edge":
        from freshindex.vectorstore.edge import EdgeStore

        return EdgeStore(path, open_timeout=open_timeout)
    if kind in ("local", "server"):
        from freshindex.vectorstore.qdrant import QdrantStore
        from qdrant_client import QdrantClient

        if kind == "local":
            return QdrantStore(QdrantClient(path=str(path)), local=True)
        if not url:
            raise ConfigError("vector_store.kind=server needs vector_store.url (FRESHINDEX_VECTOR_STORE__URL)")
        from freshindex.vectorstore.qdrant import CollectionLayout

        return QdrantStore(QdrantClient(url=url, api_key=api_key, timeout=30),
                           layout=CollectionLayout(**layout) if layout else None)
    raise ConfigError(f"unknown vector store kind {kind!r}")
