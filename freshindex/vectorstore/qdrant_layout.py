"""How a server collection is laid out: shards, replicas, on-disk storage, quantization, payload indexes.

:class:`CollectionLayout` is built from ``vector_store.cluster`` by the
composition root; :func:`collection_params` turns it into the arguments of
``create_collection`` and :func:`search_params` into the search parameters
:class:`vectorstore.qdrant.QdrantStore` sends (see operations.md, "Qdrant
cluster layout").  Local mode ignores all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from qdrant_client import models as qm

from freshindex.vectorstore.base import DENSE, LEXICAL


def index_schema(kind: str) -> Any:
    """The server's index for one kind of :data:`vectorstore.base.INDEXED_FIELDS`."""
    if kind == "tenant":
        return qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
    return {"keyword": qm.PayloadSchemaType.KEYWORD, "integer": qm.PayloadSchemaType.INTEGER,
            "float": qm.PayloadSchemaType.FLOAT, "datetime": qm.PayloadSchemaType.DATETIME}[kind]


@dataclass(frozen=True)
class CollectionLayout:
    """How a server collection is laid out on a cluster; built from ``vector_store.cluster`` by the composition
    root (the defaults are the single-node preset, ``1m``).  Applied at creation and, for quantization, at search."""

    shard_number: int = 1
    replication_factor: int = 1
    write_consistency_factor: int = 1
    on_disk_vectors: bool = False
    on_disk_payload: bool = True
    quantization: Literal["none", "int8"] = "none"
    quantization_always_ram: bool = True
    rescore: bool = True
    oversampling: float = 1.0


def collection_params(layout: CollectionLayout, dim: int) -> dict[str, Any]:
    """The keyword arguments of ``create_collection`` for ``layout`` (everything but the name).

    The lexical (sparse) vector lives on disk with the payload when the dense
    vectors do: it is read only for candidates of a query, like the originals.
    """
    quantization = None
    if layout.quantization == "int8":
        quantization = qm.ScalarQuantization(scalar=qm.ScalarQuantizationConfig(
            type=qm.ScalarType.INT8, quantile=0.99, always_ram=layout.quantization_always_ram))
    return dict(
        vectors_config={DENSE: qm.VectorParams(size=dim, distance=qm.Distance.COSINE, on_disk=layout.on_disk_vectors)},
        sparse_vectors_config={LEXICAL: qm.SparseVectorParams(
            modifier=qm.Modifier.IDF, index=qm.SparseIndexParams(on_disk=layout.on_disk_vectors))},
        shard_number=layout.shard_number,
        replication_factor=layout.replication_factor,
        write_consistency_factor=layout.write_consistency_factor,
        on_disk_payload=layout.on_disk_payload,
        quantization_config=quantization,
    )


def search_params(layout: CollectionLayout, *, exact: bool) -> qm.SearchParams | None:
    """Search parameters for ``layout``: exact when asked; over a quantized collection, rescoring of
    ``oversampling`` times the candidates with the original vectors (exact search ignores quantization)."""
    if exact:
        return qm.SearchParams(exact=True)
    if layout.quantization == "none":
        return None
    return qm.SearchParams(quantization=qm.QuantizationSearchParams(
        ignore=False, rescore=layout.rescore, oversampling=layout.oversampling))
