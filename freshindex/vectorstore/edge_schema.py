"""How a Qdrant Edge collection is configured: vectors, the dense index, payload indexes.

Why the dense side has no HNSW graph by default and int8 scalar
quantisation: see :mod:`vectorstore.edge`.  These functions build the
engine's configuration objects for a new collection, tell whether a
collection's persisted settings are this store's, and rebuild a persisted
configuration with this store's index settings (a re-index on open).

The original dense vectors are kept cold (``Memory.Cold``: mapped, read on
demand): a search scans the int8 copy in RAM and reads originals only to
rescore its candidates.  The default tier warms the whole file when a shard
opens, preallocated holes included: opening the clone a release update
writes into added 30 MB of resident memory for 3.7 MB of vectors (hashing
embedder, PostgreSQL 15's manual; that update's peak went from 387 to
350-355 MB), and query latency at 100k points did not move
(``bench/results/query.md``).  A reader that has just started pays 2-4 ms
more a query until the originals its rescoring reads are in, and holds
130 MB less at 100k points (``bench/results/cold_start.md``).
"""

from __future__ import annotations

from typing import Any

import qdrant_edge as qe

from freshindex.core.errors import StoreError
from freshindex.vectorstore.base import DENSE, LEXICAL

#: HNSW parameters when ``hnsw_m`` > 0 (Qdrant's defaults); ``full_scan_threshold`` is in KB of vectors.
_EF_CONSTRUCT = 100
_FULL_SCAN_KB = 10_000


def index_params(hnsw_m: int, indexing_threshold_kb: int | None = None) -> dict[str, Any]:
    """The dense index settings of a new (or re-indexed) collection: see :mod:`vectorstore.edge`.

    ``indexing_threshold_kb`` (the engine's default, about 10 MB of vectors,
    when None) is the size from which :meth:`EdgeStore.optimize` converts a
    written segment; smaller segments are scanned as written.
    """
    params: dict[str, Any] = {
        "hnsw_config": qe.HnswIndexConfig(m=hnsw_m, ef_construct=_EF_CONSTRUCT if hnsw_m else 16,
                                          full_scan_threshold=_FULL_SCAN_KB, payload_m=0),
        "quantization_config": qe.ScalarQuantizationConfig(qe.ScalarType.Int8, always_ram=True),
    }
    if indexing_threshold_kb is not None:
        params["optimizers"] = qe.EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb)
    return params


def new_config(dim: int, hnsw_m: int, indexing_threshold_kb: int | None) -> qe.EdgeConfig:
    """A new collection: a ``dim``-sized cosine dense vector, the lexical vector (IDF by the engine), no WAL.

    No WAL: a collection is written once, by the one builder holding the
    knowledge base's lock, and flushed before it is verified; without a WAL
    the shard takes no file lock, so reader processes can open it."""
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine, memory=qe.Memory.Cold)},
        sparse_vectors={LEXICAL: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        wal_enabled=False,
        **index_params(hnsw_m, indexing_threshold_kb),
    )


#: A persisted ``memory`` tier, kept through a re-index (none persisted: the engine's default, as before).
_TIERS = {"cold": qe.Memory.Cold, "cached": qe.Memory.Cached, "pinned": qe.Memory.Pinned}


def index_current(persisted: dict[str, Any], hnsw_m: int, indexing_threshold_kb: int | None) -> bool:
    """Whether a persisted ``edge_config.json`` has these index settings (else the shard is re-indexed on open)."""
    hnsw = persisted.get("hnsw_config") or {}
    threshold = (persisted.get("optimizers") or {}).get("indexing_threshold")
    return (hnsw.get("m") == hnsw_m and hnsw.get("payload_m") == 0
            and "scalar" in (persisted.get("quantization_config") or {})
            and (indexing_threshold_kb is None or threshold == indexing_threshold_kb))


def config_like(persisted: dict[str, Any], hnsw_m: int, indexing_threshold_kb: int | None) -> qe.EdgeConfig:
    """``persisted``'s vectors, their memory tier and WAL setting (fixed at creation) with these index settings."""
    dense = (persisted.get("vectors") or {}).get(DENSE)
    if not dense:
        raise StoreError(f"the collection has no {DENSE!r} vector to index")
    sparse = {LEXICAL: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)} if LEXICAL in (
        persisted.get("sparse_vectors") or {}) else None
    return qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=int(dense["size"]), distance=qe.Distance.Cosine,
                                            memory=_TIERS.get(str(dense.get("memory", "")).lower()))},
        sparse_vectors=sparse, wal_enabled=persisted.get("wal_enabled", True),
        **index_params(hnsw_m, indexing_threshold_kb))


def payload_index(kind: str) -> Any:
    """The engine's index for one kind of :data:`vectorstore.base.INDEXED_FIELDS`."""
    if kind == "tenant":
        return qe.KeywordIndexParams(is_tenant=True)
    return {"keyword": qe.PayloadSchemaType.Keyword, "integer": qe.PayloadSchemaType.Integer,
            "float": qe.PayloadSchemaType.Float, "datetime": qe.PayloadSchemaType.Datetime}[kind]
