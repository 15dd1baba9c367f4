"""Two deliveries of one document task staging at once: the loser retries, it does not fail the document.

With late acknowledgement a task whose broker connection was cut is
delivered again while the first delivery still runs; both insert the same
content-derived rows. On PostgreSQL the second insert waits for the first
transaction and then hits the unique key: that must surface as a retryable
WriteConflictError (the task retries and records the document unchanged),
never as an unexpected error that marks the document failed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from freshindex.core.errors import RetryableError, WriteConflictError
from freshindex.core.ids import document_id
from freshindex.registry import Registry, db
from freshindex.registry.schema import Document
from freshindex.testing.registry import stage as _stage

pytestmark = pytest.mark.services


@pytest.fixture
def pg_registry(pg_url: str) -> Iterator[Registry]:
    engine = db.make_engine(pg_url)
    db.upgrade(engine)
    engine.dispose()
    reg = Registry.open(pg_url)
    yield reg
    reg.close()


def test_a_concurrent_duplicate_stage_is_a_retryable_write_conflict(pg_registry: Registry) -> None:
    reg = pg_registry
    src = reg.add_source("s", kind="folder", location="/kb", owner="t", kb="kb1")
    run, cs = reg.start_sync_run("s", "test")
    doc = document_id("s", "a.md")

    # Given another delivery's transaction that has inserted the document row and not committed yet
    other = reg._sessions()
    other.add(Document(id=doc, source_id="s", key="a.md", state="active", version=1, size=1))
    other.flush()

    # When this delivery stages the same document (it waits on the unique key)
    outcome: list[BaseException | None] = []

    def stage() -> None:
        try:
            _stage(reg, run, cs, src, "a.md", ["alpha text"])
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=stage)
    t.start()
    t.join(timeout=2)
    assert t.is_alive(), "the second insert should wait for the first transaction"
    other.commit()
    other.close()
    t.join(timeout=30)

    # Then it fails as a retryable write conflict, and a retry stages cleanly
    assert len(outcome) == 1 and isinstance(outcome[0], WriteConflictError), outcome
    assert isinstance(outcome[0], RetryableError)
    _stage(reg, run, cs, src, "a.md", ["alpha text"])
    assert reg.get_document(doc).state == "active"
    assert len(reg.live_chunk_ids(doc)) == 1
