"""A run whose ``dispatch_documents`` continuation waits in the parse queue is not a dead run.

Fair dispatch (workers/dispatch.py) leaves a huge source's next batch to a
continuation queued behind other sources' documents.  While it waits, no
task of its run is running, so nobody renews the run's lease.  Given such a
run on the local Redis (its first batch done, its continuation still
queued) whose lease ran out while other runs are being worked on:

* the reaper resumes it by re-enqueueing the continuation from the run's
  dispatch cursor, not every remaining document at once (which would put the
  whole huge source ahead of the others again) and never by closing it as
  "worker lost", however long the queue makes it wait;
* consumed first-in first-out, every document is processed exactly once
  (the original continuation and the reaper's copy both start at the
  cursor: the first advances it, the other sends nothing) and the run ends;
* with no other run being worked on either (the workers are gone), the old
  rule holds: after ``max_resumes`` reaps without progress the run is closed.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import update

from freshindex.registry.schema import SyncRun
from freshindex.schedules.reaper import reap
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.app import create_app
from freshindex.workers.names import Queue, TaskName, enqueue_actions, queue_name

pytestmark = pytest.mark.services

DOCS, BATCH, LEASE = 20, 4, 60.0


@pytest.fixture
def harness(tmp_path: Path, redis_url: str) -> Iterator[tuple]:
    settings = load_settings(data_dir=tmp_path / "data", broker={
        "url": redis_url, "queue_prefix": f"reap-{uuid.uuid4().hex[:8]}", "dispatch_batch": BATCH},
        embedding={"provider": "hashing"})
    svc = Services(settings)
    app = create_app(settings, services_factory=lambda: svc)
    folder = tmp_path / "huge"
    folder.mkdir()
    for i in range(DOCS):
        (folder / f"doc-{i:03d}.md").write_text(f"# Doc {i}\n\nDocument {i}, text {uuid.uuid4().hex}.\n")
    svc.registry.add_source("huge", kind="folder", location=str(folder), owner="t", kb="default")
    svc.registry.add_source("other", kind="folder", location=str(tmp_path), owner="t", kb="default")
    client = redis.Redis.from_url(redis_url)
    try:
        yield svc, app, client, queue_name(settings, Queue.PARSE)
    finally:
        for q in Queue:
            client.delete(queue_name(settings, q))
        app.close()
        svc.close()


def _messages(client: redis.Redis, queue: str) -> list[tuple[str, list]]:
    """What waits in ``queue``, oldest first (kombu's Redis transport: LPUSH to send, RPOP to take)."""
    out = []
    for raw in reversed(client.lrange(queue, 0, -1)):
        message = json.loads(raw)
        out.append((message["headers"]["task"], json.loads(base64.b64decode(message["body"]))[0]))
    return out


def _take(app, client: redis.Redis, queue: str, *, documents_only: bool = False) -> list[str]:
    """Run what ``queue`` holds FIFO like a worker; returns the keys of the documents processed.
    With ``documents_only`` a continuation is put back (it waits behind other sources)."""
    keys: list[str] = []
    held = []
    while (raw := client.rpop(queue)) is not None:
        message = json.loads(raw)
        task, args = message["headers"]["task"], json.loads(base64.b64decode(message["body"]))[0]
        if task == TaskName.DISPATCH_DOCUMENTS and documents_only:
            held.append(raw)
            continue
        if task == TaskName.PROCESS_DOCUMENT:
            keys.append(args[3])
        app.tasks[task].apply(args=args).get()
    for raw in held:
        client.rpush(queue, raw)  # back at the head, as it was
    return keys


def _lease_runs_out(svc: Services, run_id: int) -> None:
    """The run's lease ran out: its heartbeat is older than the lease (no wall clock waited for)."""
    with svc.registry.session() as s:
        s.execute(update(SyncRun).where(SyncRun.id == run_id)
                  .values(heartbeat_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=10 * LEASE)))


def _waiting_run(svc: Services, app, client: redis.Redis, parse: str) -> int:
    run_id = app.tasks[TaskName.SYNC_SOURCE].apply(args=["huge", "test"]).get()
    done = _take(app, client, parse, documents_only=True)
    assert len(done) == BATCH
    assert [t for t, _ in _messages(client, parse)] == [TaskName.DISPATCH_DOCUMENTS]  # the continuation waits
    return run_id


def test_a_run_waiting_on_its_continuation_is_redispatched_not_failed(harness) -> None:
    svc, app, client, parse = harness
    # Given a run whose first batch is done and whose continuation waits, while another run is worked on
    run_id = _waiting_run(svc, app, client, parse)
    other, _ = svc.registry.start_sync_run("other", "test")
    for round_ in range(5):  # more than max_resumes rounds of waiting
        svc.registry.mark_document_started(other, "elsewhere.md", "worker-2")  # a parse worker takes its work
        _lease_runs_out(svc, run_id)
        # When the reaper finds it stalled
        report = reap(svc.registry, enqueue_actions(app), lease_s=LEASE, max_resumes=3)
        # Then it re-enqueues the continuation from the cursor, and no document
        assert [r.action for r in report.reaped] == ["redispatched"], round_
        queued = _messages(client, parse)
        assert [t for t, _ in queued] == [TaskName.DISPATCH_DOCUMENTS] * (round_ + 2)
        assert {args[3] for _, args in queued} == {BATCH}
        assert svc.registry.get_sync_run(run_id).status == "running"
    # And once the queue reaches them, every document is processed exactly once and the run ends
    rest = _take(app, client, parse)
    assert len(rest) == len(set(rest)) == DOCS - BATCH
    finish = _messages(client, queue_name(svc.settings, Queue.SYNC))
    assert [t for t, _ in finish].count(TaskName.FINISH_SYNC) >= 1
    app.tasks[TaskName.FINISH_SYNC].apply(args=[run_id]).get()
    run = svc.registry.get_sync_run(run_id)
    assert run.status == "succeeded" and run.summary["documents"]["added"] == DOCS


def test_a_duplicate_continuation_sends_nothing(harness) -> None:
    svc, app, client, parse = harness
    run_id = _waiting_run(svc, app, client, parse)
    [(_, args)] = _messages(client, parse)
    assert app.tasks[TaskName.DISPATCH_DOCUMENTS].apply(args=args).get() == BATCH
    # When the same continuation is delivered again (a redelivery, or the reaper's copy)
    before = client.llen(parse)
    assert app.tasks[TaskName.DISPATCH_DOCUMENTS].apply(args=args).get() == 0
    # Then nothing more is queued
    assert client.llen(parse) == before
    assert svc.registry.get_sync_run(run_id).summary["dispatched"] == 2 * BATCH


def test_a_waiting_run_nobody_works_on_is_closed_after_max_resumes(harness) -> None:
    svc, app, client, parse = harness
    # Given a waiting run and no other run renewed by any worker (the workers are gone)
    run_id = _waiting_run(svc, app, client, parse)
    actions = []
    for _ in range(4):
        _lease_runs_out(svc, run_id)
        actions += [r.action for r in reap(svc.registry, enqueue_actions(app), lease_s=LEASE, max_resumes=3).reaped]
    # Then it is redispatched max_resumes times, then closed with its unsent documents recorded as lost
    assert actions == ["redispatched"] * 3 + ["closed"]
    run = svc.registry.get_sync_run(run_id)
    assert run.status == "partial" or run.status == "failed"
    assert len(svc.registry.document_errors(run_id=run_id)) == DOCS - BATCH
    # And the continuations still queued send nothing for the closed run
    assert _take(app, client, parse) == []


def test_a_lost_batch_is_resumed_document_by_document_and_the_rest_by_continuation(harness) -> None:
    svc, app, client, parse = harness
    # Given a run whose first batch was taken by a worker that died (no outcome recorded)
    run_id = app.tasks[TaskName.SYNC_SOURCE].apply(args=["huge", "test"]).get()
    client.delete(parse)
    _lease_runs_out(svc, run_id)
    # When the reaper finds it stalled
    report = reap(svc.registry, enqueue_actions(app), lease_s=LEASE)
    # Then the sent batch comes back document by document, the rest behind one continuation
    assert [r.action for r in report.reaped] == ["resumed"]
    queued = _messages(client, parse)
    assert [t for t, _ in queued] == [TaskName.PROCESS_DOCUMENT] * BATCH + [TaskName.DISPATCH_DOCUMENTS]
    keys = _take(app, client, parse)
    assert len(keys) == len(set(keys)) == DOCS
