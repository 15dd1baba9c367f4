"""Vector stores behind one narrow interface (:class:`VectorStore`)."""

from __future__ import annotations

from freshindex.vectorstore.base import (
    DENSE,
    INDEXED_FIELDS,
    LEXICAL,
    FieldMatch,
    FieldRange,
    Filter,
    LexicalStats,
    PointRecord,
    ReaderTracking,
    Renames,
    ScoredHit,
    VectorStore,
)

__all__ = ["DENSE", "INDEXED_FIELDS", "LEXICAL", "FieldMatch", "FieldRange", "Filter", "LexicalStats", "PointRecord",
           "ReaderTracking", "Renames", "ScoredHit", "VectorStore", "open_store"]


def open_store(kind: str, *, path=None, url: str | None = None, api_key: str | None = None,
               open_timeout: float = 30.0, layout: dict | None = None, renames: bool = False,
               prefix: str = "fi_") -> VectorStore:
    """Build the configured store (``edge``, ``local`` or ``server``); ``layout`` (the fields of
    :class:`vectorstore.qdrant_layout.CollectionLayout`) is the server's cluster layout; ``renames`` (with the
    collection ``prefix``) makes version names aliases (``vector_store.server_renames``)."""
    from freshindex.core.errors import ConfigError
    from freshindex.core.naming import Naming

    if kind == "edge":
        from freshindex.vectorstore.edge import EdgeStore

        return EdgeStore(path, open_timeout=open_timeout)
    if kind in ("local", "server"):
        from qdrant_client import QdrantClient

        from freshindex.vectorstore.qdrant import QdrantStore

        if kind == "local":
            return QdrantStore(QdrantClient(path=str(path)), local=True, renames=renames, naming=Naming(prefix))
        if not url:
            raise ConfigError("vector_store.kind=server needs vector_store.url (FRESHINDEX_VECTOR_STORE__URL)")
        from freshindex.vectorstore.qdrant_layout import CollectionLayout

        return QdrantStore(QdrantClient(url=url, api_key=api_key, timeout=30),
                           layout=CollectionLayout(**layout) if layout else None, renames=renames, naming=Naming(prefix))
    raise ConfigError(f"unknown vector store kind {kind!r}")
