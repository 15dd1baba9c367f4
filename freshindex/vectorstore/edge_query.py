"""Qdrant Edge requests and points: filters, search parameters, the hybrid and IDF batches.

Translations from the engine-neutral types of :mod:`vectorstore.base`
(:class:`Filter`, :class:`PointRecord`) to ``qdrant_edge``'s, and the query
requests :class:`vectorstore.edge.EdgeStore` sends.  Nothing here opens a
shard or sends a request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import qdrant_edge as qe

from freshindex.vectorstore import lexical
from freshindex.vectorstore.base import DENSE, HYBRID_PREFETCH, LEXICAL, RRF_K, FieldRange, Filter, PointRecord


def search_params(exact: bool) -> Any:
    """Exact when asked; otherwise the int8 scan keeps twice the candidates and rescores them with the
    original vectors, so quantisation does not swap near-ties out of the top ``limit``
    (recall@10 with the 1 % ACL filter fell from 1.0 to 0.95 without it, ``bench/query.py``)."""
    if exact:
        return qe.SearchParams(exact=True)
    return qe.SearchParams(quantization=qe.QuantizationSearchParams(ignore=False, rescore=True, oversampling=2.0))


def dense_of(vector: Any) -> list[float] | None:
    """The dense vector of a returned point (named vectors, or the dense one alone)."""
    if isinstance(vector, dict):
        vector = vector.get(DENSE)
    return list(vector) if vector is not None else None


def point_vectors(p: PointRecord) -> dict[str, Any]:
    """The named vectors of a point to write: dense, and lexical when it has lexical text (its sparse vector
    when given, else computed from the text)."""
    # The engine reads any sequence of numbers (ints, numpy floats); a list goes as it is: converting
    # every component of every point (384 float() calls each) was a tenth of a build's store writes.
    vector = p.vector if isinstance(p.vector, list) else list(p.vector or ())
    out: dict[str, Any] = {DENSE: vector}
    if p.lexical:
        sv = p.sparse if p.sparse is not None else lexical.document_vector(p.lexical)
        if sv:
            out[LEXICAL] = qe.SparseVector(list(sv.indices), list(sv.values))
    return out


def edge_filter(flt: Filter | None) -> qe.Filter | None:
    """``flt`` as the engine's filter (None for no condition)."""
    if flt is None or (not flt.must and not flt.must_not):
        return None

    def cond(m: Any) -> qe.FieldCondition:
        if isinstance(m, FieldRange):
            rng = qe.RangeDateTime(**m.bounds()) if m.is_datetime else qe.RangeFloat(**m.bounds())
            return qe.FieldCondition(key=m.key, range=rng)
        return qe.FieldCondition(key=m.key, match=qe.MatchAny(any=list(m.any)))

    return qe.Filter(
        must=[cond(m) for m in flt.must] or None,
        must_not=[cond(m) for m in flt.must_not] or None,
    )


def dense_request(vector: Sequence[float], *, limit: int, flt: Filter | None, exact: bool) -> qe.QueryRequest:
    """The dense-only query (no text, or a collection without the lexical vector)."""
    return qe.QueryRequest(
        limit=limit,
        query=qe.Query.Nearest([float(x) for x in vector], using=DENSE),
        filter=edge_filter(flt),
        with_payload=True,
        params=search_params(exact),
    )


def hybrid_requests(vector: Sequence[float], query: lexical.SparseVector, *, limit: int, flt: Filter | None,
                    exact: bool) -> qe.QueryBatchRequest:
    """One batch: the fused query (dense and lexical prefetch, both filtered, RRF) and the
    lexical ranking alone (its scores; the fused query exposes only the fused score)."""
    depth = max(limit, HYBRID_PREFETCH)
    where = edge_filter(flt)
    sparse = qe.Query.Nearest(qe.SparseVector(list(query.indices), list(query.values)), using=LEXICAL)
    fused = qe.QueryRequest(
        limit=limit,
        prefetches=[
            qe.Prefetch(limit=depth, query=qe.Query.Nearest([float(x) for x in vector], using=DENSE),
                        filter=where, params=search_params(exact)),
            qe.Prefetch(limit=depth, query=sparse, filter=where),
        ],
        # A Fusion at run time (a pyo3 enum variant); qdrant-edge-py 0.9.0's stub nests it without the base.
        query=qe.Fusion.Rrf(k=RRF_K),  # type: ignore[arg-type]
        filter=where,
        with_payload=True,
        with_vector=[DENSE],
    )
    alone = qe.QueryRequest(limit=depth, query=sparse, filter=where, with_payload=False)
    return qe.QueryBatchRequest([fused, alone])


def idf_requests(indices: Sequence[int], flt: Filter | None) -> qe.QueryBatchRequest:
    """One single-token lexical query per index (limit 1, the hit's lexical vector returned),
    for :meth:`EdgeStore.lexical_idf`."""
    where = edge_filter(flt)
    return qe.QueryBatchRequest([
        qe.QueryRequest(limit=1, query=qe.Query.Nearest(qe.SparseVector([i], [1.0]), using=LEXICAL),
                        filter=where, with_payload=False, with_vector=[LEXICAL]) for i in indices])
