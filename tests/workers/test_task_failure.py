"""A document task that fails records the failure against its document, so the run still completes.

``workers.tasks``' shell catches what the document line raises: a permanent
error, a retryable one whose retries are spent, or a bug, and records it
with ``record_failure`` on the real (SQLite) registry; the run then counts
the document as done and the last one sends ``finish_sync``.  A task of a
run that closed meanwhile is fenced: it records nothing and finishes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from freshindex.core.errors import PermanentError, RetryableError
from freshindex.registry import Registry
from freshindex.testing.registry import stage
from freshindex.workers import tasks
from freshindex.workers.names import TaskName


class Shell:
    """The parts of a :class:`workers.task_base.ShellTask` the document shell uses, retries spent."""

    name = "freshindex.process_document"

    def __init__(self, registry: Registry) -> None:
        self.stale: list[tuple[Any, ...]] = []
        observer = SimpleNamespace(stale_task=lambda *a: self.stale.append(a))
        self.services = SimpleNamespace(registry=registry, pipeline=SimpleNamespace(registry=registry,
                                                                                      observer=observer))
        self.settings = SimpleNamespace(broker=SimpleNamespace(stage_queues=False))
        self.sent: list[tuple[TaskName, tuple[Any, ...]]] = []
        self.counted: list[str] = []

    def send(self, name: TaskName, *args: Any) -> None:
        self.sent.append((name, args))

    def count(self, outcome: str) -> None:
        self.counted.append(outcome)

    def can_retry(self) -> bool:
        return False

    def retry_later(self, exc: Exception) -> None:
        raise AssertionError("no retry is left")


def _raising(exc: Exception) -> Callable[..., Any]:
    def process_document(*_: Any) -> Any:
        raise exc
    return process_document


@pytest.mark.parametrize(("exc", "reason", "detail"), [
    (PermanentError("no text in it"), "permanent_error", "no text in it"),
    (RetryableError("store away"), "retries_exhausted", "store away"),
    (ValueError("boom"), "internal_error", "ValueError: boom"),
])
def test_a_failed_document_task_records_the_failure_and_finishes_the_run(
        sqlite_registry: Registry, monkeypatch: pytest.MonkeyPatch, exc: Exception, reason: str, detail: str) -> None:
    # Given a running run that planned two documents, one of them already done
    reg = sqlite_registry
    source = reg.add_source("docs", kind="folder", location="/kb", owner="t", kb="default")
    run, cs = reg.start_sync_run("docs", "test")
    reg.set_run_planned(run, listed=2, planned=2, documents=[("ok.md", "e", 1), ("bad.md", "e1", 3)])
    stage(reg, run, cs, source, "ok.md", ["fine"])
    shell = Shell(reg)
    # When the other document's task fails in the document line
    monkeypatch.setattr(tasks.pipeline, "process_document", _raising(exc))
    result = tasks.process_document(shell, run, cs, "docs", "bad.md", "e1", 3)  # type: ignore[arg-type]
    # Then the failure is recorded against that document, the run counts it done and is sent to finish
    assert result == "failed" and shell.counted == ["failed"]
    assert [(e.key, e.reason, e.detail, e.sync_run_id) for e in reg.document_errors(run)] == [
        ("bad.md", reason, detail, run)]
    assert reg.run_progress(run) == (2, 2)
    assert shell.sent == [(TaskName.FINISH_SYNC, (run,))]
    assert reg.get_sync_run(run).status == "running"  # finishing is finish_sync's, not the failed task's


def test_a_failed_task_of_a_closed_run_records_nothing_and_finishes_nothing(
        sqlite_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run closed (adopted by a later run) while its document task worked
    reg = sqlite_registry
    reg.add_source("docs", kind="folder", location="/kb", owner="t", kb="default")
    run, cs = reg.start_sync_run("docs", "test")
    reg.set_run_planned(run, listed=1, planned=1, documents=[("bad.md", "e1", 3)])
    reg.start_sync_run("docs", "test")
    shell = Shell(reg)
    # When the task fails
    monkeypatch.setattr(tasks.pipeline, "process_document", _raising(PermanentError("no text in it")))
    result = tasks.process_document(shell, run, cs, "docs", "bad.md", "e1", 3)  # type: ignore[arg-type]
    # Then it is counted stale: no failure row, no finish_sync, and the run's stale count moved
    assert result == "stale" and shell.counted == ["stale"]
    assert reg.document_errors(run) == [] and shell.sent == []
    assert reg.get_sync_run(run).stale_tasks == 1
    assert [s[1] for s in shell.stale] == [run]
