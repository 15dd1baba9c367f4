"""Fair dispatch: one huge source cannot starve the others on the parse queue.

Given a huge source synced just before a small one, on the local Redis with
no worker running, when the parse queue is consumed first-in first-out the
way a worker does (a ``dispatch_documents`` continuation, when taken, is run
and enqueues the next batch; document tasks are only recorded), then the
small source's documents come out after at most one batch of the huge
source's, and every huge-source document is sent exactly once.  With
batching off (``dispatch_batch`` 0) the small source waits behind all of
them: the test of the same consumer proves the difference is the batching.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from freshindex.registry import Registry
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.app import create_app
from freshindex.workers.names import Queue, TaskName, queue_name

pytestmark = pytest.mark.services

HUGE, SMALL, BATCH = 60, 4, 8


def _folder(root: Path, name: str, docs: int) -> Path:
    folder = root / name
    folder.mkdir()
    for i in range(docs):
        (folder / f"{name}-{i:03d}.md").write_text(f"# {name} {i}\n\nDocument {i} of {name}, text {uuid.uuid4().hex}.\n")
    return folder


@pytest.fixture
def harness(tmp_path: Path, redis_url: str, request: pytest.FixtureRequest) -> Iterator[tuple]:
    batch = request.param
    settings = load_settings(data_dir=tmp_path / "data", broker={
        "url": redis_url, "queue_prefix": f"fair-{uuid.uuid4().hex[:8]}", "dispatch_batch": batch},
        embedding={"provider": "hashing"})
    svc = Services(settings)
    app = create_app(settings, services_factory=lambda: svc)
    svc.registry.add_source("huge", kind="folder", location=str(_folder(tmp_path, "huge", HUGE)), owner="t", kb="default")
    svc.registry.add_source("small", kind="folder", location=str(_folder(tmp_path, "small", SMALL)), owner="t", kb="default")
    client = redis.Redis.from_url(redis_url)
    parse = queue_name(settings, Queue.PARSE)
    try:
        yield app, client, parse
    finally:
        for q in Queue:
            client.delete(queue_name(settings, q))
        app.close()
        svc.close()


def _drain(app, client: redis.Redis, queue: str) -> list[tuple[str, str]]:
    """Consume ``queue`` FIFO like a worker (kombu's Redis transport: LPUSH to send, RPOP to take):
    run continuations, record document tasks as (source, key)."""
    order: list[tuple[str, str]] = []
    while (raw := client.rpop(queue)) is not None:
        message = json.loads(raw)
        task = message["headers"]["task"]
        args = json.loads(base64.b64decode(message["body"]))[0]
        if task == TaskName.DISPATCH_DOCUMENTS:
            app.tasks[task].apply(args=args).get()
        else:
            assert task == TaskName.PROCESS_DOCUMENT
            order.append((args[2], args[3]))
    return order


@pytest.mark.parametrize("harness", [BATCH], indirect=True)
def test_a_small_source_waits_behind_one_batch_of_a_huge_one(harness) -> None:
    app, client, parse = harness
    app.tasks[TaskName.SYNC_SOURCE].apply(args=["huge", "test"]).get()
    # Only one batch and its continuation are queued for the huge source, not all of it
    assert client.llen(parse) == BATCH + 1
    app.tasks[TaskName.SYNC_SOURCE].apply(args=["small", "test"]).get()

    order = _drain(app, client, parse)

    small_at = [i for i, (source, _) in enumerate(order) if source == "small"]
    assert len(small_at) == SMALL
    assert max(small_at) < BATCH + SMALL  # after the first huge batch, not after all 60
    huge = [key for source, key in order if source == "huge"]
    assert len(huge) == len(set(huge)) == HUGE  # each huge document sent exactly once


@pytest.mark.parametrize("harness", [0], indirect=True)
def test_without_batching_the_small_source_waits_behind_all_of_the_huge_one(harness) -> None:
    app, client, parse = harness
    app.tasks[TaskName.SYNC_SOURCE].apply(args=["huge", "test"]).get()
    app.tasks[TaskName.SYNC_SOURCE].apply(args=["small", "test"]).get()

    order = _drain(app, client, parse)

    small_at = [i for i, (source, _) in enumerate(order) if source == "small"]
    assert min(small_at) == HUGE  # the starvation the batching removes
    assert len(order) == HUGE + SMALL


@pytest.mark.parametrize("harness", [BATCH], indirect=True)
def test_a_continuation_of_a_closed_run_sends_nothing(harness) -> None:
    app, client, parse = harness
    run_id = app.tasks[TaskName.SYNC_SOURCE].apply(args=["huge", "test"]).get()
    client.delete(parse)  # the first batch and its continuation, taken
    registry = Registry.open(app.freshindex_settings.registry_url)
    try:
        registry.finish_sync_run(run_id, error="closed by the test")  # a finish, or a later run's adoption
        changeset_id = registry.get_sync_run(run_id).changeset_id or 0
    finally:
        registry.close()

    sent = app.tasks[TaskName.DISPATCH_DOCUMENTS].apply(args=[run_id, changeset_id, "huge", BATCH]).get()

    assert sent == 0
    assert client.llen(parse) == 0
