"""One contract every vector store implementation must pass.

Runs on Qdrant Edge (the embedded default), on qdrant-client's local mode
(the stand-in for the server code path), and on a Qdrant server when
QDRANT_URL is set; without it the server cases skip with that reason (the
``store`` fixture is in ``conftest.py``).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from freshindex.core.errors import NotFoundError, StoreError
from freshindex.vectorstore import FieldMatch, Filter, PointRecord, VectorStore

DIM = 16


def _n(store: VectorStore, name: str) -> str:
    return store.test_prefix + name  # type: ignore[attr-defined]


def _points(n: int, seed: int = 0) -> list[PointRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = rng.normal(size=DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        out.append(PointRecord(str(uuid.UUID(int=seed * 100000 + i + 1)), v.tolist(),
                               {"i": i, "acl": ["eng"] if i % 3 == 0 else ["public"], "doc": f"d{i % 4}"}))
    return out


def test_upsert_count_retrieve_and_delete(store: VectorStore) -> None:
    c = _n(store, "a")
    store.create_collection(c, DIM)
    pts = _points(50)
    store.upsert(c, pts)
    store.upsert(c, pts[:10])  # upserting the same ids again adds nothing
    assert store.count(c) == 50
    got = store.retrieve(c, [pts[3].id, str(uuid.uuid4())], with_vectors=True)
    assert [g.id for g in got] == [pts[3].id]
    assert got[0].payload["i"] == 3
    assert np.allclose(got[0].vector, pts[3].vector, atol=1e-5)
    store.delete(c, [p.id for p in pts[:5]])
    assert store.count(c) == 45
    assert set(store.iter_ids(c, batch=7)) == {p.id for p in pts[5:]}


def test_search_ranks_the_nearest_first_and_filters_inside_the_query(store: VectorStore) -> None:
    c = _n(store, "s")
    store.create_collection(c, DIM)
    pts = _points(60, seed=1)
    store.upsert(c, pts)
    hits = store.search(c, pts[7].vector, limit=3, exact=True)
    assert hits[0].id == pts[7].id and hits[0].score == pytest.approx(1.0, abs=1e-4)
    flt = Filter(must=(FieldMatch("acl", ("eng",)),), must_not=(FieldMatch("doc", ("d0",)),))
    filtered = store.search(c, pts[7].vector, limit=60, flt=flt)
    expected = {p.id for p in pts if flt.matches(p.payload)}
    assert {h.id for h in filtered} == expected


def test_clone_is_independent_of_its_source(store: VectorStore) -> None:
    a, b = _n(store, "v1"), _n(store, "v2")
    store.create_collection(a, DIM)
    pts = _points(20, seed=2)
    store.upsert(a, pts)
    store.create_collection(b, DIM, clone_from=a)
    store.delete(b, [pts[0].id])
    store.upsert(b, _points(3, seed=3))
    assert store.count(a) == 20 and store.count(b) == 22
    with pytest.raises(StoreError):
        store.create_collection(a, DIM)
    with pytest.raises(NotFoundError):
        store.create_collection(_n(store, "v3"), DIM, clone_from=_n(store, "missing"))


def test_alias_swaps_atomically_and_reports_the_previous_target(store: VectorStore) -> None:
    a, b, alias = _n(store, "x1"), _n(store, "x2"), _n(store, "kb")
    store.create_collection(a, DIM)
    store.create_collection(b, DIM)
    assert store.get_alias(alias) is None
    assert store.swap_alias(alias, a) is None
    assert store.swap_alias(alias, b) == a
    assert store.get_alias(alias) == b
    with pytest.raises(NotFoundError):
        store.swap_alias(alias, _n(store, "missing"))
    assert store.get_alias(alias) == b


def test_drop_removes_a_collection_and_dropping_twice_is_harmless(store: VectorStore) -> None:
    c = _n(store, "d")
    store.create_collection(c, DIM)
    store.drop_collection(c)
    store.drop_collection(c)
    assert c not in store.list_collections()
    with pytest.raises(NotFoundError):
        store.count(c)


def test_export_then_import_reproduces_the_collection(store: VectorStore, tmp_path: Path) -> None:
    a, b = _n(store, "e1"), _n(store, "e2")
    store.create_collection(a, DIM)
    pts = _points(40, seed=4)
    store.upsert(a, pts)
    store.export_collection(a, tmp_path / "export.bin")
    store.import_collection(b, tmp_path / "export.bin")
    assert store.count(b) == 40
    q = pts[11].vector
    assert [h.id for h in store.search(a, q, limit=5, exact=True)] == [h.id for h in store.search(b, q, limit=5, exact=True)]
    assert store.retrieve(b, [pts[2].id])[0].payload == pts[2].payload
    with pytest.raises(StoreError):
        store.import_collection(b, tmp_path / "export.bin")
