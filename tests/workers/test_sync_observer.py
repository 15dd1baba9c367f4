"""The write side's observer: a sync's steps and its build report events, in order, to the one observer the
services give (:mod:`freshindex.health.observer`); the metrics observer still writes the series and log lines."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from freshindex.health.metrics import Metrics
from freshindex.health.observer import EVENTS, MetricsObserver, SyncObserver, SyncObservers
from freshindex.services import Services
from freshindex.settings import load_settings
from freshindex.workers.runner import sync_inline


class Recorder(SyncObservers):
    """Hears every event (through :class:`SyncObservers`' forwarding) and keeps ``(name, args)`` in order."""

    def __init__(self) -> None:
        super().__init__()
        self.heard: list[tuple[str, tuple[Any, ...]]] = []

    def call(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.heard.append((method, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.heard]

    def args(self, name: str) -> list[tuple[Any, ...]]:
        return [args for heard, args in self.heard if heard == name]


def _note(root: Path, name: str, text: str) -> None:
    (root / name).write_text(f"# {name}\n\n{text}\n\n## Owners\n\nThe platform team owns {name} and its pager.\n")


@pytest.fixture
def observed(tmp_path: Path, onnx_embedder: Any) -> Any:
    metrics, recorder = Metrics(), Recorder()
    svc = Services(load_settings(data_dir=tmp_path / "data"), embedder=onnx_embedder, metrics=metrics,
                   sync_observer=SyncObservers(MetricsObserver(metrics), recorder))
    yield svc, recorder
    svc.close()


def test_a_recording_observer_hears_a_sync_and_its_build_in_order(observed: Any, tmp_path: Path) -> None:
    # Given a folder of three notes and services whose observer is the metrics one and a recorder
    svc, recorder = observed
    root = tmp_path / "notes"
    root.mkdir()
    for i, name in enumerate(("a.md", "b.md", "c.md")):
        _note(root, name, f"The rotation window of service {i} is {i + 2} hours.")
    svc.registry.add_source("notes", kind="folder", location=str(root), owner="t", kb="default")

    # When the source is synced and built
    first = sync_inline(svc, "notes")
    assert first.run.status == "succeeded" and first.build_status == "built"

    # Then the steps and the build reported, in order: plan, each document, the run's end, the build
    names = recorder.names()
    assert names[:2] == ["run_started", "run_planned"]
    assert names[-4:] == ["run_finished", "build_started", "swapped", "build_finished"]
    steps = names[2:-4]
    assert sorted(steps) == sorted(["ocr_read", "embedded", "tombstoned", "document_staged"] * 3)
    # each document read and embedded, then its staging heard once written (with its batch, workers/batch.py):
    # never more stagings heard than documents embedded, each right after its tombstones
    assert all(steps[:i].count("embedded") >= steps[:i].count("document_staged") for i in range(len(steps) + 1))
    assert [steps[i - 1] for i, n in enumerate(steps) if n == "document_staged"] == ["tombstoned"] * 3
    assert recorder.args("run_started") == [("notes", first.run.id)]
    assert recorder.args("run_planned")[0][2] == {"listed": 3, "planned": 3, "deleted": 0, "deletions_held": 0,
                                                  "moved": 0, "excluded": 0}
    assert sorted((a[1], a[2]) for a in recorder.args("document_staged")) == [
        ("a.md", "added"), ("b.md", "added"), ("c.md", "added")]
    assert recorder.args("run_finished")[0][:3] == ("notes", first.run.id, "succeeded")
    assert recorder.args("build_finished")[0][:2] == ("default", first.snapshot.id)
    # And the metrics observer beside it still wrote the series
    value = svc.metrics.registry.get_sample_value
    assert value("freshindex_documents_total", {"source": "notes", "outcome": "added"}) == 3
    assert value("freshindex_builds_total", {"kb": "default", "outcome": "built"}) == 1

    # When one note is edited and one deleted, and the source synced again
    recorder.heard.clear()
    _note(root, "a.md", "The rotation window of service 0 is now 9 hours.")
    (root / "c.md").unlink()
    second = sync_inline(svc, "notes")
    assert second.run.status == "succeeded"

    # Then the deletion is heard at planning (tombstones, then the outcome), before the edited document's steps
    names = recorder.names()
    assert names[:4] == ["run_started", "tombstoned", "document_outcome", "run_planned"]
    assert recorder.args("tombstoned")[0][:2] == ("default", "deleted") and recorder.args("tombstoned")[0][2] > 0
    assert recorder.args("document_outcome") == [("notes", "deleted")]
    assert [a[1:3] for a in recorder.args("document_staged")] == [("a.md", "modified")]
    assert names[-4:] == ["run_finished", "build_started", "swapped", "build_finished"]
    assert value("freshindex_documents_total", {"source": "notes", "outcome": "deleted"}) == 1
    assert value("freshindex_tombstones_written_total", {"kb": "default", "reason": "deleted"}) == \
        recorder.args("tombstoned")[0][2]


def test_every_event_is_forwarded_and_an_observer_that_raises_does_not_stop_the_next(
        caplog: pytest.LogCaptureFixture) -> None:
    class Raising(SyncObserver):
        def document_outcome(self, source: str, outcome: str) -> None:
            raise RuntimeError("a broken exporter")

    recorder = Recorder()
    fan = SyncObservers(Raising(), SyncObservers(recorder))
    for name in EVENTS:
        getattr(fan, name)("x")
    assert recorder.names() == list(EVENTS)
    assert any("Raising.document_outcome" in r.getMessage() for r in caplog.records)


def test_the_metrics_observer_writes_the_series_and_log_lines_the_steps_wrote(
        caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    observer = MetricsObserver(metrics)
    value = metrics.registry.get_sample_value
    caplog.set_level(logging.DEBUG)

    observer.document_failed("docs", "a.pdf", "parse_failed", "bad xref")
    observer.document_abandoned("docs", "b.pdf", "died 3 times")
    observer.build_failed("default", "default-v2", "count", "3 points missing")
    observer.standby_busy("default", "fi_default_v1")

    assert value("freshindex_document_errors_total", {"source": "docs", "reason": "parse_failed"}) == 1
    assert value("freshindex_document_errors_total", {"source": "docs", "reason": "worker_crashed"}) == 1
    assert value("freshindex_documents_total", {"source": "docs", "outcome": "failed"}) == 2
    assert value("freshindex_builds_total", {"kb": "default", "outcome": "failed"}) == 1
    assert value("freshindex_verification_failures_total", {"kb": "default", "check": "count"}) == 1
    assert value("freshindex_standby_busy_total", {"kb": "default"}) == 1
    lines = [(r.name, r.levelname, r.getMessage(), getattr(r, "event", None)) for r in caplog.records]
    assert lines == [
        ("freshindex.pipeline", "WARNING", "document failed", "document_failed"),
        ("freshindex.pipeline", "ERROR", "document failed", "document_failed"),
        ("freshindex.build", "ERROR", "build held", "build_failed"),
        ("freshindex.build", "WARNING",
         "a reader still has fi_default_v1 open: copying the active version instead of recycling it", "standby_busy"),
    ]
    failed = caplog.records[0]
    assert (failed.source, failed.key, failed.reason, failed.detail) == ("docs", "a.pdf", "parse_failed", "bad xref")
