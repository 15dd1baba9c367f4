"""Hybrid retrieval (dense + lexical, RRF inside the engine) and payload indexes.

Runs on every store of the ``store`` fixture (Qdrant Edge, qdrant-client local
mode, a server when QDRANT_URL is set).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import qdrant_edge as qe

from freshindex.vectorstore import DENSE, INDEXED_FIELDS, FieldMatch, FieldRange, Filter, PointRecord, VectorStore
from freshindex.vectorstore.edge import EdgeStore
from freshindex.vectorstore.lexical import lexical_text

DIM = 16

#: A settings reference: entries a dense model confuses with each other, each named by its identifier.
SETTINGS = [
    ("DATA_UPLOAD_MAX_MEMORY_SIZE", "The maximum size in bytes that a request body may be before a "
     "SuspiciousOperation is raised. Default: 2621440 (2.5 MB)."),
    ("DATA_UPLOAD_MAX_NUMBER_FIELDS", "The maximum number of parameters that may be received via GET or POST "
     "before a SuspiciousOperation is raised. Default: 1000."),
    ("DATA_UPLOAD_MAX_NUMBER_FILES", "The maximum number of files that may be received via POST in a "
     "multipart/form-data encoded request. Default: 100."),
    ("FILE_UPLOAD_MAX_MEMORY_SIZE", "The maximum size in bytes that an upload will be before it gets streamed to "
     "the file system. Default: 2621440."),
    ("FILE_UPLOAD_PERMISSIONS", "The numeric mode to set newly uploaded files to. Default: 0o644."),
    ("FILE_UPLOAD_TEMP_DIR", "The directory to store data to temporarily while uploading files. Default: None."),
    ("CONN_MAX_AGE", "The lifetime of a database connection, as an integer of seconds. Use 0 to close connections "
     "at the end of each request. Default: 0."),
    ("CONN_HEALTH_CHECKS", "If set to True, existing persistent database connections are health checked before "
     "they are reused. Default: False."),
    ("SESSION_COOKIE_AGE", "The age of session cookies, in seconds. Default: 1209600 (2 weeks)."),
    ("CSRF_COOKIE_AGE", "The age of CSRF cookies, in seconds. Default: 31449600 (approximately 1 year)."),
    ("SECURE_HSTS_SECONDS", "If set to a non-zero integer value, the SecurityMiddleware sets the HTTP Strict "
     "Transport Security header. Default: 0."),
    ("ATOMIC_REQUESTS", "Set this to True to wrap each view in a transaction on this database. Default: False."),
]


def _n(store: VectorStore, name: str) -> str:
    return store.test_prefix + name  # type: ignore[attr-defined]


def _id(i: int) -> str:
    return str(uuid.UUID(int=i + 1))


def _unit(rng: np.random.Generator) -> list[float]:
    v = rng.normal(size=DIM)
    return (v / np.linalg.norm(v)).tolist()


def test_hybrid_finds_the_exact_identifier_that_dense_ranks_lower(store: VectorStore, onnx_embedder) -> None:
    # Given a settings reference embedded by the real model (heading path in the dense text, as the builder does)
    c = _n(store, "settings")
    store.create_collection(c, onnx_embedder.dimension)
    vectors = onnx_embedder.embed([f"Settings > {name}\n{text}" for name, text in SETTINGS])
    store.upsert(c, [
        PointRecord(_id(i), vectors[i].tolist(), {"i": i, "acl": ["public"]},
                    lexical=lexical_text(text=text, heading_path=("Settings", name)))
        for i, (name, text) in enumerate(SETTINGS)
    ])
    for target, question in [(6, "Which value does CONN_MAX_AGE take by default?"),
                             (6, "How do I configure CONN_MAX_AGE?")]:
        q = onnx_embedder.embed([question])[0].tolist()
        # When the same question is searched dense only and hybrid
        dense = store.search(c, q, limit=5)
        hybrid = store.search(c, q, limit=5, text=question)
        # Then dense ranks a look-alike first, hybrid the entry that names the identifier
        assert dense[0].payload["i"] != target
        assert hybrid[0].payload["i"] == target and hybrid[0].fused > hybrid[1].fused
        top = hybrid[0]
        assert top.lexical_rank == 1 and top.lexical is not None and top.lexical > 0 and top.fused is not None
        # and ``score`` stays the dense cosine, so a relevance threshold means what it meant
        by_id = {h.id: h.score for h in store.search(c, q, limit=len(SETTINGS), exact=True)}
        assert all(h.score == pytest.approx(by_id[h.id], abs=1e-3) for h in hybrid)
        assert [h.fused for h in hybrid] == sorted((h.fused for h in hybrid), reverse=True)


def test_filters_apply_inside_both_sides_of_a_hybrid_query(store: VectorStore) -> None:
    # Given a denied chunk that is both the nearest vector and the only lexical match
    c = _n(store, "acl")
    store.create_collection(c, DIM)
    rng = np.random.default_rng(7)
    query = _unit(rng)
    now = datetime.now(UTC)
    points = [PointRecord(_id(0), query, {"acl": ["hr"], "tenant": "a"},
                          lexical="Rotate the PAYROLL_SIGNING_KEY every quarter")]
    points += [PointRecord(_id(i), _unit(rng), {"acl": ["public"], "tenant": "a" if i % 2 else "b"},
                           lexical=f"General guidance paragraph {i}") for i in range(1, 40)]
    # one visible near-duplicate that expired yesterday, one valid until tomorrow
    points.append(PointRecord(_id(40), query, {"acl": ["public"], "tenant": "a",
                                               "valid_until": (now - timedelta(days=1)).isoformat()},
                              lexical="PAYROLL_SIGNING_KEY (old policy)"))
    points.append(PointRecord(_id(41), _unit(rng), {"acl": ["public"], "tenant": "a",
                                                    "valid_until": (now + timedelta(days=1)).isoformat()},
                              lexical="PAYROLL_SIGNING_KEY is rotated by the platform team"))
    store.upsert(c, points)
    flt = Filter(must=(FieldMatch("acl", ("public", "eng")), FieldMatch("tenant", ("a",))),
                 must_not=(FieldRange("valid_until", lte=now),))
    # When a principal without ``hr`` asks for it by name
    hits = store.search(c, query, limit=10, flt=flt, text="PAYROLL_SIGNING_KEY")
    # Then neither side let the denied or the expired chunk through, and the valid match leads lexically
    ids = {h.id for h in hits}
    assert _id(0) not in ids and _id(40) not in ids
    assert all(flt.matches(h.payload) for h in hits) and len(hits) == 10
    assert hits[0].id == _id(41) and hits[0].lexical_rank == 1
    assert [h for h in hits if h.lexical_rank is not None] == [hits[0]]  # no other visible lexical match
    # and without the filter both would be found
    unfiltered = {h.id for h in store.search(c, query, limit=10, text="PAYROLL_SIGNING_KEY")}
    assert {_id(0), _id(40)} <= unfiltered


def test_lexical_idf_is_the_engines_idf_and_absent_under_the_filter_means_absent(store: VectorStore) -> None:
    # Given 12 settings entries; "cookie" occurs in two of them, one readable by HR only
    c = _n(store, "idf")
    store.create_collection(c, DIM)
    rng = np.random.default_rng(3)
    store.upsert(c, [
        PointRecord(_id(i), _unit(rng), {"i": i, "acl": ["hr"] if name == "CSRF_COOKIE_AGE" else ["public"]},
                    lexical=lexical_text(text=text, heading_path=("Settings", name)))
        for i, (name, text) in enumerate(SETTINGS)
    ])
    public = Filter(must=(FieldMatch("acl", ("public",)),))
    # When the refusal asks the engine for the IDF of the question's tokens
    everyone = store.lexical_idf(c, ["cookie", "csrf", "nonexistenttoken"])
    outsider = store.lexical_idf(c, ["cookie", "csrf"], flt=public)
    # Then it is the engine's BM25 IDF over the whole collection (N=12, n=2 for "cookie", n=1 for "csrf")
    assert set(everyone) == {"cookie", "csrf"}
    assert everyone["cookie"] == pytest.approx(np.log(1 + (12 - 2 + 0.5) / (2 + 0.5)), rel=1e-3)
    assert everyone["csrf"] == pytest.approx(np.log(1 + (12 - 1 + 0.5) / (1 + 0.5)), rel=1e-3)
    # and a token only a denied point holds is absent for the caller, while the IDF itself is not filtered
    assert set(outsider) == {"cookie"} and outsider["cookie"] == pytest.approx(everyone["cookie"], rel=1e-6)


def test_a_question_without_lexical_tokens_is_a_dense_search(store: VectorStore) -> None:
    c = _n(store, "plain")
    store.create_collection(c, DIM)
    rng = np.random.default_rng(3)
    pts = [PointRecord(_id(i), _unit(rng), {"acl": ["public"]}, lexical=f"text {i}") for i in range(20)]
    store.upsert(c, pts)
    hits = store.search(c, pts[4].vector, limit=3, text="how do I do it?")
    assert hits[0].id == pts[4].id and hits[0].fused is None


def test_export_import_and_clone_keep_the_lexical_side(store: VectorStore, tmp_path: Path) -> None:
    a, b, d = _n(store, "h1"), _n(store, "h2"), _n(store, "h3")
    store.create_collection(a, DIM)
    rng = np.random.default_rng(5)
    store.upsert(a, [PointRecord(_id(i), _unit(rng), {"acl": ["public"]},
                                 lexical="max_connections" if i == 9 else f"filler {i}") for i in range(30)])
    store.export_collection(a, tmp_path / "h.bin")
    store.import_collection(b, tmp_path / "h.bin")
    store.create_collection(d, DIM, clone_from=a)
    q = _unit(rng)
    for name in (a, b, d):
        hits = store.search(name, q, limit=3, text="max_connections")
        assert hits[0].id == _id(9) and hits[0].lexical_rank == 1, name


def test_payload_indexes_exist_on_every_filtered_field(store: VectorStore) -> None:
    c = _n(store, "idx")
    store.create_collection(c, DIM)
    if isinstance(store, EdgeStore):
        indexes = store.payload_indexes(c)
    elif getattr(store, "local", False):
        pytest.skip("qdrant-client local mode ignores payload indexes (the edge and server cases check them)")
    else:  # a server (QDRANT_URL)
        schema = store.client.get_collection(c).payload_schema  # type: ignore[attr-defined]
        indexes = {k: str(v.data_type.value) for k, v in schema.items()}
        assert schema["tenant"].params.is_tenant is True
    expected = {k: ("keyword" if v == "tenant" else v) for k, v in INDEXED_FIELDS.items()}
    assert indexes == expected


def test_a_clone_of_a_version_without_lexical_vector_or_indexes_gets_them(tmp_path: Path) -> None:
    # Given an edge collection written by an older release: dense vector only, no payload index
    store = EdgeStore(tmp_path / "v")
    old = tmp_path / "v" / "collections" / "old"
    shard = qe.EdgeShard.create(str(old), qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)}, wal_enabled=False))
    rng = np.random.default_rng(11)
    vecs = [_unit(rng) for _ in range(10)]
    shard.update(qe.UpdateOperation.upsert_points([qe.Point(_id(i), {DENSE: vecs[i]}, {"acl": ["public"]})
                                                  for i in range(10)]))
    shard.flush()
    shard.close()
    # When it is searched with text, then cloned and written to
    assert store.search("old", vecs[2], limit=1, text="anything")[0].id == _id(2)  # dense only, no error
    store.create_collection("new", DIM, clone_from="old")
    store.upsert("new", [PointRecord(_id(50), _unit(rng), {"acl": ["public"]}, lexical="CONN_HEALTH_CHECKS")])
    # Then the clone has the lexical vector and every index, and finds the new point by name
    config = json.loads((tmp_path / "v" / "collections" / "new" / "edge_config.json").read_text())
    assert "lexical" in config["sparse_vectors"]
    assert set(store.payload_indexes("new")) == set(INDEXED_FIELDS)
    hit = store.search("new", vecs[0], limit=3, text="CONN_HEALTH_CHECKS")
    assert hit[0].id == _id(50) and hit[0].lexical_rank == 1
    store.close()
