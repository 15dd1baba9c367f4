"""A document task carries a media type only where the plan has one, so a worker of the previous release takes it.

The registry's side (``planned_media`` beside three-element ``planned_keys``)
is :class:`freshindex.testing.RegistryContract`'s
``test_a_plan_keeps_media_types_apart_and_gives_them_back``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from freshindex.core.enums import RunStatus
from freshindex.workers import dispatch
from freshindex.workers.names import TaskName, enqueue_actions


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


def test_fair_dispatch_reads_the_media_types_beside_the_planned_keys() -> None:
    # The summary shape the registry records (RegistryContract checks it on each backend)
    run = SimpleNamespace(status=RunStatus.RUNNING, summary={
        "planned_keys": [["pages/ferry", "e1", 10], ["a.md", "e2", 2], ["b.md", None, 3]],
        "planned_media": {"pages/ferry": "text/html; charset=utf-8"}})
    assert dispatch.planned_documents(run) == [
        ("pages/ferry", "e1", 10, "text/html; charset=utf-8"), ("a.md", "e2", 2, None), ("b.md", None, 3, None)]
    # A plan an older planner recorded has no media types; a closed run gives nothing
    assert dispatch.planned_documents(SimpleNamespace(status=RunStatus.RUNNING, summary={
        "planned_keys": [["a.md", "e2", 2]]})) == [("a.md", "e2", 2, None)]
    assert dispatch.planned_documents(SimpleNamespace(status=RunStatus.SUCCEEDED, summary=run.summary)) is None
