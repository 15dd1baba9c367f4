"""``qdrant-client`` requests and points: filters, the hybrid and IDF batches.

Translations from the engine-neutral types of :mod:`vectorstore.base`
(:class:`Filter`, :class:`PointRecord`) to ``qdrant_client.models``, and the
query requests :class:`vectorstore.qdrant.QdrantStore` sends.  Nothing here
sends a request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qdrant_client import models as qm

from freshindex.vectorstore import lexical
from freshindex.vectorstore.base import DENSE, HYBRID_PREFETCH, LEXICAL, RRF_K, FieldRange, Filter, PointRecord


def dense_of(vector: Any) -> Any:
    """The dense vector of a returned point (named vectors, or the dense one alone)."""
    return (vector or {}).get(DENSE) if isinstance(vector, dict) else vector


def point_vectors(p: PointRecord) -> dict[str, Any]:
    """The named vectors of a point to write: dense, and lexical when it has lexical text (its sparse vector
    when given, else computed from the text)."""
    out: dict[str, Any] = {DENSE: [float(x) for x in p.vector or ()]}
    if p.lexical:
        sv = p.sparse if p.sparse is not None else lexical.document_vector(p.lexical)
        if sv:
            out[LEXICAL] = qm.SparseVector(indices=list(sv.indices), values=list(sv.values))
    return out


def client_filter(flt: Filter | None) -> qm.Filter | None:
    """``flt`` as the client's filter (None for no condition)."""
    if flt is None or (not flt.must and not flt.must_not):
        return None

    def cond(m: Any) -> qm.FieldCondition:
        if isinstance(m, FieldRange):
            rng = qm.DatetimeRange(**m.bounds()) if m.is_datetime else qm.Range(**m.bounds())
            return qm.FieldCondition(key=m.key, range=rng)
        return qm.FieldCondition(key=m.key, match=qm.MatchAny(any=list(m.any)))

    return qm.Filter(must=[cond(m) for m in flt.must] or None, must_not=[cond(m) for m in flt.must_not] or None)


def hybrid_requests(vector: Sequence[float], query: lexical.SparseVector, *, limit: int, flt: Filter | None,
                    params: qm.SearchParams | None) -> list[qm.QueryRequest]:
    """Two queries for one batch: the fused one (dense and lexical prefetch, both filtered, RRF)
    and the lexical ranking alone, for its scores."""
    depth = max(limit, HYBRID_PREFETCH)
    where = client_filter(flt)
    sparse = qm.SparseVector(indices=list(query.indices), values=list(query.values))
    fused = qm.QueryRequest(
        prefetch=[
            qm.Prefetch(query=[float(x) for x in vector], using=DENSE, filter=where, limit=depth, params=params),
            qm.Prefetch(query=sparse, using=LEXICAL, filter=where, limit=depth),
        ],
        query=qm.RrfQuery(rrf=qm.Rrf(k=RRF_K)),
        filter=where,
        limit=limit,
        with_payload=True,
        with_vector=[DENSE],
    )
    alone = qm.QueryRequest(query=sparse, using=LEXICAL, filter=where, limit=depth, with_payload=False)
    return [fused, alone]


def idf_requests(indices: Sequence[int], flt: Filter | None) -> list[qm.QueryRequest]:
    """One single-token lexical query per index (limit 1, the hit's lexical vector returned),
    for :meth:`QdrantStore.lexical_idf`."""
    where = client_filter(flt)
    return [qm.QueryRequest(query=qm.SparseVector(indices=[i], values=[1.0]), using=LEXICAL, filter=where,
                            limit=1, with_payload=False, with_vector=[LEXICAL]) for i in indices]
