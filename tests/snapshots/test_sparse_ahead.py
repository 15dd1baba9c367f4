"""Sparse vectors computed ahead in a worker process (snapshots.sparse_ahead): the same points as in place."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.snapshots import Builder, sparse_ahead
from freshindex.snapshots.sparse_ahead import MIN_POINTS, Pending, SparseAhead
from freshindex.vectorstore import lexical
from freshindex.vectorstore.base import DENSE, LEXICAL
from freshindex.vectorstore.lexical import lexical_text
from freshindex.workers.runner import sync_inline
from tests.snapshots.conftest import ONE_STRATEGY

pytestmark = ONE_STRATEGY  # no build here but full ones: the strategy is not read (tests/snapshots/conftest.py)

TEXTS = ["Set max_connections in postgresql.conf.", "", "DATABASES and CACHES settings", "get_object_or_404()",
         "中文的文本 with mixed words", "the of and"]


def test_worker_vectors_are_the_in_place_ones_in_order() -> None:
    with SparseAhead(0, processes=1) as ahead:
        assert ahead.parallel
        first, second = ahead.submit(TEXTS), ahead.submit(list(reversed(TEXTS)))
        assert second.vectors() == [lexical.document_vector(t) for t in reversed(TEXTS)]
        assert first.vectors() == [lexical.document_vector(t) for t in TEXTS]
        assert ahead.parallel


def test_a_small_build_or_none_asked_computes_in_place() -> None:
    with SparseAhead(MIN_POINTS - 1) as small, SparseAhead(10 * MIN_POINTS, processes=0) as off:
        assert not small.parallel and not off.parallel
        assert off.submit(TEXTS).vectors() == [lexical.document_vector(t) for t in TEXTS]


def test_a_daemonic_process_computes_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    # A prefork worker's child may not start processes: it is not tried (and warned about) on every build.
    monkeypatch.setattr(sparse_ahead.multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True))
    with SparseAhead(10 * MIN_POINTS) as ahead:
        assert not ahead.parallel


def test_a_worker_on_another_lexical_version_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # The spawned worker imports the module afresh: its version is the shipped one, not this process's.
    monkeypatch.setattr(lexical, "LEXICAL_VERSION", "not-" + lexical.LEXICAL_VERSION)
    with SparseAhead(0, processes=1) as ahead:
        vectors = ahead.submit(TEXTS).vectors()
        assert not ahead.parallel
        assert vectors == [lexical.document_vector(t) for t in TEXTS]
        assert ahead.submit(TEXTS[:2]).vectors() == [lexical.document_vector(t) for t in TEXTS[:2]]


def _points(svc: Services, collection: str) -> dict[str, Any]:
    """Every point of ``collection``: payload (less the snapshot id), dense vector, lexical indices and values."""
    shard = svc.store._shard(collection)  # type: ignore[attr-defined]
    ids = sorted(svc.store.iter_ids(collection))
    out = {}
    for r in shard.retrieve(ids, True, True):
        payload = dict(r.payload)
        payload.pop("snapshot_id")
        sparse = r.vector.get(LEXICAL)
        out[str(r.id)] = (payload, list(r.vector[DENSE]),
                          (list(sparse.indices), list(sparse.values)) if sparse is not None else None)
    return out


def test_a_full_build_writes_the_same_points_with_and_without_the_worker(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "src"
    root.mkdir()
    for i in range(7):
        (root / f"page{i}.md").write_text(f"# Page {i}\n\n## Setup\n\nSet `max_connections_{i}` before the "
                                          f"server starts.\n\n## Notes\n\nSee get_object_or_404 and DATABASES.\n")
    (root / "mod.py").write_text("def add_log_level(logger, name, event):\n    return event\n")
    # Batches of three points: the worker works ahead over several batches, as on a large build.
    monkeypatch.setattr(Builder, "_upsert", functools.partialmethod(Builder._upsert, batch=3))
    svc = Services(load_settings(data_dir=tmp_path / "data", embedding={"provider": "hashing"}))
    try:
        svc.registry.add_source("s", kind="folder", location=str(root), owner="t", kb="kb1")
        sync_inline(svc, "s")
        answers: list[bool] = []
        collect = SparseAhead.collect
        monkeypatch.setattr(SparseAhead, "collect",
                            lambda self, future: (lambda got: answers.append(got is not None) or got)(collect(self, future)))
        written = {}
        for processes in (0, 1):
            svc.builder.sparse_processes = processes
            result = svc.builder.build("kb1", full=True)
            assert result.status == "built" and result.point_count > 6
            written[processes] = _points(svc, svc.naming.collection(result.snapshot_id))
        assert written[0] == written[1]
        # Every batch of the worker's build was answered by the worker (none computed in place after a give-up)
        assert len(answers) >= 3 and all(answers)
        # And each point holds its own text's vector, recomputed here from the registry (not the builder's pairing)
        rows = {r.id: r for r in svc.registry.chunk_rows(sorted(written[1]))}
        for point_id, (_payload, _dense, sparse) in written[1].items():
            r = rows[point_id]
            sv = lexical.document_vector(lexical_text(text=r.text, title=r.title, heading_path=r.heading_path,
                                                      key=r.key, meta=r.meta))
            assert sparse is not None and sparse[0] == list(sv.indices)
            assert sparse[1] == pytest.approx(list(sv.values), rel=1e-6)
    finally:
        svc.close()


def test_a_worker_that_does_not_answer_in_time_is_stopped_and_the_vectors_computed_in_place(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker busy with something else (a script without a __main__ guard, run again in it): stands for it here
    with SparseAhead(0, processes=1) as ahead:
        executor = ahead._executor
        assert executor is not None
        ahead.submit(TEXTS).vectors()  # the worker is up
        monkeypatch.setattr(sparse_ahead, "ANSWER_TIMEOUT_S", 0.5)
        processes = list(executor._processes.values())  # type: ignore[union-attr]
        stuck = ahead._executor.submit(time.sleep, 30)  # type: ignore[union-attr]
        vectors = Pending(ahead, TEXTS, stuck).vectors()
        # Then the batch is computed in place, the worker is given up and stopped, not awaited
        assert vectors == [lexical.document_vector(t) for t in TEXTS] and not ahead.parallel
        for process in processes:
            process.join(timeout=10)
            assert not process.is_alive()
