"""``VectorStore.optimize``: what a builder calls after its bulk writes, before verify and swap.

Edge: a new collection gets int8 quantisation and no HNSW graph; optimize
converts its written segments and answers the same queries with the same
points; a clone of a version built with other index settings is re-indexed
with this store's; a missing collection is NotFoundError.  Local mode: a
no-op.  The server path (wait for status green) runs only with QDRANT_URL.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe

from freshindex.core.errors import NotFoundError, StoreBusyError
from freshindex.vectorstore import DENSE, LEXICAL, FieldMatch, Filter, PointRecord, VectorStore, open_store
from freshindex.vectorstore.edge import EdgeStore

DIM = 32
N = 1500


def _points(n: int = N, seed: int = 3) -> tuple[np.ndarray, list[PointRecord]]:
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    points = [PointRecord(str(uuid.UUID(int=i + 1)), vecs[i].tolist(),
                          {"acl": [f"g{i % 10}"], "tenant": "default", "document_id": f"d{i // 5}"},
                          lexical=f"setting_{i} chunk {i % 7} CONF_{i % 97}")
              for i in range(n)]
    return vecs, points


def _config(store: EdgeStore, name: str) -> dict:
    return json.loads((store.root / "collections" / name / "edge_config.json").read_text())


def _segments(store: EdgeStore, name: str) -> set[str]:
    return {p.name for p in (store.root / "collections" / name / "segments").iterdir()}


def test_a_new_edge_collection_is_quantised_without_a_graph(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path)
    store.create_collection("c", DIM)
    config = _config(store, "c")
    assert config["hnsw_config"]["m"] == 0 and config["hnsw_config"]["payload_m"] == 0
    assert config["quantization_config"]["scalar"]["type"] == "int8"
    assert config["vectors"][DENSE]["memory"] == "cold"  # originals read to rescore only: not warmed on open
    store.close()


def test_optimize_converts_the_segments_and_answers_the_same(tmp_path: Path) -> None:
    # Given a written collection over the indexing threshold
    store = EdgeStore(tmp_path, indexing_threshold_kb=1)
    vecs, points = _points()
    store.create_collection("c", DIM)
    store.upsert("c", points)
    store.flush("c")
    flt = Filter(must=(FieldMatch("acl", ("g3",)),))
    before_segments = _segments(store, "c")
    queries = range(3, 300, 10)

    def answers() -> tuple[list[list[str]], list[str]]:
        dense = [[h.id for h in store.search("c", vecs[i].tolist(), limit=5, flt=flt)] for i in queries]
        hybrid = [store.search("c", vecs[i].tolist(), limit=5, flt=flt, text=f"setting_{i}")[0].id for i in queries]
        return dense, hybrid

    before, before_hybrid = answers()
    # When optimised
    changed = store.optimize("c")
    # Then its segments changed, nothing was lost, and the same queries find the same points
    assert changed is True
    assert _segments(store, "c") != before_segments
    assert store.count("c") == N
    after, after_hybrid = answers()
    assert [a[0] for a in after] == [b[0] for b in before]  # each query's own point stays first
    overlap = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(after, before, strict=True)])
    assert overlap >= 0.9  # int8 scan, rescored: the tail may swap near-ties only
    # (the hybrid tail is full of equal lexical scores, whose order is the segments': only the head is compared)
    assert after_hybrid == before_hybrid
    # And a second call finds nothing to do, and the store reopens it as written
    assert store.optimize("c") is False
    store.close()
    again = EdgeStore(tmp_path, indexing_threshold_kb=1)
    assert again.search("c", vecs[13].tolist(), limit=1, flt=flt)[0].id == points[13].id
    again.close()


def test_writes_after_optimize_are_found_before_and_after_the_next_optimize(tmp_path: Path) -> None:
    # Given an optimised collection (a clone the builder applies a changeset to)
    store = EdgeStore(tmp_path, indexing_threshold_kb=1)
    vecs, points = _points()
    store.create_collection("c", DIM)
    store.upsert("c", points)
    store.optimize("c")
    # When a few points are added and one is deleted
    extra_vecs, extra = _points(20, seed=9)
    extra = [PointRecord(str(uuid.UUID(int=10_000 + i)), p.vector, p.payload, lexical=f"fresh_{i}")
             for i, p in enumerate(extra)]
    store.upsert("c", extra)
    store.delete("c", [points[0].id])
    # Then they are served at once, and still after optimising again
    for when in ("before", "after"):
        hit = store.search("c", extra_vecs[4].tolist(), limit=1, text="fresh_4")
        assert hit[0].id == extra[4].id, when
        assert points[0].id not in {h.id for h in store.search("c", vecs[0].tolist(), limit=5)}, when
        assert store.count("c") == N + 20 - 1, when
        store.optimize("c")
    store.close()


def _old_style(root: Path, name: str, vecs: np.ndarray) -> None:
    """A shard as an older release created it: the engine's default HNSW graph, no quantisation."""
    shard = qe.EdgeShard.create(str(root / "collections" / name), qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)},
        sparse_vectors={LEXICAL: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}, wal_enabled=False))
    shard.update(qe.UpdateOperation.upsert_points(
        [qe.Point(str(uuid.UUID(int=i + 1)), {DENSE: vecs[i].tolist()}, {"acl": ["g0"], "tenant": "default"})
         for i in range(len(vecs))]))
    shard.flush()
    shard.close()


def test_optimize_reindexes_a_collection_built_with_other_settings(tmp_path: Path) -> None:
    vecs, _ = _points(300)
    (tmp_path / "collections").mkdir(parents=True)
    _old_style(tmp_path, "old", vecs)
    store = EdgeStore(tmp_path)
    assert store.search("old", vecs[7].tolist(), limit=1)[0].id == str(uuid.UUID(int=8))  # opened as it was
    store.optimize("old")
    config = _config(store, "old")
    assert config["hnsw_config"]["m"] == 0 and "scalar" in config["quantization_config"]
    assert config["wal_enabled"] is False  # fixed at creation: kept
    assert store.search("old", vecs[7].tolist(), limit=1)[0].id == str(uuid.UUID(int=8))
    assert store.count("old") == 300
    store.close()


def test_a_reindex_keeps_the_cold_original_vectors(tmp_path: Path) -> None:
    # Given a collection written by a store with an HNSW graph (its originals cold, as every new one)
    vecs, points = _points(300)
    first = EdgeStore(tmp_path, hnsw_m=16)
    first.create_collection("c", DIM)
    first.upsert("c", points)
    first.flush("c")
    first.close()
    # When a store with the default index settings re-indexes it
    store = EdgeStore(tmp_path)
    store.optimize("c")
    # Then the index settings are the store's and the originals stay cold
    config = _config(store, "c")
    assert config["hnsw_config"]["m"] == 0
    assert config["vectors"][DENSE]["memory"] == "cold"
    assert store.search("c", vecs[7].tolist(), limit=1)[0].id == str(uuid.UUID(int=8))
    store.close()


def test_reindexing_a_collection_being_queried_is_refused(tmp_path: Path) -> None:
    vecs, _ = _points(50)
    (tmp_path / "collections").mkdir(parents=True)
    _old_style(tmp_path, "old", vecs)
    store = EdgeStore(tmp_path)
    store._inflight["old"] = 1  # a query of this process is reading it
    with pytest.raises(StoreBusyError):
        store.optimize("old")
    store._inflight["old"] = 0
    assert store.optimize("old") in (True, False)
    assert _config(store, "old")["hnsw_config"]["m"] == 0
    store.close()


@pytest.mark.parametrize("kind", ["edge", "local"])
def test_optimize_of_a_missing_collection_is_not_found(kind: str, tmp_path: Path) -> None:
    store: VectorStore = open_store(kind, path=tmp_path / kind)
    with pytest.raises(NotFoundError):
        store.optimize("nope")
    store.close()


def test_local_mode_has_no_optimizer(tmp_path: Path) -> None:
    store = open_store("local", path=tmp_path / "local")
    vecs, points = _points(40)
    store.create_collection("c", DIM)
    store.upsert("c", points)
    assert store.optimize("c") is False
    assert store.search("c", vecs[5].tolist(), limit=1)[0].id == points[5].id
    store.close()


def test_server_optimize_waits_for_green() -> None:
    url = os.environ.get("QDRANT_URL")
    if not url:
        pytest.skip("needs a Qdrant server (QDRANT_URL); none can be installed here")
    store = open_store("server", url=url, api_key=os.environ.get("QDRANT_API_KEY"))
    name = f"t{uuid.uuid4().hex[:8]}_opt"
    vecs, points = _points(200)
    try:
        store.create_collection(name, DIM)
        store.upsert(name, points)
        assert store.optimize(name) in (True, False)
        assert store.search(name, vecs[9].tolist(), limit=1)[0].id == points[9].id
    finally:
        store.drop_collection(name)
        store.close()
