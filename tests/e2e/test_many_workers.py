"""End to end, many workers: 8 worker processes (two ``freshindex worker -c 4``) on one PostgreSQL registry.

Given three folder sources in two knowledge bases and the hashing embedder,
when every source is synced at once, then some documents are edited,
deleted and added and every source is synced at once again, then: every run
succeeds and is built; PostgreSQL counted no deadlock; the registry's live
chunks are exactly what the parser and chunker give for the final corpus
(nothing lost, nothing extra, nothing pending); each chunk was embedded
once; and each knowledge base's active collection holds exactly the
registry's live chunks.  The measuring and checking code is the load
benchmark's (``bench/workers_load.py``), so the benchmark's "0 lost/dup"
column and this test check the same things.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.workers_load import (
    KBS,
    LockSampler,
    check_consistency,
    deadlocks,
    edit_corpus,
    instance_layout,
    make_corpus,
    sync_round,
    wait_ready,
    workers,
)
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.app import create_app
from tests.conftest import distributed_env

pytestmark = [pytest.mark.services, pytest.mark.slow]

PROCS = 8


@pytest.fixture
def deployment(tmp_path: Path, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple]:
    folders = make_corpus(tmp_path / "corpus", sources=3, docs=15)
    env = distributed_env(tmp_path, pg_url, redis_url, "fi-many", FRESHINDEX_EMBEDDING__PROVIDER="hashing",
                          FRESHINDEX_REGISTRY__POOL_SIZE="2", FRESHINDEX_BROKER__DISPATCH_BATCH="10")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    svc, app = Services(settings), create_app(settings)
    for i, (sid, folder) in enumerate(sorted(folders.items())):
        svc.registry.add_source(sid, kind="folder", location=str(folder), owner="t", kb=KBS[i % len(KBS)])
    try:
        with workers(env, tmp_path, PROCS) as started:
            wait_ready(app, len(instance_layout(PROCS)))
            yield svc, app, folders, pg_url.rsplit("/", 1)[1], started
    finally:
        app.close()
        svc.close()


def test_eight_workers_lose_and_duplicate_no_chunk_and_never_deadlock(deployment, tmp_path: Path) -> None:
    svc, app, folders, db, started = deployment
    before = deadlocks(db)
    rounds = []
    with LockSampler(db) as sampler:
        rounds.append(sync_round(app, svc.registry, sorted(folders), timeout=240))
        edits = edit_corpus(folders, 0.2)
        rounds.append(sync_round(app, svc.registry, sorted(folders), timeout=240))
    time.sleep(1.2)  # backends flush their statistics at most once a second
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("worker*.log"))

    assert all(p.poll() is None for p in started), logs[-3000:]  # no worker died
    assert deadlocks(db) - before == 0
    assert "deadlock detected" not in logs
    assert rounds[0]["document_tasks"] == 45
    assert rounds[1]["document_tasks"] == edits["edited"] + edits["added"]
    for r in rounds:
        assert r["run_status"] == {"succeeded": 3}, r
        assert set(r["build_status"]) <= {"built", "unchanged"}, r
    report = check_consistency(svc, folders)
    assert report["pending_chunks"] == 0 and report["duplicate_outcomes"] == 0, report
    assert report["chunks_embedded"] == report["vector_cache_rows"], report  # every chunk embedded once
    for kb, row in report["kbs"].items():
        assert row["lost"] == row["unexpected"] == 0, (kb, row)
        assert row["registry_servable"] == row["expected_chunks"] > 0, (kb, row)
        assert row["index_points"] == row["registry_live"] and row["index_duplicates"] == 0, (kb, row)
        assert row["index_missing"] == row["index_orphans"] == row["tombstone_backlog"] == 0, (kb, row)
    assert report["ok"] is True
    print(f"8 workers: {rounds[0]['tasks_per_second']} tasks/s, lock waiters in "
          f"{sampler.report(45)['share_of_samples_waiting']:.1%} of samples; pid {os.getpid()}")
