"""Batching by token length in the ONNX embedder: same vectors as one text per run, in the caller's order."""

from __future__ import annotations

import random

import numpy as np
import pytest

from freshindex.models.onnx import OnnxMiniLM, plan_batches


def _texts() -> list[str]:
    """Texts of very different token lengths (one over the model's 256-token limit), with a duplicate."""
    rng = random.Random(7)
    words = "migration rollback settings cache queryset template middleware signal admin form".split()
    texts = [" ".join(rng.choice(words) for _ in range(n)) for n in (1, 3, 40, 7, 120, 2, 300, 15, 60, 5)]
    texts += ["", "How do I roll back a migration?", texts[2], "Models are the single source of truth, 模型."]
    return texts


@pytest.fixture(scope="module")
def one_by_one() -> tuple[list[str], np.ndarray]:
    texts = _texts()
    model = OnnxMiniLM(batch_size=1)
    return texts, np.vstack([model.embed([t]) for t in texts])


@pytest.mark.parametrize("batch_size,batch_tokens", [(32, 2048), (4, 2048), (32, 64), (3, 100_000)])
def test_batched_vectors_equal_one_by_one_in_order(one_by_one: tuple[list[str], np.ndarray], batch_size: int,
                                                   batch_tokens: int) -> None:
    texts, expected = one_by_one
    got = OnnxMiniLM(batch_size=batch_size, batch_tokens=batch_tokens).embed(texts)
    assert got.shape == expected.shape
    assert np.max(np.abs(got - expected)) < 1e-5
    # order preserved: row i is text i's vector (texts differ, so rows are told apart)
    sims = got @ expected.T
    assert list(np.argmax(sims, axis=1)[[0, 4, 6, 11]]) == [0, 4, 6, 11]


def test_reversed_input_gives_reversed_rows(one_by_one: tuple[list[str], np.ndarray]) -> None:
    texts, expected = one_by_one
    got = OnnxMiniLM(batch_size=8).embed(texts[::-1])
    assert np.max(np.abs(got - expected[::-1])) < 1e-5


def test_plan_batches_covers_every_index_once_sorted_and_within_budget() -> None:
    rng = random.Random(3)
    lengths = [rng.randint(2, 256) for _ in range(500)]
    batches = plan_batches(lengths, max_texts=32, max_tokens=2048)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(500))
    assert [lengths[i] for i in flat] == sorted(lengths)
    for b in batches:
        padded = len(b) * max(lengths[i] for i in b)
        assert len(b) <= 32
        assert len(b) == 1 or padded <= 2048
        assert padded - sum(lengths[i] for i in b) <= 0.2 * padded


def test_plan_batches_gives_an_oversized_text_its_own_run() -> None:
    batches = plan_batches([10, 5000, 10], max_texts=8, max_tokens=100)
    assert batches == [[0, 2], [1]]


def test_plan_batches_pads_little_on_mixed_lengths() -> None:
    lengths = [2, 250] * 50
    batches = plan_batches(lengths, max_texts=32, max_tokens=8192)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert padded == sum(lengths)  # short and long texts never share a run here


def test_plan_batches_rejects_a_zero_budget() -> None:
    with pytest.raises(ValueError):
        plan_batches([3], max_texts=0)


def test_default_runs_hold_at_most_the_token_budget() -> None:
    # Given the default embedder, its session wrapped to record each run's input shape
    from freshindex.models.onnx import BATCH_TOKENS

    model = OnnxMiniLM()
    model.embed(["load"])
    shapes: list[tuple[int, ...]] = []
    run = model._session.run

    def recording(outputs, feeds):
        shapes.append(feeds["input_ids"].shape)
        return run(outputs, feeds)

    model._session = type("Recording", (), {"run": staticmethod(recording)})()
    # When it embeds 40 texts of about 200 tokens
    words = "migration rollback settings cache queryset template middleware signal admin form".split()
    model.embed([" ".join(words[(i + j) % 10] for j in range(200)) for i in range(40)])
    # Then no run holds more than the default budget of padded tokens (256: a long text runs alone)
    assert BATCH_TOKENS == 256
    assert shapes and all(n * length <= BATCH_TOKENS for n, length in shapes)
    assert sum(n for n, _ in shapes) == 40


@pytest.mark.parametrize("threads", [1, 2])
def test_runs_go_at_once_on_single_threaded_sessions(one_by_one: tuple[list[str], np.ndarray], threads: int) -> None:
    # Given an embedder allowed ``threads`` runs at once, its session wrapped to record the thread of each run
    import threading

    texts, expected = one_by_one
    model = OnnxMiniLM(threads=threads)
    model.embed(["load"])
    assert model._session.get_session_options().intra_op_num_threads == 1
    names: list[str] = []
    run = model._session.run
    barrier = threading.Barrier(threads, timeout=10)

    def recording(outputs, feeds):
        names.append(threading.current_thread().name)
        if threads > 1 and len(names) <= threads:
            barrier.wait()  # the first runs meet here: they are in flight at the same time
        return run(outputs, feeds)

    model._session = type("Recording", (), {"run": staticmethod(recording)})()
    # When it embeds texts of many lengths (several runs)
    got = model.embed(texts)
    # Then the vectors are the one-by-one vectors in order, and two runs went at once only when allowed
    assert np.max(np.abs(got - expected)) < 1e-5
    assert len(names) > threads
    if threads == 1:
        assert set(names) == {threading.current_thread().name}
    else:
        assert len(set(names)) == 2 and all(n.startswith("freshindex-onnx") for n in names)


def test_a_released_model_loads_again_and_a_call_in_flight_keeps_its_session(
        one_by_one: tuple[list[str], np.ndarray]) -> None:
    # Given a loaded embedder whose first run releases the model while the call is in flight
    import threading

    from freshindex.core.types import Releasable

    texts, expected = one_by_one
    model = OnnxMiniLM(threads=1)
    assert isinstance(model, Releasable)
    model.embed(["load"])
    first = model._session
    released = threading.Event()

    class ReleasesMidCall:
        def run(self, outputs, feeds):
            if not released.is_set():
                released.set()
                model.release()
            return first.run(outputs, feeds)

    model._session = ReleasesMidCall()
    # When it embeds many runs: the call finishes on the session it started with
    got = model.embed(texts)
    assert released.is_set() and model._session is None and model._tokenizer is None
    assert np.max(np.abs(got - expected)) < 1e-5
    # Then the next call loads a new session and gives the same vectors
    again = model.embed(texts)
    assert model._session is not None and model._session is not first
    assert np.max(np.abs(again - expected)) < 1e-5


def test_each_load_of_the_model_returns_the_heap_pages_it_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an embedder whose heap trims are counted
    from freshindex.models import onnx

    trims: list[bool] = []
    monkeypatch.setattr(onnx, "trim_heap", lambda: trims.append(True) or True)
    model = OnnxMiniLM(threads=1)
    # When it loads the model, embeds again without loading, then loads it again after a release
    model.embed(["first load"])
    loaded = len(trims)
    model.embed(["no load"])
    model.release()
    model.embed(["second load"])
    # Then the heap was trimmed once per load, never on a call that did not load
    assert loaded == 1
    assert len(trims) == 2
