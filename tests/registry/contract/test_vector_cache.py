"""Contract of :class:`registry.protocols.VectorCache` (SQLite and PostgreSQL)."""

from __future__ import annotations

import numpy as np

from freshindex.registry.protocols import VectorCache


def test_a_cached_vector_reads_back_as_the_exact_float32_values(reg: VectorCache, fresh) -> None:
    # Given vectors whose float32 values have no short decimal form
    model = fresh("model")
    rng = np.random.default_rng(7)
    vectors = {f"h{i}": rng.standard_normal(384).astype(np.float32) for i in range(3)}
    # When they are cached and read back
    reg.cache_vectors(model, vectors)
    found = reg.cached_vectors(model, list(vectors))
    # Then every bit is the same and the dtype is float32
    assert set(found) == set(vectors)
    for h, v in vectors.items():
        assert found[h].dtype == np.float32
        assert np.array_equal(found[h], v)


def test_two_model_ids_never_share_an_entry(reg: VectorCache, fresh) -> None:
    a, b = fresh("model-a"), fresh("model-b")
    reg.cache_vectors(a, {"same-hash": np.ones(4, np.float32)})
    assert reg.cached_vectors(b, ["same-hash"]) == {}
    reg.cache_vectors(b, {"same-hash": np.zeros(4, np.float32)})
    assert np.array_equal(reg.cached_vectors(a, ["same-hash"])["same-hash"], np.ones(4, np.float32))
    assert np.array_equal(reg.cached_vectors(b, ["same-hash"])["same-hash"], np.zeros(4, np.float32))


def test_caching_a_hash_again_is_a_no_op_that_keeps_the_first_vector(reg: VectorCache, fresh) -> None:
    model = fresh("model")
    reg.cache_vectors(model, {"h": np.full(8, 0.5, np.float32)})
    reg.cache_vectors(model, {"h": np.full(8, 0.25, np.float32), "h2": np.full(8, 1.0, np.float32)})
    found = reg.cached_vectors(model, ["h", "h2"])
    assert np.array_equal(found["h"], np.full(8, 0.5, np.float32))
    assert np.array_equal(found["h2"], np.full(8, 1.0, np.float32))


def test_unknown_hashes_are_left_out_and_lookups_span_many_batches(reg: VectorCache, fresh) -> None:
    # More hashes than one IN (...) clause holds (500): the batching must not drop any.
    model = fresh("model")
    vectors = {f"h{i:05d}": np.full(2, i, np.float32) for i in range(1_200)}
    reg.cache_vectors(model, vectors)
    found = reg.cached_vectors(model, [*vectors, "missing", "h00001"])
    assert set(found) == set(vectors)
    assert found["h01199"][0] == 1199.0
