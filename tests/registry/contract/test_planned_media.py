"""Contract: a plan keeps each document's media type beside ``planned_keys``, which stays three elements.

A worker of the previous release reads ``planned_keys`` rows as (key, etag,
size) during a rolling deploy; the media types (the listing's, which pick the
parser of a bare key) live in ``planned_media`` and come back with the
unprocessed documents the reaper resumes and the batches fair dispatch sends.
"""

from __future__ import annotations

from typing import Any

from freshindex.registry import Registry
from freshindex.workers import dispatch
from freshindex.workers.names import TaskName, enqueue_actions
from tests.registry.contract.helpers import add_source


def test_a_plan_keeps_media_types_apart_and_gives_them_back(reg: Registry, fresh) -> None:
    source = add_source(reg, fresh("docs"), fresh("kb"))
    run, _cs = reg.start_sync_run(source.id, "test")
    reg.set_run_planned(run, listed=3, planned=3, documents=[
        ("pages/ferry", "e1", 10, "text/html; charset=utf-8"), ("a.md", "e2", 2, None), ("b.md", None, 3)])
    info = reg.get_sync_run(run)
    assert info.summary["planned_keys"] == [["pages/ferry", "e1", 10], ["a.md", "e2", 2], ["b.md", None, 3]]
    assert info.summary["planned_media"] == {"pages/ferry": "text/html; charset=utf-8"}
    expected = [("pages/ferry", "e1", 10, "text/html; charset=utf-8"), ("a.md", "e2", 2, None), ("b.md", None, 3, None)]
    assert reg.unprocessed_documents(run) == expected
    assert dispatch.planned_documents(info) == expected


def test_a_document_task_carries_a_media_type_only_where_there_is_one() -> None:
    sent: list[tuple[str, list[Any]]] = []

    class App:
        def send_task(self, name: str, args: list[Any]) -> None:
            sent.append((name, args))

    class Run:
        id, changeset_id, source_id = 7, 8, "docs"

    resume = enqueue_actions(App()).resume_document
    assert resume is not None
    resume(Run(), "pages/ferry", "e1", 10, "text/html")  # type: ignore[arg-type]
    resume(Run(), "a.md", "e2", 2, None)  # type: ignore[arg-type]
    assert sent == [(str(TaskName.PROCESS_DOCUMENT), [7, 8, "docs", "pages/ferry", "e1", 10, "text/html"]),
                    (str(TaskName.PROCESS_DOCUMENT), [7, 8, "docs", "a.md", "e2", 2])]  # six: any worker takes it
