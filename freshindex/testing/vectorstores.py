"""The vector store contract: what the builder, the swap and the query line rely on from a :class:`VectorStore`.

A subclass makes a store (:meth:`VectorStoreContract.make_store`); every
collection and alias a test creates is named with a prefix of its own, so a
shared server keeps other tests' collections, and whatever starts with it is
dropped afterwards (:meth:`VectorStoreContract.drop_leftovers`).  The suite
checks: upserts are idempotent by id, count/retrieve/delete/iter_ids agree;
search ranks the nearest first and filters inside the query; a clone is
independent of its source and creating over a name or from a missing one is
refused; an alias swap reports the previous target and refuses a missing one;
dropping is idempotent; export then import reproduces a collection.

What it does not check: hybrid (lexical) search, optimisation, sharding,
disk-full behaviour or concurrency; ``tests/vectorstore`` covers those per
engine.  Vectors are 16-dimensional unit rows drawn from a fixed seed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from freshindex.core.errors import NotFoundError, StoreError
from freshindex.vectorstore import FieldMatch, Filter, PointRecord, VectorStore

DIM = 16


def points(n: int, seed: int = 0) -> list[PointRecord]:
    """``n`` unit vectors with small payloads (``i``, an ``acl`` list, a ``doc``), the same for the same seed."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = rng.normal(size=DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        out.append(PointRecord(str(uuid.UUID(int=seed * 100000 + i + 1)), v.tolist(),
                               {"i": i, "acl": ["eng"] if i % 3 == 0 else ["public"], "doc": f"d{i % 4}"}))
    return out


def vector(point: PointRecord) -> Sequence[float]:
    """``point``'s vector (retrieved ``with_vectors``, or made by :func:`points`)."""
    assert point.vector is not None, f"{point.id} came back without its vector"
    return point.vector


class VectorStoreContract:
    """Subclass as ``TestMyStore(VectorStoreContract)`` and implement :meth:`make_store`."""

    prefix = ""

    def make_store(self, tmp_path: Path, prefix: str) -> VectorStore:
        """A store whose files (if any) live under ``tmp_path``; ``prefix`` starts every name the suite makes."""
        raise NotImplementedError

    def drop_leftovers(self, store: VectorStore, prefix: str) -> None:
        """Drop what a test left behind (every collection named with ``prefix``)."""
        for name in store.list_collections():
            if name.startswith(prefix):
                store.drop_collection(name)

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[VectorStore]:
        prefix = f"t{uuid.uuid4().hex[:8]}_"
        s = self.make_store(tmp_path, prefix)
        self.prefix = prefix
        try:
            yield s
        finally:
            self.drop_leftovers(s, prefix)
            s.close()

    def name(self, base: str) -> str:
        return self.prefix + base

    def test_upsert_count_retrieve_and_delete(self, store: VectorStore) -> None:
        c = self.name("a")
        store.create_collection(c, DIM)
        pts = points(50)
        store.upsert(c, pts)
        store.upsert(c, pts[:10])  # upserting the same ids again adds nothing
        assert store.count(c) == 50
        got = store.retrieve(c, [pts[3].id, str(uuid.uuid4())], with_vectors=True)
        assert [g.id for g in got] == [pts[3].id]
        assert got[0].payload["i"] == 3
        assert np.allclose(vector(got[0]), vector(pts[3]), atol=1e-5)
        store.delete(c, [p.id for p in pts[:5]])
        assert store.count(c) == 45
        assert set(store.iter_ids(c, batch=7)) == {p.id for p in pts[5:]}

    def test_search_ranks_the_nearest_first_and_filters_inside_the_query(self, store: VectorStore) -> None:
        c = self.name("s")
        store.create_collection(c, DIM)
        pts = points(60, seed=1)
        store.upsert(c, pts)
        hits = store.search(c, vector(pts[7]), limit=3, exact=True)
        assert hits[0].id == pts[7].id and hits[0].score == pytest.approx(1.0, abs=1e-4)
        flt = Filter(must=(FieldMatch("acl", ("eng",)),), must_not=(FieldMatch("doc", ("d0",)),))
        filtered = store.search(c, vector(pts[7]), limit=60, flt=flt)
        expected = {p.id for p in pts if flt.matches(p.payload)}
        assert {h.id for h in filtered} == expected

    def test_clone_is_independent_of_its_source(self, store: VectorStore) -> None:
        a, b = self.name("v1"), self.name("v2")
        store.create_collection(a, DIM)
        pts = points(20, seed=2)
        store.upsert(a, pts)
        store.create_collection(b, DIM, clone_from=a)
        store.delete(b, [pts[0].id])
        store.upsert(b, points(3, seed=3))
        assert store.count(a) == 20 and store.count(b) == 22
        with pytest.raises(StoreError):
            store.create_collection(a, DIM)
        with pytest.raises(NotFoundError):
            store.create_collection(self.name("v3"), DIM, clone_from=self.name("missing"))

    def test_alias_swaps_atomically_and_reports_the_previous_target(self, store: VectorStore) -> None:
        a, b, alias = self.name("x1"), self.name("x2"), self.name("kb")
        store.create_collection(a, DIM)
        store.create_collection(b, DIM)
        assert store.get_alias(alias) is None
        assert store.swap_alias(alias, a) is None
        assert store.swap_alias(alias, b) == a
        assert store.get_alias(alias) == b
        with pytest.raises(NotFoundError):
            store.swap_alias(alias, self.name("missing"))
        assert store.get_alias(alias) == b

    def test_drop_removes_a_collection_and_dropping_twice_is_harmless(self, store: VectorStore) -> None:
        c = self.name("d")
        store.create_collection(c, DIM)
        store.drop_collection(c)
        store.drop_collection(c)
        assert c not in store.list_collections()
        with pytest.raises(NotFoundError):
            store.count(c)

    def test_export_then_import_reproduces_the_collection(self, store: VectorStore, tmp_path: Path) -> None:
        a, b = self.name("e1"), self.name("e2")
        store.create_collection(a, DIM)
        pts = points(40, seed=4)
        store.upsert(a, pts)
        store.export_collection(a, tmp_path / "export.bin")
        store.import_collection(b, tmp_path / "export.bin")
        assert store.count(b) == 40
        q = vector(pts[11])
        assert [h.id for h in store.search(a, q, limit=5, exact=True)] == \
            [h.id for h in store.search(b, q, limit=5, exact=True)]
        assert store.retrieve(b, [pts[2].id])[0].payload == pts[2].payload
        with pytest.raises(StoreError):
            store.import_collection(b, tmp_path / "export.bin")


__all__ = ["DIM", "VectorStoreContract", "points", "vector"]
