"""A run whose sent *batch* still waits in the parse queue is not a dead run (review findings 1 and 2).

Fair dispatch sends a huge source's documents a batch at a time behind other
sources' work on one FIFO parse queue.  A batch can wait there longer than
the run's lease; nothing renews the run while it waits.  Given such a run on
the local Redis:

* while the parse workers take other runs' work (documents start, batches
  are sent), the reaper re-sends none of the waiting documents and never
  closes the run, however many leases it waits; consumed first-in
  first-out, every document is processed exactly once and the run succeeds;
* a document a worker began and died on (a start marker, no outcome) is
  re-sent once, and its copy then waits like the others (not re-sent again);
* renewals by the sync side only (the planner, a plain heartbeat) are no
  evidence that parse workers are alive: a waiting run is then closed after
  ``max_resumes`` reaps without progress.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import redis

from freshindex.schedules.reaper import reap
from freshindex.workers.names import TaskName, enqueue_actions
from tests.workers import test_reap_dispatch
from tests.workers.test_reap_dispatch import BATCH, DOCS, LEASE, _lease_runs_out, _messages, _waiting_run

harness = test_reap_dispatch.harness  # the fixture: Redis, the registry, an app with fair dispatch on

pytestmark = pytest.mark.services

SMALL = 8  # two batches: the small run stays running while its first batch is worked on


def _add_small(svc, tmp_path: Path) -> None:
    folder = tmp_path / "small"
    folder.mkdir()
    for i in range(SMALL):
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nA small note, number {i}.\n")
    svc.registry.add_source("small", kind="folder", location=str(folder), owner="t", kb="default")


def _take_head(app, client: redis.Redis, queue: str) -> tuple[str, list]:
    """A worker takes the oldest message of ``queue`` and runs it."""
    raw = client.rpop(queue)
    assert raw is not None
    message = json.loads(raw)
    task, args = message["headers"]["task"], json.loads(base64.b64decode(message["body"]))[0]
    app.tasks[task].apply(args=args).get()
    return task, args


def _drain(app, client: redis.Redis, queue: str) -> list[tuple[str, str]]:
    """Run everything ``queue`` holds, FIFO; returns (source, key) of each document processed."""
    done = []
    while client.llen(queue):
        task, args = _take_head(app, client, queue)
        if task == TaskName.PROCESS_DOCUMENT:
            done.append((args[2], args[3]))
    return done


def _huge_documents_queued(client: redis.Redis, parse: str) -> list[str]:
    return [args[3] for t, args in _messages(client, parse) if t == TaskName.PROCESS_DOCUMENT and args[2] == "huge"]


def _reap_huge(svc, app, run_id: int) -> list[str]:
    _lease_runs_out(svc, run_id)
    return [r.action for r in reap(svc.registry, enqueue_actions(app), lease_s=LEASE, max_resumes=3).reaped
            if r.run_id == run_id]


def _ends_with_every_document_once(svc, app, client, parse: str, run_id: int) -> None:
    done = [key for source, key in _drain(app, client, parse) if source == "huge"]
    assert len(done) == len(set(done)), sorted(done)
    app.tasks[TaskName.FINISH_SYNC].apply(args=[run_id]).get()
    run = svc.registry.get_sync_run(run_id)
    assert run.status == "succeeded" and run.summary["documents"]["added"] == DOCS, run.summary


def test_a_batch_waiting_behind_other_work_is_neither_resent_nor_closed(harness, tmp_path: Path) -> None:
    svc, app, client, parse = harness
    _add_small(svc, tmp_path)
    # Given a small source's batch ahead in the parse queue, and then the huge source's first batch
    app.tasks[TaskName.SYNC_SOURCE].apply(args=["small", "test"]).get()
    run_id = app.tasks[TaskName.SYNC_SOURCE].apply(args=["huge", "test"]).get()
    assert len(_huge_documents_queued(client, parse)) == BATCH
    actions = []
    for _ in range(5):  # more than max_resumes leases
        # While a parse worker takes the work ahead of it (first in, first out)
        task, args = _take_head(app, client, parse)
        assert args[2] == "small", task
        # When the huge run's lease runs out and the reaper looks
        actions += _reap_huge(svc, app, run_id)
    # Then nothing of its batch was re-sent (no resume counted) and the run still runs
    assert actions == ["redispatched"] * 5, actions
    assert sorted(_huge_documents_queued(client, parse)) == [f"doc-{i:03d}.md" for i in range(BATCH)]
    assert svc.registry.get_sync_run(run_id).status == "running"
    # And once the queue reaches it, every document is processed exactly once and the run succeeds
    _ends_with_every_document_once(svc, app, client, parse, run_id)


def test_a_document_whose_worker_died_is_resent_once_and_then_waits(harness, tmp_path: Path) -> None:
    svc, app, client, parse = harness
    _add_small(svc, tmp_path)
    app.tasks[TaskName.SYNC_SOURCE].apply(args=["small", "test"]).get()
    run_id = app.tasks[TaskName.SYNC_SOURCE].apply(args=["huge", "test"]).get()
    for _ in range(BATCH + 1):  # the small batch and its continuation are worked on
        assert _take_head(app, client, parse)[1][2] == "small"
    # Given a worker that took the huge run's first document, began on it, and died
    raw = client.rpop(parse)
    message = json.loads(raw)
    args = json.loads(base64.b64decode(message["body"]))[0]
    assert message["headers"]["task"] == TaskName.PROCESS_DOCUMENT and args[2] == "huge"
    svc.registry.mark_document_started(run_id, args[3], "worker-dead")  # what the task does first
    # When the reaper finds the run stalled while other work is being taken
    first = _reap_huge(svc, app, run_id)
    # Then that document (only) is re-sent; the others of its batch are still queued
    assert first == ["resumed"]
    assert sorted(_huge_documents_queued(client, parse)) == [f"doc-{i:03d}.md" for i in range(BATCH)]
    # And the re-sent copy waits like the others: later reaps re-send nothing
    again = _reap_huge(svc, app, run_id) + _reap_huge(svc, app, run_id)
    assert again == ["redispatched", "redispatched"]
    assert len(_huge_documents_queued(client, parse)) == BATCH
    _ends_with_every_document_once(svc, app, client, parse, run_id)


def _small_run(svc) -> int:
    [run] = [r for r in svc.registry.sync_runs("small") if r.status == "running"]
    return run.id


def test_renewals_by_the_sync_side_only_are_no_evidence_of_parse_workers(harness, tmp_path: Path) -> None:
    svc, app, client, parse = harness
    _add_small(svc, tmp_path)
    # Given a huge run waiting on its continuation, and a small run planned (and its first batch sent)
    # by the sync worker, but no parse worker taking anything (they are gone)
    run_id = _waiting_run(svc, app, client, parse)
    app.tasks[TaskName.SYNC_SOURCE].apply(args=["small", "test"]).get()
    small = _small_run(svc)
    actions = []
    for _ in range(5):
        svc.registry.heartbeat_run(small, "sync-worker")  # the sync side renews its run
        svc.registry.set_run_planned(small, listed=SMALL, planned=SMALL)
        actions += _reap_huge(svc, app, run_id)
    # Then the waiting run is closed after max_resumes reaps without progress
    assert actions[:4] == ["redispatched"] * 3 + ["closed"], actions
    assert svc.registry.get_sync_run(run_id).status in ("failed", "partial")
    assert len(svc.registry.document_errors(run_id=run_id)) == DOCS - BATCH
